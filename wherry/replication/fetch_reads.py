"""What a fetch reads and answers, partition by partition, and a fetch session's share of it.

`FetchPartition` (what to read), `FetchPartitionResult` / `FetchResult` (what was read, bytes or a
file region), the isolation levels, and the KIP-227 selection over a `FetchSession`: which cached
partitions to read (`session_partitions`), which have news (`has_news`), and which answers an
incremental fetch carries (`select_for_session`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.file_region import FileRegion
from wherry.log.log import Log
from wherry.protocol.records import batches_next_offset
from wherry.replication.fetch_session import CachedPartition, FetchSession


@dataclass(frozen=True, slots=True)
class FetchPartition:
    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1  # a follower's log start offset (-1 from consumers)


READ_UNCOMMITTED = 0
READ_COMMITTED = 1


@dataclass(slots=True)
class FetchPartitionResult:
    error_code: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    # bytes, or (a consumer's or follower's fetch with `zero_copy`) a region of the segment
    # file the network layer sends from the file
    records: bytes | FileRegion = b""
    # read_committed: (producer id, first offset) of the aborted transactions overlapping the
    # records returned; None for read_uncommitted and followers.
    aborted_transactions: list[tuple[int, int]] | None = None
    # KIP-392: the replica the consumer should fetch this partition from (-1: here)
    preferred_read_replica: int = -1


FetchResult = dict[TopicPartition, FetchPartitionResult]


def read_log(
    plog: Log,
    fp: FetchPartition,
    *,
    upper: int,
    limit: int,
    min_one: bool,
    committed: bool,
    zero_copy: bool,
) -> tuple[bytes | FileRegion, list[tuple[int, int]] | None]:
    """Read `fp` from `plog` below `upper`, at most `limit` bytes (at least one batch with
    `min_one`): the records (a file region with `zero_copy`, except read_committed reads,
    whose aborted transactions follow from the bytes) and, `committed`, the aborted
    transactions of the range. A fetch offset past the log raises OffsetOutOfRangeError."""
    if not (fp.fetch_offset < upper or fp.fetch_offset > plog.log_end_offset):
        return b"", None
    if committed:
        data = plog.read(
            fp.fetch_offset, max_bytes=limit, max_offset=upper, min_one_message=min_one
        )
        return data, aborted_in(plog, fp.fetch_offset, data)
    read = plog.read_region if zero_copy else plog.read
    return read(fp.fetch_offset, max_bytes=limit, max_offset=upper, min_one_message=min_one), None


def aborted_in(plog: Log, fetch_offset: int, data: bytes) -> list[tuple[int, int]]:
    """(producer id, first offset) of the aborted transactions overlapping the fetched
    batches (Kafka's addAbortedTransactions; the upper bound is the end of the data)."""
    end = batches_next_offset(data)
    if end is None:
        return []
    return [
        (t.producer_id, t.first_offset)
        for t in plog.collect_aborted_transactions(fetch_offset, end)
    ]


def session_partitions(
    session: FetchSession, tps: Iterable[TopicPartition]
) -> list[FetchPartition]:
    """What to read for `tps` of `session`, from its cached request data."""
    out: list[FetchPartition] = []
    cached = session.partitions
    for tp in tps:
        c = cached.get(tp)
        if c is not None:
            out.append(
                FetchPartition(
                    tp, c.fetch_offset, c.max_bytes, c.current_leader_epoch, c.log_start_offset
                )
            )
    return out


def _must_respond(c: CachedPartition, r: FetchPartitionResult, *, record: bool) -> bool:
    changed = c.must_respond(
        error_code=int(r.error_code),
        has_records=bool(r.records),
        high_watermark=r.high_watermark,
        last_stable_offset=r.last_stable_offset,
        log_start_offset=r.log_start_offset,
        record=record,
    )
    # A partition whose client is sent to another replica is always answered (Kafka).
    return changed or r.preferred_read_replica >= 0


def has_news(session: FetchSession, tp: TopicPartition, r: FetchPartitionResult | None) -> bool:
    """Whether the answer `r` says something new about `tp` (recording nothing)."""
    c = session.partitions.get(tp)
    return c is None or r is None or _must_respond(c, r, record=False)


def select_for_session(session: FetchSession, result: FetchResult, *, full: bool) -> FetchResult:
    """Record each answer in the session's cache (Kafka's maybeUpdateResponseData); for an
    incremental fetch keep only the partitions with something to say."""
    out: FetchResult = {}
    cached = session.partitions
    for tp, r in result.items():
        c = cached.get(tp)
        must = True if c is None else _must_respond(c, r, record=True)
        if full or must:
            out[tp] = r
    return out
