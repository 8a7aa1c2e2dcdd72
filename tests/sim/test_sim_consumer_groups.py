"""KIP-848 consumer groups in the simulation (issue 16): the real group coordinator on every
simulated broker, members heartbeating over the simulated network, coordinator crashes; every
reload of `__consumer_offsets` rebuilds each group as it was last written (no older than the
last acknowledged write), and the group settles after healing -- shown to fail when the replay
of the records is broken on purpose."""

from __future__ import annotations

import pytest

from tests.sim.sweep import describe
from wherry.group import consumer_group_records as cgr
from wherry.sim.world import SimOptions, run_seed

CI = SimOptions(duration_ms=3_000, settle_ms=4_000, consumer_groups=True)
REPLAY = " --consumer-groups"  # the command line's flags for a replay


def test_groups_survive_coordinator_crashes() -> None:
    reloads = crashes = 0
    # 12 seeds: a coordinator loads only once its partition's tail is committed, so fewer
    # heartbeats are answered around a failover and 10 seeds crashed only 2 coordinators.
    for seed in range(12):
        r = run_seed(seed, CI)
        assert r.ok, describe(r, REPLAY)
        reloads += r.group_reloads
        crashes += sum(1 for f in r.faults if "coordinator crash" in f)
    assert reloads >= 10 and crashes >= 3, (reloads, crashes)


def test_a_replay_that_drops_current_assignments_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = cgr.ConsumerGroupReplay.apply

    def lossy(self: cgr.ConsumerGroupReplay, key: bytes, value: bytes | None) -> None:
        if cgr.record_type(key) != 8:
            real(self, key, value)

    monkeypatch.setattr(cgr.ConsumerGroupReplay, "apply", lossy)
    found = None
    for seed in range(10):
        r = run_seed(seed, CI)
        assert r.error is None, describe(r, REPLAY)
        if r.violation is not None:
            found = r
            break
    assert found is not None and "rebuilt by broker" in (found.violation or "")


def test_a_deposed_leaders_load_is_not_taken_for_the_current_one() -> None:
    """Seed 50033: a preferred election makes broker 3 leader of `__consumer_offsets-0`; the
    controller's requests to broker 3 time out and are sent again, and meanwhile broker 3's
    controlled shutdown moves the leadership on (broker 1, a later leader epoch, a newer group
    state acknowledged). Broker 3 then applies the old LeaderAndIsr and loads the older state.
    Leader epochs fence it; the check applies to loads by the leader at the stored epoch."""
    r = run_seed(50033, SimOptions(consumer_groups=True))
    assert r.ok, describe(r, REPLAY)
    assert r.group_deposed_loads >= 1 and r.group_reloads >= 3, (
        r.group_deposed_loads,
        r.group_reloads,
    )
