"""A LogManager with 10,000 partitions holds one file descriptor per partition."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from logtest_util import T0, batch, offsets, open_fds_under, read_all

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.manager import LogManager

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/fd").is_dir(), reason="counts fds through /proc/self/fd"
)


class Clock:
    def __call__(self) -> int:
        return T0


@contextlib.contextmanager
def nofile_soft_limit(at_least: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < at_least:
        pytest.skip(f"needs {at_least} open files, hard limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < at_least:
        resource.setrlimit(resource.RLIMIT_NOFILE, (at_least, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs directory when there is one (thousands of files, fsyncs), else tmp_path."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="wherry-test-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_ten_thousand_partitions_hold_one_fd_each(fast_dir: Path) -> None:
    partitions = 10_000
    config = LogConfig(segment_bytes=64 * 1024, segment_index_bytes=1024, index_interval_bytes=256)
    tps = [TopicPartition(f"t{i % 10}", i // 10) for i in range(partitions)]
    with nofile_soft_limit(partitions + 1000):
        assert open_fds_under(fast_dir) == 0
        manager = LogManager([fast_dir], config, Clock())
        manager.startup()
        batches = [batch(2, pid=7, epoch=0, seq=seq) for seq in (0, 2)]
        for tp in tps:
            lg = manager.get_or_create_log(tp)
            for data in batches:
                lg.append_as_leader(data, leader_epoch=0, now_ms=T0)
        held = open_fds_under(fast_dir)
        # one .log per partition, plus the log dir lock
        assert held == partitions + 1, held
        for lg in manager.all_logs():
            assert offsets(lg.read(0, max_bytes=1 << 20)) == list(range(4))
        assert open_fds_under(fast_dir) == held  # reading opens nothing new
        manager.shutdown()
        assert open_fds_under(fast_dir) == 0

        again = LogManager([fast_dir], config, Clock())
        again.startup()
        assert open_fds_under(fast_dir) == held
        for tp in tps[::97]:
            restored = again.get_log(tp)
            assert restored is not None and restored.log_end_offset == 4
            assert offsets(read_all(restored)) == list(range(4))
            dup = restored.append_as_leader(batches[1], leader_epoch=0, now_ms=T0)
            assert dup.duplicate and dup.first_offset == 2
        again.shutdown()
        assert open_fds_under(fast_dir) == 0
