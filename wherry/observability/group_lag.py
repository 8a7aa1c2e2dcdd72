"""Consumer group lag as this broker sees it: for each group it coordinates, each committed
partition's lag = the partition's end (its high watermark, the last offset a consumer can read,
as the usual exporters count it) − the committed offset.

The end comes from this broker's own replica of the partition (the leader's HW, or a
follower's, which trails it by at most a fetch); a partition with no replica here has no lag
row (`lag` None): a broker never asks another at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from wherry.group.group import GroupMetadata
from wherry.log.manager import LogManager
from wherry.observability.sources import BrokerSources


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    state: str
    topic: str
    partition: int
    committed: int
    end: int | None

    @property
    def lag(self) -> int | None:
        return None if self.end is None else max(0, self.end - self.committed)


def group_lags(src: BrokerSources) -> Iterator[GroupLag]:
    coordinator = src.groups()
    if coordinator is None:
        return
    lm = src.log_manager()
    for group in sorted(coordinator.local_groups(), key=lambda g: g.group_id):
        yield from lags_of(group, lm)


def lags_of(group: GroupMetadata, lm: LogManager | None) -> Iterator[GroupLag]:
    """One group's committed partitions, by topic and partition."""
    for tp, offset in sorted(group.all_offsets().items()):
        plog = lm.get_log(tp) if lm is not None else None
        yield GroupLag(
            group.group_id,
            str(group.state),
            tp.topic,
            tp.partition,
            offset.committed_offset,
            plog.high_watermark if plog is not None else None,
        )


def group_entry(
    group: str,
    coordinator: int,
    state: str,
    protocol_type: str,
    members: list[dict[str, Any]],
    offsets: list[dict[str, Any]],
) -> dict[str, Any]:
    """One group as the console shows it: `offsets` are {topic, partition, committed, end,
    lag}; its lag is their sum (`lag_complete` false when some partition's end is unknown)."""
    known = [o["lag"] for o in offsets if o["lag"] is not None]
    return {
        "group": group,
        "coordinator": coordinator,
        "state": state,
        "protocol_type": protocol_type,
        "members": members,
        "lag": sum(known) if known or not offsets else None,
        "lag_complete": len(known) == len(offsets),
        "topics": sorted({o["topic"] for o in offsets}),
        "offsets": offsets,
        "stale": False,
    }
