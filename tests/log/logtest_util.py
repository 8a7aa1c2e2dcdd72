"""Helpers shared by the wherry.log tests."""

from __future__ import annotations

import os
from pathlib import Path

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.log import Log
from wherry.protocol.records import BatchHeader, build_batch, iter_batches, iter_records

TP = TopicPartition("topic", 0)
T0 = 1_700_000_000_000  # a fixed "now" for tests

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096)


def batch(
    n: int = 1,
    *,
    ts: int = T0,
    value: bytes = b"v" * 20,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    compression: int = 0,
) -> bytes:
    """A batch of `n` records, base offset 0."""
    return build_batch(
        [(f"k{i}".encode(), value) for i in range(n)],
        timestamp_ms=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        compression=compression,
    )


def open_log(
    dir: Path,
    config: LogConfig = SMALL,
    *,
    now_ms: int = T0,
    clean: bool = False,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    high_watermark: int | None = None,
) -> Log:
    return Log.open(
        dir / "topic-0",
        config,
        topic_partition=TP,
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        now_ms=now_ms,
        had_clean_shutdown=clean,
        high_watermark=high_watermark,
    )


def headers(data: bytes) -> list[BatchHeader]:
    return [h for _, h in iter_batches(data)]


def offsets(data: bytes) -> list[int]:
    """Offsets of every record in `data`."""
    return [r.offset for pos, _ in iter_batches(data) for r in iter_records(data, pos)]


def read_all(log: Log, start: int | None = None) -> bytes:
    """Every batch from `start` (default log start) to the log end."""
    out = bytearray()
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=1 << 20)
        if not data:
            break
        out += data
        offset = headers(data)[-1].next_offset
    return bytes(out)


def fill(log: Log, batches: int, *, records: int = 1, ts: int = T0, now_ms: int = T0) -> None:
    for _ in range(batches):
        log.append_as_leader(batch(records, ts=ts), leader_epoch=0, now_ms=now_ms)


def open_fds_under(path: Path) -> int:
    """This process's open file descriptors on files under ``path``. Counting only these keeps
    a count true while other threads (say a client an earlier test left behind) open and close
    descriptors of their own."""
    prefix = str(path.resolve()) + os.sep
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        count += target.startswith(prefix)
    return count
