"""Compaction under faults: the simulated brokers create the coordinators' internal topics
compacted (as `wherry server` does), their segments roll every few hundred ms and the real
log cleaner runs inline; the checker holds every compacted log to two rules (a kept record is
the one written at its offset; the latest record of each key stays) and a cleaner that drops
the latest record of a key is caught."""

from __future__ import annotations

from dataclasses import replace

import pytest

import wherry.log.clean_job as clean_job_module
from tests.sim.sweep import describe
from wherry.common.topic_partition import TopicPartition
from wherry.log.cleaner import CleanResult, LogCleaner
from wherry.sim.invariants import History, InvariantViolation, KeptRecord
from wherry.sim.world import SimOptions, run_seed

TXN = SimOptions(duration_ms=3_000, transactions=True)
REPLAY = " --transactions"  # the command line's flags for a replay
TP = TopicPartition("__consumer_offsets", 0)


def _kept(key: bytes, value: int, plain: bool = True) -> KeptRecord:
    return KeptRecord(key, hash((key, value)), plain)


# --- the checker's rules, by hand ----------------------------------------------------------------
def test_a_record_superseded_by_a_newer_one_of_its_key_may_go() -> None:
    h = History()
    h.record_compacted(TP, 0, 3, {0: _kept(b"a", 0), 1: _kept(b"b", 1), 2: _kept(b"a", 2)}, "x")
    h.record_compacted(TP, 0, 3, {1: _kept(b"b", 1), 2: _kept(b"a", 2)}, "cleaned")


def test_the_latest_record_of_a_key_may_not_go() -> None:
    h = History()
    h.record_compacted(TP, 0, 3, {0: _kept(b"a", 0), 1: _kept(b"b", 1), 2: _kept(b"a", 2)}, "x")
    with pytest.raises(InvariantViolation, match="latest record of key b'b', at offset 1"):
        h.record_compacted(TP, 0, 3, {0: _kept(b"a", 0), 2: _kept(b"a", 2)}, "broken")


def test_a_kept_record_may_not_change_and_a_lagging_replica_is_not_judged_above_its_hw() -> None:
    h = History()
    h.record_compacted(TP, 0, 3, {0: _kept(b"a", 0), 1: _kept(b"b", 1), 2: _kept(b"a", 2)}, "x")
    # A follower whose high watermark is 2 holds offsets 0 and 1 only: nothing is missing.
    h.record_compacted(TP, 0, 2, {0: _kept(b"a", 0), 1: _kept(b"b", 1)}, "follower")
    with pytest.raises(InvariantViolation, match="changed"):
        h.record_compacted(TP, 0, 3, {1: _kept(b"b", 9), 2: _kept(b"a", 2)}, "rewritten")


def test_a_transactional_record_is_not_held_as_its_keys_latest() -> None:
    """The cleaner drops an aborted transaction's records; the older plain one stays."""
    h = History()
    h.record_compacted(TP, 0, 2, {0: _kept(b"a", 0), 1: _kept(b"a", 1, plain=False)}, "x")
    h.record_compacted(TP, 0, 2, {0: _kept(b"a", 0)}, "aborted one cleaned")
    with pytest.raises(InvariantViolation, match="latest record of key b'a', at offset 0"):
        h.record_compacted(TP, 0, 2, {}, "both gone")


# --- the simulation ------------------------------------------------------------------------------
def test_the_cleaner_compacts_the_internal_topics_during_the_faults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    results: list[CleanResult] = []
    real = LogCleaner.clean_once

    def counted(self: LogCleaner, now_ms: int) -> CleanResult | None:
        r = real(self, now_ms)
        if r is not None:
            results.append(r)
        return r

    monkeypatch.setattr(LogCleaner, "clean_once", counted)
    for seed in range(3):
        r = run_seed(seed, TXN)
        assert r.ok, describe(r, REPLAY)
    assert len(results) >= 10, len(results)
    assert sum(c.records_removed for c in results) >= 10, results


def test_a_cleaner_that_drops_the_latest_record_of_a_key_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = clean_job_module._retain

    def drops_the_latest(
        offset: int,
        key: bytes | None,
        null_value: bool,
        offset_map: dict[bytes, int],
        end_offset: int,
        horizon: int | None,
        now_ms: int,
    ) -> bool:
        if offset < end_offset and key is not None and offset_map.get(key) == offset:
            return False
        return real(offset, key, null_value, offset_map, end_offset, horizon, now_ms)

    monkeypatch.setattr(clean_job_module, "_retain", drops_the_latest)
    short = SimOptions(duration_ms=3_000)
    for mode, options in (
        ("transactions", replace(short, transactions=True)),
        ("consumer groups", replace(short, consumer_groups=True)),
    ):
        caught = None
        for seed in range(5):
            r = run_seed(seed, options)
            assert r.error is None, describe(r, REPLAY)
            if r.violation is not None:
                caught = r
                break
        assert caught is not None, f"{mode}: a cleaner dropping keys' latest records went unnoticed"
        assert "latest record of key" in (caught.violation or ""), describe(caught, REPLAY)
