"""What `wherry groups` knows about consumer groups, in Kafka's terms (pure).

Topic partitions as `(topic, partition)`, Kafka's group state names, the views of a described
group and the rows of `describe`'s offsets table (with the lag).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupState

from wherry.cli.common import CommandError

MISSING = "-"

TP = tuple[str, int]
"""A topic partition as (topic, partition)."""


class CommandFailed(CommandError):
    """A failure while talking to the cluster: `Executing consumer group command failed due to`."""


def tp_str(tp: TP) -> str:
    """Kafka's TopicPartition.toString(): `topic-partition`."""
    return f"{tp[0]}-{tp[1]}"


# --------------------------------------------------------------------------------------------
# Kafka's state names

_STATE_NAMES: dict[ConsumerGroupState, str] = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
_LISTABLE_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})


def state_name(state: Any) -> str:
    """Kafka's name for a confluent-kafka ConsumerGroupState (`Stable`, `Empty`, ...)."""
    if isinstance(state, ConsumerGroupState):
        return _STATE_NAMES[state]
    return str(state) if state is not None else "Unknown"


def parse_states(values: Iterable[str]) -> set[ConsumerGroupState]:
    """`--state` values (comma-separated, case-insensitive) into states; Kafka's error if bad."""
    by_lower = {
        name.lower(): state for state, name in _STATE_NAMES.items() if name in _LISTABLE_STATES
    }
    raw = ",".join(v for v in values if v.strip())
    if not raw:
        return set()
    states = set()
    for part in raw.split(","):
        state = by_lower.get(part.strip().lower())
        if state is None:
            raise CommandError(
                f"Invalid state list '{raw}'. Valid states are: " + ", ".join(_LISTABLE_STATES)
            )
        states.add(state)
    return states


# --------------------------------------------------------------------------------------------
# Views of what the cluster says


@dataclass(frozen=True, slots=True)
class MemberView:
    consumer_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TP, ...]


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    assignor: str
    coordinator: str
    members: tuple[MemberView, ...]

    @property
    def exists(self) -> bool:
        return self.state != "Dead"


@dataclass(frozen=True, slots=True)
class OffsetRow:
    group: str
    topic: str | None
    partition: int | None
    current: int | None
    log_end: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None

    @property
    def lag(self) -> int | None:
        if self.current is None or self.current < 0 or self.log_end is None:
            return None
        return self.log_end - self.current


def offset_rows(
    group: GroupView, committed: Mapping[TP, int], log_end: Mapping[TP, int | None]
) -> list[OffsetRow]:
    """Kafka's describe rows: members with the most partitions first, then committed partitions
    that nobody is assigned (consumer columns `-`); partitions sorted within each block."""
    rows: list[OffsetRow] = []
    assigned: set[TP] = set()
    members = sorted(
        (m for m in group.members if m.assignment), key=lambda m: len(m.assignment), reverse=True
    )
    for m in members:
        assigned.update(m.assignment)
        for tp in sorted(m.assignment):
            rows.append(
                OffsetRow(
                    group.group_id,
                    tp[0],
                    tp[1],
                    committed.get(tp),
                    log_end.get(tp),
                    m.consumer_id,
                    m.host,
                    m.client_id,
                )
            )
    for tp in sorted(set(committed) - assigned):
        rows.append(
            OffsetRow(
                group.group_id,
                tp[0],
                tp[1],
                committed[tp],
                log_end.get(tp),
                MISSING,
                MISSING,
                MISSING,
            )
        )
    return rows
