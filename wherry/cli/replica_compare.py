"""What `wherry verify-replicas` compares, without any I/O: the records each replica of a
partition returned, decoded; the first offset where two replicas disagree (offset, key, value,
headers, timestamp); and the lag, as Kafka's ReplicaVerificationTool reports it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from wherry.protocol.records import Record, RecordError, iter_batches, iter_records


def decode_records(data: bytes) -> list[Record]:
    """The records of a Fetch answer's record set (whole batches only: a trailing partial
    batch, which a size-limited Fetch may return, is left out)."""
    out: list[Record] = []
    for pos, header in iter_batches(data):
        if pos + header.size_in_bytes > len(data):
            break
        try:
            out.extend(iter_records(data, pos))
        except RecordError:
            break
    return out


@dataclass(frozen=True, slots=True)
class Divergence:
    """Replica `replica` holds a different record than `reference` at `offset`."""

    topic: str
    partition: int
    offset: int
    reference: int
    replica: int
    field: str

    def describe(self) -> str:
        return (f"Partition {self.topic}-{self.partition}: replica {self.replica}'s record at "
                f"offset {self.offset} does not match replica {self.reference}'s "
                f"({self.field} differs)")


@dataclass(frozen=True, slots=True)
class PartitionCheck:
    topic: str
    partition: int
    lag: int
    """Log end offset of the furthest replica minus that of the one furthest behind."""
    lag_offset: int
    """The log end offset of the replica furthest behind (Kafka's "at offset")."""
    compared: int
    """Offsets compared (present on every replica)."""
    divergence: Divergence | None


def _differing_field(a: Record, b: Record) -> str | None:
    for name in ("offset", "key", "value", "headers", "timestamp"):
        if getattr(a, name) != getattr(b, name):
            return name
    return None


def compare_partition(
    topic: str, partition: int, records: Mapping[int, Sequence[Record]],
    end_offsets: Mapping[int, int],
) -> PartitionCheck:
    """Compare the replicas' records (replica id → records in offset order; the first replica
    in `records` is the reference, normally the leader) at every offset below the smallest
    end offset, and report the first disagreement. A record missing from one replica but
    present on the reference (e.g. below the end offset) is a divergence too."""
    ends = dict(end_offsets)
    low = min(ends.values()) if ends else 0
    lag = (max(ends.values()) - low) if ends else 0
    ids = list(records)
    if not ids:
        return PartitionCheck(topic, partition, lag, low, 0, None)
    reference = ids[0]
    by_offset = {rid: {r.offset: r for r in recs if r.offset < low} for rid, recs in
                 records.items()}
    offsets = sorted(set().union(*(set(m) for m in by_offset.values())))
    for off in offsets:
        ref = by_offset[reference].get(off)
        for rid in ids[1:]:
            other = by_offset[rid].get(off)
            if ref is None and other is None:
                continue
            if ref is None or other is None:
                field = "presence"
            else:
                found = _differing_field(ref, other)
                if found is None:
                    continue
                field = found
            return PartitionCheck(topic, partition, lag, low, len(offsets),
                                  Divergence(topic, partition, off, reference, rid, field))
    return PartitionCheck(topic, partition, lag, low, len(offsets), None)


def max_lag_line(checks: Sequence[PartitionCheck], now: str) -> str:
    """Kafka's report: "<time>: max lag is N for partition t-0 at offset X among N
    partitions"."""
    if not checks:
        return f"{now}: max lag is 0 for partition none at offset 0 among 0 partitions"
    worst = max(checks, key=lambda c: c.lag)
    return (f"{now}: max lag is {worst.lag} for partition {worst.topic}-{worst.partition} at "
            f"offset {worst.lag_offset} among {len(checks)} partitions")
