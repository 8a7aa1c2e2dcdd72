"""Zero-copy reads: `Log.read_region` gives a `FileRegion` of exactly the bytes `Log.read`
gives, for any offset, size bound, upper offset and segment (inactive ones with their cached
descriptors evicted too); the region stays readable after its segment file is deleted."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from logtest_util import SMALL, T0, batch, open_log

from wherry.log import cache
from wherry.log.file_region import FileRegion, ShortRegionError


def _materialize(data: bytes | FileRegion) -> bytes:
    if isinstance(data, FileRegion):
        try:
            return data.read()
        finally:
            data.close()
    return data


def test_region_reads_are_byte_identical_to_reads(tmp_path: Path) -> None:
    rng = random.Random(3)
    config = dataclasses.replace(SMALL, segment_bytes=4096, index_interval_bytes=256)
    log = open_log(tmp_path, config)
    for _ in range(120):
        log.append_as_leader(
            batch(rng.randint(1, 6), value=bytes(rng.randint(5, 300))), leader_epoch=0, now_ms=T0
        )
    assert len(log.segments) > 5
    end = log.log_end_offset
    cases = 0
    for _ in range(600):
        offset = rng.randrange(end)
        max_bytes = rng.choice((0, 1, 60, 200, 700, 4096, 10_000, 1 << 20))
        max_offset = rng.choice((None, end, rng.randrange(offset, end + 1)))
        min_one = rng.random() < 0.7
        if rng.random() < 0.2:
            cache.OPEN_FILES.clear()  # inactive segments reopen their fds
        want = log.read(offset, max_bytes=max_bytes, max_offset=max_offset, min_one_message=min_one)
        got = log.read_region(
            offset, max_bytes=max_bytes, max_offset=max_offset, min_one_message=min_one
        )
        assert isinstance(got, FileRegion) == bool(want)
        assert _materialize(got) == want, (offset, max_bytes, max_offset, min_one)
        cases += bool(want)
    assert cases > 300
    log.close()


def test_a_region_outlives_its_deleted_segment_but_not_a_truncation(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, segment_bytes=2048, file_delete_delay_ms=0)
    log = open_log(tmp_path, config)
    for _ in range(40):
        log.append_as_leader(batch(3, value=bytes(100)), leader_epoch=0, now_ms=T0)
    first = log.segments[0]
    want = log.read(0, max_bytes=1 << 20)
    region = log.read_region(0, max_bytes=1 << 20)
    assert isinstance(region, FileRegion) and len(region) == len(want)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(log.segments[1].base_offset)
    log.delete_log_start_offset_breached_segments(T0)
    log.delete_pending_files(T0 + 1)
    assert not first.log_path.exists()
    assert region.read() == want  # the region's own descriptor keeps the inode
    region.close()

    tail = log.read_region(log.segments[-1].base_offset, max_bytes=1 << 20)
    assert isinstance(tail, FileRegion)
    log.truncate_to(log.segments[-1].base_offset + 1)
    try:
        tail.read()
        raise AssertionError("a truncated region must not read short silently")
    except ShortRegionError:
        pass
    finally:
        tail.close()
    log.close()
