"""`wherry groups`: a kafka-consumer-groups.sh look-alike speaking the Kafka protocol.

Subcommands: list, describe, delete, reset-offsets. All of them go over the wire through
confluent-kafka's AdminClient and take `--bootstrap-server HOST:PORT`, `--command-config FILE`
(client properties) and `--timeout-ms` (per-request timeout; Kafka's `--timeout` is accepted too).

Output follows Kafka 3.9's tool: the same column names, the same padding rules and the same
messages ("Consumer group 'g' has no active members.", "Assignments can only be reset if the group
'g' is inactive, but the current state is Stable.", ...). Differences, on purpose: every error
goes to stderr as `Error: ...` and makes the command exit with status 1 (Kafka prints some of them
on stdout and exits 0), trailing blanks of table lines are trimmed, and groups and partitions are
printed in sorted order.
"""

from __future__ import annotations

import csv
import io
import re
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from functools import wraps
from pathlib import Path
from typing import Any, NoReturn, ParamSpec, TypeVar

import click
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from wherry.cli.common import (
    DEFAULT_BOOTSTRAP,
    TRANSIENT_ERRORS,
    AdminService,
    CommandError,
    kafka_error_code,
    kafka_error_message,
)

DEFAULT_TIMEOUT_MS = 15_000
MISSING = "-"

TP = tuple[str, int]
"""A topic partition as (topic, partition)."""

P = ParamSpec("P")
R = TypeVar("R")


class CommandFailed(CommandError):
    """A failure while talking to the cluster: `Executing consumer group command failed due to`."""


class GroupErrors(Exception):
    """Per-group errors were already printed; the command must exit with status 1."""


# --------------------------------------------------------------------------------------------
# Kafka names

_STATE_NAMES: dict[ConsumerGroupState, str] = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
_LISTABLE_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
_REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})

# Broker error code -> (Kafka exception class, Kafka's message), for the group errors users meet.
_KAFKA_EXCEPTIONS: dict[int, tuple[str, str]] = {
    KafkaError.NON_EMPTY_GROUP: ("GroupNotEmptyException", "The group is not empty."),
    KafkaError.GROUP_ID_NOT_FOUND: ("GroupIdNotFoundException", "The group id does not exist."),
    KafkaError.INVALID_GROUP_ID: ("InvalidGroupIdException", "The configured groupId is invalid."),
    KafkaError.GROUP_AUTHORIZATION_FAILED: ("GroupAuthorizationException",
                                            "Group authorization failed."),
    KafkaError.COORDINATOR_NOT_AVAILABLE: ("CoordinatorNotAvailableException",
                                           "The coordinator is not available."),
    KafkaError.NOT_COORDINATOR: ("NotCoordinatorException",
                                 "This is not the correct coordinator."),
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS: (
        "CoordinatorLoadInProgressException",
        "The coordinator is loading and hence can't process requests."),
    KafkaError.UNKNOWN_MEMBER_ID: ("UnknownMemberIdException",
                                   "The coordinator is not aware of this member."),
    KafkaError.UNKNOWN_TOPIC_OR_PART: ("UnknownTopicOrPartitionException",
                                       "This server does not host this topic-partition."),
}
_TRANSIENT = TRANSIENT_ERRORS


def state_name(state: Any) -> str:
    """Kafka's name for a confluent-kafka ConsumerGroupState (`Stable`, `Empty`, ...)."""
    if isinstance(state, ConsumerGroupState):
        return _STATE_NAMES[state]
    return str(state) if state is not None else "Unknown"


def parse_states(values: Iterable[str]) -> set[ConsumerGroupState]:
    """`--state` values (comma-separated, case-insensitive) into states; Kafka's error if bad."""
    by_lower = {name.lower(): state for state, name in _STATE_NAMES.items()
                if name in _LISTABLE_STATES}
    raw = ",".join(v for v in values if v.strip())
    if not raw:
        return set()
    states = set()
    for part in raw.split(","):
        state = by_lower.get(part.strip().lower())
        if state is None:
            raise CommandError(f"Invalid state list '{raw}'. Valid states are: "
                               + ", ".join(_LISTABLE_STATES))
        states.add(state)
    return states


def kafka_exception_text(exc: BaseException) -> str:
    """`org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.` where the
    error is one Kafka users know by that name, else librdkafka's message."""
    code = kafka_error_code(exc)
    if code is not None and code in _KAFKA_EXCEPTIONS:
        name, message = _KAFKA_EXCEPTIONS[code]
        return f"org.apache.kafka.common.errors.{name}: {message}"
    return kafka_error_message(exc)


def tp_str(tp: TP) -> str:
    """Kafka's TopicPartition.toString(): `topic-partition`."""
    return f"{tp[0]}-{tp[1]}"


# --------------------------------------------------------------------------------------------
# Argument parsing (pure; errors raised before connecting)


def parse_topic_arg(arg: str) -> tuple[str, tuple[int, ...] | None]:
    """`--topic` value: `t` (all partitions) or `t:0,1,2`."""
    if ":" not in arg:
        if not arg:
            raise CommandError("Invalid topic arg '', expected topic name and partitions")
        return arg, None
    parts = arg.split(":")
    if len(parts) != 2 or not parts[0]:
        raise CommandError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    partitions = []
    for p in parts[1].split(","):
        try:
            partitions.append(int(p.strip()))
        except ValueError as e:
            raise CommandError(
                f"Invalid partition '{p}' specified in topic arg '{arg}'") from e
    return parts[0], tuple(partitions)


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Java's Duration.parse reads it (`PnDTnHnMn.nS`), in ms."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise CommandError(f"Text cannot be parsed to a Duration: {text}")
    sign, days, _t, hours, minutes, seconds, fraction = m.groups()
    total_ms = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000
                + int(minutes or 0) * 60_000)
    secs = int(seconds or 0)
    frac_ms = int((fraction or "").ljust(3, "0")[:3]) if fraction else 0
    total_ms += secs * 1000 + (-frac_ms if seconds and seconds.startswith("-") else frac_ms)
    return -total_ms if sign == "-" else total_ms


def parse_datetime_ms(text: str) -> int:
    """`--to-datetime` (`YYYY-MM-DDTHH:mm:SS.sss`, optional zone `Z`/`+hh:mm`; local time if none)
    into epoch milliseconds."""
    if "T" not in text:
        raise CommandError(
            "Error parsing timestamp. It does not contain a 'T' according to ISO8601 format")
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError as e:
        raise CommandError(f"Unparseable date: \"{text}\"") from e
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()  # naive means the local time zone, as in Kafka
    return int(parsed.timestamp() * 1000)


def parse_reset_plan(text: str, groups: Sequence[str]) -> dict[str, dict[TP, int]]:
    """Kafka's reset CSV: `topic,partition,offset` (one group) or `group,topic,partition,offset`."""
    plan: dict[str, dict[TP, int]] = {}
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or not "".join(row).strip():
            continue
        try:
            if len(row) == 3 and len(groups) == 1:
                group, topic, part, off = groups[0], row[0], row[1], row[2]
            elif len(row) == 4:
                group, topic, part, off = row
            else:
                raise ValueError
            plan.setdefault(group.strip(), {})[(topic.strip(), int(part))] = int(off)
        except ValueError as e:
            raise CommandError(f"Invalid reset plan line {lineno}: {','.join(row)!r}") from e
    return plan


class Scenario(Enum):
    TO_OFFSET = "to-offset"
    SHIFT_BY = "shift-by"
    TO_DATETIME = "to-datetime"
    BY_DURATION = "by-duration"
    TO_EARLIEST = "to-earliest"
    TO_LATEST = "to-latest"
    TO_CURRENT = "to-current"
    FROM_FILE = "from-file"


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """What to reset to. `value` is the offset, the shift or the timestamp (ms), by scenario."""

    scenario: Scenario
    value: int = 0
    plan: Mapping[str, Mapping[TP, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LogOffsets:
    """What the plan needs to know about the partitions (None: unknown)."""

    earliest: Mapping[TP, int | None] = field(default_factory=dict)
    latest: Mapping[TP, int | None] = field(default_factory=dict)
    committed: Mapping[TP, int] = field(default_factory=dict)
    by_time: Mapping[TP, int | None] = field(default_factory=dict)


def _known(offsets: Mapping[TP, int | None], tp: TP, what: str) -> int:
    value = offsets.get(tp)
    if value is None or value < 0:
        raise CommandFailed(f"Error getting {what} of topic partition: {tp_str(tp)}")
    return value


def plan_reset(spec: ResetSpec, group: str, partitions: Iterable[TP], logs: LogOffsets
               ) -> tuple[dict[TP, int], list[str]]:
    """New offsets per partition (clamped to [earliest, latest] like Kafka) and the warnings."""
    warnings: list[str] = []

    def clamp(tp: TP, offset: int) -> int:
        end = logs.latest.get(tp)
        start = logs.earliest.get(tp)
        if end is not None and offset > end:
            warnings.append(f"New offset ({offset}) is higher than latest offset for topic "
                            f"partition {tp_str(tp)}. Value will be set to {end}.")
            return end
        if start is not None and offset < start:
            warnings.append(f"New offset ({offset}) is lower than earliest offset for topic "
                            f"partition {tp_str(tp)}. Value will be set to {start}.")
            return start
        return offset

    out: dict[TP, int] = {}
    for tp in sorted(set(partitions)):
        match spec.scenario:
            case Scenario.TO_EARLIEST:
                out[tp] = _known(logs.earliest, tp, "starting offset")
            case Scenario.TO_LATEST:
                out[tp] = _known(logs.latest, tp, "ending offset")
            case Scenario.TO_CURRENT:
                current = logs.committed.get(tp)
                out[tp] = (current if current is not None
                           else _known(logs.latest, tp, "ending offset"))
            case Scenario.TO_OFFSET:
                out[tp] = clamp(tp, spec.value)
            case Scenario.SHIFT_BY:
                current = logs.committed.get(tp)
                if current is None:
                    raise CommandError(f"Cannot shift offset for partition {tp_str(tp)} since "
                                       "there is no current committed offset")
                out[tp] = clamp(tp, current + spec.value)
            case Scenario.TO_DATETIME | Scenario.BY_DURATION:
                found = logs.by_time.get(tp)
                if found is None or found < 0:
                    warnings.append(f"Partition {tp[1]} from topic {tp[0]} is empty. "
                                    "Falling back to latest known offset.")
                    out[tp] = _known(logs.latest, tp, "offset by timestamp")
                else:
                    out[tp] = found
            case Scenario.FROM_FILE:
                out[tp] = clamp(tp, spec.plan.get(group, {})[tp])
    return out, warnings


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


def _group_view(group_id: str, desc: Any) -> GroupView:
    coord = getattr(desc, "coordinator", None)
    coordinator = (f"{coord.host}:{coord.port}  ({coord.id_string})" if coord is not None
                   else MISSING)
    members = []
    for m in desc.members or ():
        tps = m.assignment.topic_partitions if m.assignment is not None else []
        members.append(MemberView(
            consumer_id=str(m.member_id), group_instance_id=m.group_instance_id or None,
            client_id=str(m.client_id), host=str(m.host),
            assignment=tuple(sorted((str(tp.topic), int(tp.partition)) for tp in tps)),
        ))
    return GroupView(group_id, state_name(getattr(desc, "state", None)),
                     str(desc.partition_assignor or ""), coordinator, tuple(members))


def offset_rows(group: GroupView, committed: Mapping[TP, int],
                log_end: Mapping[TP, int | None]) -> list[OffsetRow]:
    """Kafka's describe rows: members with the most partitions first, then committed partitions
    that nobody is assigned (consumer columns `-`); partitions sorted within each block."""
    rows: list[OffsetRow] = []
    assigned: set[TP] = set()
    members = sorted((m for m in group.members if m.assignment),
                     key=lambda m: len(m.assignment), reverse=True)
    for m in members:
        assigned.update(m.assignment)
        for tp in sorted(m.assignment):
            rows.append(OffsetRow(group.group_id, tp[0], tp[1], committed.get(tp),
                                  log_end.get(tp), m.consumer_id, m.host, m.client_id))
    for tp in sorted(set(committed) - assigned):
        rows.append(OffsetRow(group.group_id, tp[0], tp[1], committed[tp], log_end.get(tp),
                              MISSING, MISSING, MISSING))
    return rows


# --------------------------------------------------------------------------------------------
# Rendering (Kafka's printf formats; a leading empty line like Kafka's "\n%-15s ...")


def _s(value: object) -> str:
    return MISSING if value is None else str(value)


def _table(widths: Sequence[int], rows: Iterable[Sequence[object]]) -> list[str]:
    """Java's `%-Ns` columns joined by one blank, last column unpadded; trailing blanks cut."""
    lines = []
    for row in rows:
        cells = [_s(c) for c in row]
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
        lines.append(" ".join([*padded, cells[-1]]).rstrip())
    return lines


def render_offsets(rows: Sequence[OffsetRow]) -> str:
    group_w = max([15, *(len(r.group) for r in rows)])
    topic_w = max([15, *(len(_s(r.topic)) for r in rows)])
    consumer_w = max([15, *(len(_s(r.consumer_id)) for r in rows)])
    host_w = max([15, *(len(_s(r.host)) for r in rows)])
    widths = (group_w, topic_w, 10, 15, 15, 15, consumer_w, host_w)
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "HOST", "CLIENT-ID")
    body = [(r.group, r.topic, r.partition, r.current, r.log_end, r.lag, r.consumer_id, r.host,
             r.client_id) for r in rows]
    return "\n" + "\n".join(_table(widths, [header, *body])) + "\n"


def assignment_text(assignment: Iterable[TP]) -> str:
    """Kafka 3.9's ASSIGNMENT column: `topic(0,1), other(2)`; `-` when nothing is assigned."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    if not by_topic:
        return MISSING
    return ", ".join(sorted(f"{t}({','.join(str(p) for p in sorted(ps))})"
                            for t, ps in by_topic.items()))


def render_members(group: GroupView, verbose: bool) -> str:
    members = group.members
    with_instance = any(m.group_instance_id for m in members)
    widths = [max([15, len(group.group_id)]), max([15, *(len(m.consumer_id) for m in members)])]
    header: list[str] = ["GROUP", "CONSUMER-ID"]
    if with_instance:
        widths.append(max([17, *(len(m.group_instance_id or "") for m in members)]))
        header.append("GROUP-INSTANCE-ID")
    widths += [max([15, *(len(m.host) for m in members)]),
               max([15, *(len(m.client_id) for m in members)]), 15]
    header += ["HOST", "CLIENT-ID", "#PARTITIONS"]
    rows: list[list[object]] = []
    for m in members:
        row: list[object] = [group.group_id, m.consumer_id]
        if with_instance:
            row.append(m.group_instance_id or "")
        row += [m.host, m.client_id, len(m.assignment)]
        rows.append(row)
    if verbose:
        header.append("ASSIGNMENT")
        for row, m in zip(rows, members, strict=True):
            row.append(assignment_text(m.assignment))
    else:
        widths = widths[:-1]
    return "\n" + "\n".join(_table(widths, [header, *rows])) + "\n"


def render_state(group: GroupView) -> str:
    widths = (max(15, len(group.group_id)), max(25, len(group.coordinator)), 20, 20)
    header = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
    row = (group.group_id, group.coordinator, group.assignor or MISSING, group.state,
           len(group.members))
    return "\n" + "\n".join(_table(widths, [header, row])) + "\n"


def render_group_states(listing: Sequence[tuple[str, str]]) -> str:
    widths = (max([15, *(len(g) for g, _ in listing)]),)
    return "\n".join(_table(widths, [("GROUP", "STATE"), *listing])) + "\n"


def render_reset(plans: Mapping[str, Mapping[TP, int]]) -> str:
    group_w = max([15, *(len(g) for g in plans)])
    topic_w = max([15, *(len(tp[0]) for plan in plans.values() for tp in plan)])
    rows: list[Sequence[object]] = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
    for group, plan in plans.items():
        rows += [(group, tp[0], tp[1], off) for tp, off in sorted(plan.items())]
    return "\n" + "\n".join(_table((group_w, topic_w, 10), rows)) + "\n"


def render_reset_csv(plans: Mapping[str, Mapping[TP, int]], with_group: bool) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for group, plan in plans.items():
        for tp, off in sorted(plan.items()):
            writer.writerow([group, tp[0], tp[1], off] if with_group else [tp[0], tp[1], off])
    return out.getvalue()


# --------------------------------------------------------------------------------------------
# The cluster


class GroupService(AdminService):
    """The admin calls of `wherry groups`."""

    CLIENT_ID = "wherry-groups"
    FAILURE = CommandFailed

    def list_groups(self, states: set[ConsumerGroupState] | None = None) -> list[tuple[str, str]]:
        """(group id, Kafka state name), sorted by group id."""
        kwargs: dict[str, Any] = {"request_timeout": self.timeout_s}
        if states:
            kwargs["states"] = states
        result = self._wait(self.admin.list_consumer_groups(**kwargs), "listGroups")
        if result.errors and not result.valid:
            err = result.errors[0]
            if err.code() in _TRANSIENT:
                raise CommandFailed(f"{self._timeout_message('listGroups')} ({err.str()})")
            raise KafkaException(err)
        return sorted((str(g.group_id), state_name(getattr(g, "state", None)))
                      for g in result.valid)

    def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupView]:
        """Unknown groups come back Dead (as from a Kafka 3.9 broker)."""
        if not group_ids:
            return {}
        futs = self.admin.describe_consumer_groups(list(group_ids),
                                                   request_timeout=self.timeout_s)
        out = {}
        for group_id, fut in futs.items():
            try:
                out[group_id] = _group_view(group_id, self._wait(fut, "describeGroups"))
            except KafkaException as e:
                if kafka_error_code(e) != KafkaError.GROUP_ID_NOT_FOUND:
                    raise
                out[group_id] = GroupView(group_id, "Dead", "", MISSING, ())
        return out

    def committed_offsets(self, group_id: str) -> dict[TP, int]:
        futs = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout_s)
        result = self._wait(futs[group_id], "listConsumerGroupOffsets")
        out = {}
        for tp in result.topic_partitions or ():
            if tp.error is None and tp.offset >= 0:
                out[(str(tp.topic), int(tp.partition))] = int(tp.offset)
        return out

    def log_offsets(self, partitions: Collection[TP], spec: OffsetSpec) -> dict[TP, int | None]:
        """ListOffsets for each partition; None where the broker has no answer."""
        if not partitions:
            return {}
        request = {TopicPartition(t, p): spec for t, p in partitions}
        futs = self.admin.list_offsets(request, request_timeout=self.timeout_s)
        out: dict[TP, int | None] = {}
        for tp, fut in futs.items():
            key = (str(tp.topic), int(tp.partition))
            try:
                out[key] = int(self._wait(fut, "listOffsets").offset)
            except KafkaException:
                out[key] = None
        return out

    def topic_partitions(self) -> dict[str, list[int]]:
        """Every topic's partition ids (a metadata request for all topics creates none)."""
        try:
            md = self.admin.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            if kafka_error_code(e) in _TRANSIENT:
                raise CommandFailed(
                    f"{self._timeout_message('describeTopics')} ({kafka_error_message(e)})"
                ) from e
            raise
        return {name: sorted(int(p) for p in t.partitions)
                for name, t in md.topics.items() if t.error is None}

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, BaseException | None]:
        futs = self.admin.delete_consumer_groups(list(group_ids),
                                                 request_timeout=self.timeout_s)
        out: dict[str, BaseException | None] = {}
        for group_id, fut in futs.items():
            try:
                self._wait(fut, "deleteConsumerGroups")
                out[group_id] = None
            except KafkaException as e:
                out[group_id] = e
        return out

    def alter_offsets(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        if not offsets:
            return
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, off) for (t, p), off in sorted(offsets.items())])
        futs = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
        result = self._wait(futs[group_id], "alterConsumerGroupOffsets")
        for tp in result.topic_partitions or ():
            if tp.error is not None:
                raise KafkaException(tp.error)


# --------------------------------------------------------------------------------------------
# Click plumbing


def _fail(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


def _handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except CommandFailed as e:
            _fail(f"Executing consumer group command failed due to {e}")
        except CommandError as e:
            _fail(str(e))
        except KafkaException as e:
            _fail(f"Executing consumer group command failed due to {kafka_exception_text(e)}")
        except GroupErrors:
            sys.exit(1)

    return wrapper


def _common_options(fn: Callable[P, R]) -> Callable[P, R]:
    fn = click.option(
        "--timeout-ms", "--timeout", "timeout_ms", type=click.IntRange(min=100),
        default=DEFAULT_TIMEOUT_MS, show_default=True,
        help="Timeout of each request to the cluster, in ms.",
    )(fn)
    fn = click.option(
        "--command-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Property file with configs passed to the admin client.",
    )(fn)
    fn = click.option(
        "--bootstrap-server", default=DEFAULT_BOOTSTRAP, show_default=True, metavar="HOST:PORT",
        help="The Kafka server(s) to connect to.",
    )(fn)
    return fn


def _group_options(fn: Callable[P, R]) -> Callable[P, R]:
    fn = click.option("--all-groups", is_flag=True, help="Apply to all consumer groups.")(fn)
    fn = click.option("--group", "groups", multiple=True, metavar="GROUP",
                      help="The consumer group (repeatable).")(fn)
    return fn


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _selected_groups(action: str, groups: Sequence[str], all_groups: bool) -> None:
    if groups and all_groups:
        raise CommandError('Option "[group]" can\'t be used with option "[all-groups]"')
    if not groups and not all_groups:
        raise CommandError(f"Option [{action}] takes one of these options: "
                           "[all-groups], [group]")


def _resolve_groups(svc: GroupService, groups: Sequence[str], all_groups: bool) -> list[str]:
    return [g for g, _ in svc.list_groups()] if all_groups else _unique(groups)


def _should_print(group: GroupView, rows: int) -> bool:
    """Kafka's shouldPrintMemberState: messages for Dead/Empty/rebalancing groups."""
    if not group.exists:
        click.echo(f"Error: Consumer group '{group.group_id}' does not exist.", err=True)
        return False
    if group.state == "Empty":
        click.echo(f"\nConsumer group '{group.group_id}' has no active members.", err=True)
    elif group.state in _REBALANCING:
        click.echo(f"\nWarning: Consumer group '{group.group_id}' is rebalancing.", err=True)
    return rows > 0


# --------------------------------------------------------------------------------------------
# Commands


@click.group()
def groups() -> None:
    """List, describe, delete consumer groups or reset their offsets (like
    kafka-consumer-groups.sh)."""


@groups.command(name="list")
@_common_options
@click.option("--state", "states", multiple=True, is_flag=False, flag_value="",
              metavar="[STATE[,STATE...]]",
              help="Show each group's state; with a value, only groups in these states.")
@_handle_errors
def list_(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
          states: tuple[str, ...]) -> None:
    """List consumer groups, one per line."""
    wanted = parse_states(states)
    svc = GroupService.connect(bootstrap_server, command_config, timeout_ms)
    listing = svc.list_groups(wanted)
    if states:
        click.echo(render_group_states(listing), nl=False)
    else:
        for group_id, _ in listing:
            click.echo(group_id)


@groups.command()
@_common_options
@_group_options
@click.option("--members", is_flag=True, help="Describe the members of the group.")
@click.option("--state", is_flag=True, help="Describe the state of the group.")
@click.option("--offsets", is_flag=True,
              help="Describe the group's offsets per partition (the default).")
@click.option("--verbose", is_flag=True, help="With --members: each member's assignment.")
@_handle_errors
def describe(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
             groups: tuple[str, ...], all_groups: bool, members: bool, state: bool,
             offsets: bool, verbose: bool) -> None:
    """Describe consumer groups: offsets and lag (default), --members or --state."""
    _selected_groups("describe", groups, all_groups)
    if members + state + offsets > 1:
        raise CommandError("Option [describe] takes at most one of these options: "
                           "[members], [offsets], [state]")
    svc = GroupService.connect(bootstrap_server, command_config, timeout_ms)
    views = svc.describe_groups(_resolve_groups(svc, groups, all_groups))
    failed = False
    for group_id in sorted(views):
        group = views[group_id]
        failed |= not group.exists
        if members:
            if _should_print(group, len(group.members)):
                click.echo(render_members(group, verbose), nl=False)
        elif state:
            if _should_print(group, 1):
                click.echo(render_state(group), nl=False)
        else:
            rows: list[OffsetRow] = []
            if group.exists:
                committed = svc.committed_offsets(group_id)
                wanted = set(committed) | {tp for m in group.members for tp in m.assignment}
                log_end = svc.log_offsets(wanted, OffsetSpec.latest())
                rows = offset_rows(group, committed, log_end)
            if _should_print(group, len(rows)):
                click.echo(render_offsets(rows), nl=False)
    if failed:
        raise GroupErrors


@groups.command()
@_common_options
@_group_options
@_handle_errors
def delete(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
           groups: tuple[str, ...], all_groups: bool) -> None:
    """Delete consumer groups (only groups without active members)."""
    _selected_groups("delete", groups, all_groups)
    svc = GroupService.connect(bootstrap_server, command_config, timeout_ms)
    ids = _resolve_groups(svc, groups, all_groups)
    if not ids:
        return
    results = svc.delete_groups(ids)
    done = [g for g in ids if results.get(g) is None]
    failed = {g: e for g in ids if (e := results.get(g)) is not None}
    quoted = ", ".join(f"'{g}'" for g in done)
    if not failed:
        click.echo(f"Deletion of requested consumer groups ({quoted}) was successful.")
        return
    click.echo("Error: Deletion of some consumer groups failed:", err=True)
    for g, e in failed.items():
        click.echo(f"* Group '{g}' could not be deleted due to: {kafka_exception_text(e)}",
                   err=True)
    if done:
        click.echo(f"\nThese consumer groups were deleted successfully: {quoted}")
    raise GroupErrors


def _reset_spec(to_offset: int | None, shift_by: int | None, to_datetime: str | None,
                by_duration: str | None, to_earliest: bool, to_latest: bool, to_current: bool,
                from_file: Path | None, groups: Sequence[str], now_ms: int) -> ResetSpec:
    chosen = [name for name, given in (
        ("to-offset", to_offset is not None), ("shift-by", shift_by is not None),
        ("to-datetime", to_datetime is not None), ("by-duration", by_duration is not None),
        ("to-earliest", to_earliest), ("to-latest", to_latest), ("to-current", to_current),
        ("from-file", from_file is not None)) if given]
    if not chosen:
        raise CommandError(
            "Option [reset-offsets] requires one of the following scenarios: " + ", ".join(
                f"[{s.value}]" for s in Scenario))
    if len(chosen) > 1:
        raise CommandError(f'Option "[{chosen[0]}]" can\'t be used with option "[{chosen[1]}]"')
    scenario = Scenario(chosen[0])
    match scenario:
        case Scenario.TO_OFFSET:
            return ResetSpec(scenario, int(to_offset or 0))
        case Scenario.SHIFT_BY:
            return ResetSpec(scenario, int(shift_by or 0))
        case Scenario.TO_DATETIME:
            return ResetSpec(scenario, parse_datetime_ms(to_datetime or ""))
        case Scenario.BY_DURATION:
            return ResetSpec(scenario, now_ms - parse_duration_ms(by_duration or ""))
        case Scenario.FROM_FILE:
            assert from_file is not None
            try:
                text = from_file.read_text(encoding="utf-8")
            except OSError as e:
                raise CommandError(f"Cannot read {from_file}: {e.strerror or e}") from e
            return ResetSpec(scenario, plan=parse_reset_plan(text, groups))
        case _:
            return ResetSpec(scenario)


def _partitions_to_reset(spec: ResetSpec, group_id: str,
                         topic_args: Sequence[tuple[str, tuple[int, ...] | None]],
                         all_topics: bool, committed: Mapping[TP, int],
                         known: Mapping[str, Sequence[int]]) -> list[TP]:
    if spec.scenario is Scenario.FROM_FILE:
        wanted = list(spec.plan.get(group_id, {}))
        if not wanted:
            click.echo(f"Error: No reset plan for group {group_id} found.", err=True)
    elif all_topics:
        wanted = list(committed)
    else:
        wanted = []
        for topic, parts in topic_args:
            if parts is None:
                if topic not in known:
                    raise CommandFailed(
                        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
                        "This server does not host this topic-partition.")
                wanted += [(topic, p) for p in known[topic]]
            else:
                wanted += [(topic, p) for p in parts]
    missing = [tp for tp in dict.fromkeys(wanted) if tp[1] not in known.get(tp[0], ())]
    if missing:
        raise CommandFailed(
            "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: The partitions \""
            + ",".join(tp_str(tp) for tp in missing) + "\" do not exist")
    return sorted(set(wanted))


def _log_offsets_for(svc: GroupService, spec: ResetSpec, partitions: Sequence[TP],
                     committed: Mapping[TP, int]) -> LogOffsets:
    s = spec.scenario
    earliest = latest = by_time = {}
    if s in (Scenario.TO_EARLIEST, Scenario.TO_OFFSET, Scenario.SHIFT_BY, Scenario.FROM_FILE):
        earliest = svc.log_offsets(partitions, OffsetSpec.earliest())
    if s is not Scenario.TO_EARLIEST:
        latest = svc.log_offsets(partitions, OffsetSpec.latest())
    if s in (Scenario.TO_DATETIME, Scenario.BY_DURATION):
        by_time = svc.log_offsets(partitions, OffsetSpec.for_timestamp(spec.value))
    return LogOffsets(earliest, latest, committed, by_time)


@groups.command(name="reset-offsets")
@_common_options
@_group_options
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,P...]",
              help="Topic (optionally with partitions) whose offsets to reset (repeatable).")
@click.option("--all-topics", is_flag=True, help="All topics the group has offsets for.")
@click.option("--to-offset", type=int, help="Reset to this offset (clamped to the log).")
@click.option("--shift-by", type=int, help="Shift the committed offsets by N (may be < 0).")
@click.option("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
              help="Reset to the first offset at or after this time.")
@click.option("--by-duration", metavar="PnDTnHnMnS",
              help="Reset to the first offset at or after now minus this duration.")
@click.option("--to-earliest", is_flag=True, help="Reset to the earliest offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the latest offset.")
@click.option("--to-current", is_flag=True, help="Reset to the current committed offset.")
@click.option("--from-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="CSV plan: topic,partition,offset (or group,topic,partition,offset).")
@click.option("--dry-run", is_flag=True, help="Only show the new offsets (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
@click.option("--export", is_flag=True, help="Print the new offsets as CSV (a --from-file plan).")
@_handle_errors
def reset_offsets(
    bootstrap_server: str, command_config: Path | None, timeout_ms: int,
    groups: tuple[str, ...], all_groups: bool, topics: tuple[str, ...], all_topics: bool,
    to_offset: int | None, shift_by: int | None, to_datetime: str | None,
    by_duration: str | None, to_earliest: bool, to_latest: bool, to_current: bool,
    from_file: Path | None, dry_run: bool, execute: bool, export: bool,
) -> None:
    """Reset the committed offsets of inactive groups."""
    if dry_run and execute:
        raise CommandError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
    _selected_groups("reset-offsets", groups, all_groups)
    spec = _reset_spec(to_offset, shift_by, to_datetime, by_duration, to_earliest, to_latest,
                       to_current, from_file, groups, int(time.time() * 1000))
    if topics and all_topics:
        raise CommandError('Option "[topic]" can\'t be used with option "[all-topics]"')
    if not topics and not all_topics and spec.scenario is not Scenario.FROM_FILE:
        raise CommandError("One of the reset scopes should be defined: --all-topics, --topic.")
    topic_args = [parse_topic_arg(t) for t in topics]
    if not execute and not dry_run:
        click.echo("WARN: No action will be performed as the --execute option is missing. "
                   "In a future major release, the default behavior of this command will be to "
                   "prompt the user before executing the reset rather than doing a dry run. You "
                   "should add the --dry-run option explicitly if you are scripting this command "
                   "and want to keep the current default behavior without prompting.", err=True)

    svc = GroupService.connect(bootstrap_server, command_config, timeout_ms)
    ids = _resolve_groups(svc, groups, all_groups)
    views = svc.describe_groups(ids)
    known = svc.topic_partitions() if ids else {}
    plans: dict[str, dict[TP, int]] = {}
    refused = False
    for group_id in ids:
        group = views[group_id]
        if group.state not in ("Empty", "Dead"):
            click.echo(f"Error: Assignments can only be reset if the group '{group_id}' is "
                       f"inactive, but the current state is {group.state}.", err=True)
            refused = True
            continue
        needs_committed = all_topics or spec.scenario in (Scenario.SHIFT_BY,
                                                          Scenario.TO_CURRENT)
        committed = svc.committed_offsets(group_id) if needs_committed else {}
        partitions = _partitions_to_reset(spec, group_id, topic_args, all_topics, committed,
                                          known)
        logs = _log_offsets_for(svc, spec, partitions, committed)
        plan, warnings = plan_reset(spec, group_id, partitions, logs)
        for w in warnings:
            click.echo(f"WARN: {w}", err=True)
        if execute:
            svc.alter_offsets(group_id, plan)
        plans[group_id] = plan
    if plans:
        if export:
            click.echo(render_reset_csv(plans, with_group=len(ids) > 1))
        else:
            click.echo(render_reset(plans), nl=False)
    if refused:
        raise GroupErrors
