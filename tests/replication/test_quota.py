"""ReplicationQuotaManager (KIP-73): the sampled rate, its bound and the throttled partitions,
on a manual clock (times are passed in)."""

from __future__ import annotations

import pytest

from wherry.common.topic_partition import TopicPartition
from wherry.replication.quota import (
    ALL_REPLICAS,
    UNLIMITED_RATE,
    ReplicationQuotaManager,
    throttled_partitions,
)


def test_rate_is_bytes_over_at_least_one_window() -> None:
    q = ReplicationQuotaManager(samples=11, window_ms=1000, bound=1000)
    assert q.rate(0) == 0.0
    q.record(500, 0)
    # Less than one window elapsed: divided by a whole window (1 s).
    assert q.rate(0) == pytest.approx(500.0)
    assert q.rate(400) == pytest.approx(500.0)
    assert not q.is_quota_exceeded(400)  # at the bound is acceptable
    q.record(600, 500)
    assert q.rate(500) == pytest.approx(1100.0)
    assert q.is_quota_exceeded(500)
    # Time passes without traffic: the same bytes over a longer span.
    assert q.rate(2000) == pytest.approx(1100 / 2.0)
    assert not q.is_quota_exceeded(2000)


def test_samples_roll_and_old_ones_expire() -> None:
    q = ReplicationQuotaManager(samples=3, window_ms=100, bound=10**9)
    q.record(100, 0)  # sample 0 starts at 0
    q.record(100, 150)  # window over: sample 1 starts at 150
    q.record(100, 260)  # sample 2 at 260
    assert q.rate(260) == pytest.approx(300 * 1000 / 260)
    # A fourth window reuses the oldest sample (3 samples kept): the first 100 bytes go.
    q.record(50, 370)
    assert q.rate(370) == pytest.approx(250 * 1000 / (370 - 150))
    # Samples older than samples × window (300 ms) reset when measured: at 500 the one of
    # 150 goes, those of 260 and 370 stay.
    assert q.rate(500) == pytest.approx(150 * 1000 / (500 - 260))
    assert q.rate(10_000) == 0.0


def test_a_steady_rate_measures_as_that_rate() -> None:
    q = ReplicationQuotaManager(bound=1_000_000)  # Kafka's 11 × 1 s
    for t in range(0, 20_000, 100):
        q.record(100_000, t)  # 1 MB/s in 100 kB steps
    assert q.rate(20_000) == pytest.approx(1_000_000, rel=0.1)


def test_quota_exceeded_only_against_a_bound() -> None:
    q = ReplicationQuotaManager(window_ms=1000)
    assert q.unlimited and q.bound == UNLIMITED_RATE
    q.record(10**12, 0)
    assert not q.is_quota_exceeded(1)
    q.update_quota(1024)
    assert q.is_quota_exceeded(1)  # samples stay across a bound change
    q.update_quota(UNLIMITED_RATE)
    assert not q.is_quota_exceeded(1)


def test_throttled_partitions_per_topic() -> None:
    q = ReplicationQuotaManager()
    tp = TopicPartition
    assert not q.is_throttled(tp("t", 0))
    q.mark_throttled("t", frozenset({0, 2}))
    assert q.is_throttled(tp("t", 0)) and q.is_throttled(tp("t", 2))
    assert not q.is_throttled(tp("t", 1)) and not q.is_throttled(tp("u", 0))
    q.mark_throttled("u", ALL_REPLICAS)
    assert q.is_throttled(tp("u", 7))
    q.mark_throttled("t", frozenset())
    assert not q.is_throttled(tp("t", 0))
    q.remove_throttle("u")
    assert q.throttled_topics() == {}


def test_throttled_replicas_value_for_one_broker() -> None:
    assert throttled_partitions(["0:1", "1:2", " 2:1 "], 1) == frozenset({0, 2})
    assert throttled_partitions(["0:1"], 3) == frozenset()
    assert throttled_partitions([], 1) == frozenset()
    assert throttled_partitions([""], 1) == frozenset()
    assert throttled_partitions(["*"], 5) is ALL_REPLICAS
    with pytest.raises(ValueError):
        throttled_partitions(["x:1"], 1)


def test_bad_shapes_refused() -> None:
    with pytest.raises(ValueError):
        ReplicationQuotaManager(samples=0)
    with pytest.raises(ValueError):
        ReplicationQuotaManager(window_ms=0)
