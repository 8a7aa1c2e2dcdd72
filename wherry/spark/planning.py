"""Offset arithmetic for the source: pure functions over ``{(topic, partition): offset}``.

Spark keeps a streaming source's offsets in its checkpoint as JSON; ours look like Spark's
Kafka source's (``{"topic": {"0": 42, "1": 17}}``; JSON object keys are strings).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    return {
        (topic, int(partition)): int(offset)
        for topic, parts in data.items()
        for partition, offset in parts.items()
    }


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[start, end)`` of one topic-partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def rate_limit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    max_offsets: int,
) -> PartitionOffsets:
    """End offsets that admit at most ``max_offsets`` offsets in all, shared out in proportion
    to what each partition has available (largest remainders get the leftovers), so no
    partition starves and the total never exceeds the limit."""
    available = {tp: max(0, end - start.get(tp, end)) for tp, end in latest.items()}
    total = sum(available.values())
    if total <= max_offsets:
        return dict(latest)
    shares: dict[TopicPartition, int] = {}
    remainders: list[tuple[float, TopicPartition]] = []
    for tp, n in available.items():
        exact = max_offsets * n / total
        whole = min(n, math.floor(exact))
        shares[tp] = whole
        remainders.append((exact - whole, tp))
    left = max_offsets - sum(shares.values())
    for _, tp in sorted(remainders, key=lambda r: (-r[0], r[1])):
        if left <= 0:
            break
        if shares[tp] < available[tp]:
            shares[tp] += 1
            left -= 1
    return {tp: start.get(tp, end) + shares[tp] for tp, end in latest.items()}


def ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    min_partitions: int | None = None,
) -> list[OffsetRange]:
    """The non-empty ranges between two offset maps; with ``min_partitions``, large ranges are
    cut into pieces (in proportion to their size) until there are at least that many."""
    out = [
        OffsetRange(tp[0], tp[1], start[tp], end[tp])
        for tp in sorted(end)
        if tp in start and end[tp] > start[tp]
    ]
    if min_partitions is None or len(out) >= min_partitions or not out:
        return out
    return list(_split(out, min_partitions))


def _split(parts: list[OffsetRange], wanted: int) -> Iterable[OffsetRange]:
    total = sum(r.size for r in parts)
    pieces = [max(1, min(r.size, wanted * r.size // total)) for r in parts]
    while sum(pieces) < wanted:
        # Cut the range whose pieces are largest once more (never below one offset a piece).
        candidates = [i for i, r in enumerate(parts) if pieces[i] < r.size]
        if not candidates:
            break
        i = max(candidates, key=lambda j: parts[j].size / pieces[j])
        pieces[i] += 1
    for r, n_pieces in zip(parts, pieces, strict=True):
        step, extra = divmod(r.size, n_pieces)
        pos = r.start
        for i in range(n_pieces):
            n = step + (1 if i < extra else 0)
            yield OffsetRange(r.topic, r.partition, pos, pos + n)
            pos += n
