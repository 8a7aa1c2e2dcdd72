"""Cluster operations in the simulation: reassignments, cancellations, preferred
elections, auto leader rebalance and controlled shutdowns as events of the default
(real-controller) world, and the invariant that no reassignment is left half-done once the
cluster is healthy -- shown to fail when the controller's procedure is broken on purpose;
and what topic administration's answers say each topic must end as.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.sim.sweep import describe
from wherry.common.topic_partition import TopicPartition
from wherry.controller.reassign_procedure import ReassignmentProcedure
from wherry.controller.reassignment import Reassignment
from wherry.controller.replica_state import PartitionReplica
from wherry.controller.request_batch import RequestBatch
from wherry.log.manager import CLEAN_SHUTDOWN_FILE
from wherry.sim.real_controller import RebalanceConfig
from wherry.sim.topic_operations import NAMES, TopicLedger
from wherry.sim.world import TOPIC, SimOptions, SimResult, World, run_seed

CI = SimOptions(duration_ms=3_000, settle_ms=2_500)


def test_the_default_world_runs_every_cluster_operation(tmp_path: Path) -> None:
    counts: dict[str, int] = {}
    rebalancing = moved = 0
    for seed in range(6):
        world = World(seed, CI, tmp_path / str(seed))
        r = world.run()
        assert r.ok, describe(r)
        ops = world.operations
        assert ops is not None, "the default world runs cluster operations"
        for k, n in ops.counts.items():
            counts[k] = counts.get(k, 0) + n
        rebalancing += any("auto leader rebalance" in f for f in r.faults)
        initial = ops.ledger.initial[TOPIC]
        moved += sum(
            1
            for (_t, p), reqs in ops.ledger.requests.items()
            if any(q.answer == "ok" for q in reqs) and initial[p]
        )
    assert set(counts) == {"reassign", "cancel", "elect", "shutdown"}, counts
    assert counts["reassign"] >= 10, counts
    assert moved > 0, "no reassignment was ever accepted"
    assert 0 < rebalancing < 6, "auto leader rebalance should be on in some seeds only"


def test_controller_crashes_land_inside_reassignments() -> None:
    """Right after a reassignment starts, the acting controller is often armed to crash at
    one of its next store writes (between the steps of one event) or crashed soon after."""
    armed = crashed_at_write = 0
    for seed in range(8):
        r = run_seed(seed, CI)
        assert r.ok, describe(r)
        armed += sum("to crash at write" in f for f in r.faults)
        crashed_at_write += sum("at a store write" in f for f in r.faults)
    assert armed >= 3 and crashed_at_write >= 2, (armed, crashed_at_write)


def test_a_new_controller_takes_strays_out_of_the_isr_before_its_first_leader_and_isr() -> None:
    """Seed 54072: a controller is lost between storing a replaced reassignment's replicas and
    taking its extra replica (broker 4) out of the ISR. The next one sent the leader the
    stored state first -- replicas without broker 4, an ISR with it -- and took broker 4 out
    a request later; in between, the leader, which waits for no replica of broker 4's, moved
    its high watermark past broker 4's log while broker 4 still counted as in sync. Now the
    strays leave the ISR before the first LeaderAndIsr is sent."""
    options = SimOptions(
        power_loss=True,
        transactions=True,
        consumer_groups=True,
        share_consumers=True,
        brokers=5,
    )
    r = run_seed(54072, options)
    assert r.ok, describe(r)


class ScriptedShutdown(World):
    """Controlled shutdown of partition 0's leader half a second in, no other faults."""

    target: int
    led_at_stop: list[TopicPartition]
    clean_marker: bool

    async def faults(self, until_ms: int) -> None:
        await asyncio.sleep(0.5)
        state = self.stored_state(self.tps[0])
        assert state is not None and state.leader > 0
        self.target = state.leader
        ops = self.operations
        assert ops is not None
        await ops.shutdown(self.target)
        await asyncio.sleep(until_ms / 1000 - 0.5)

    async def stop_broker(self, b: int) -> None:
        self.led_at_stop = [
            tp for tp in self.tps if (st := self.stored_state(tp)) and st.leader == b
        ]
        node = self.node(b)
        assert node is not None
        await super().stop_broker(b)
        self.clean_marker = all((d / CLEAN_SHUTDOWN_FILE).exists() for d in node.log_dirs)


def test_controlled_shutdown_moves_leadership_then_stops_cleanly(tmp_path: Path) -> None:
    options = replace(CI, auto_rebalance=RebalanceConfig(False))
    world = ScriptedShutdown(11, options, tmp_path)
    assert world.operations is not None
    world.operations.run = _no_random_operations  # type: ignore[method-assign]
    r = world.run()
    assert r.ok, describe(r)
    b = world.target
    assert f"controlled shutdown of broker {b}" in "\n".join(r.faults)
    stops = [f for f in r.faults if f.endswith(f"broker {b} stops")]
    assert stops, r.faults  # the controller answered with nothing left to lead
    assert world.led_at_stop == [], "the broker still led partitions when it stopped"
    assert world.clean_marker, "a clean stop leaves the clean-shutdown marker in each log dir"
    assert any(f"restart broker {b}" in f for f in r.faults), r.faults


async def _no_random_operations(until_ms: int) -> None:
    return None


# --- the reassignment invariant catches a broken procedure --------------------------------------
def _first_violation(options: SimOptions, seeds: range) -> SimResult | None:
    for seed in seeds:
        r = run_seed(seed, options)
        assert r.error is None, describe(r)
        if r.violation is not None:
            return r
    return None


def test_invariant_catches_a_reassignment_that_never_stores_its_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B6 skipped: AR := RAR is never written, so the store keeps the full replica list with
    its adding / removing replicas after the reassignment completed."""
    write = ReassignmentProcedure._write_assignment

    async def without_final_write(
        self: ReassignmentProcedure, topic: str, changed: Mapping[TopicPartition, Reassignment]
    ) -> None:
        if changed:  # the final write (B6) is the one with nothing changed
            await write(self, topic, changed)

    monkeypatch.setattr(ReassignmentProcedure, "_write_assignment", without_final_write)
    r = _first_violation(CI, range(10))
    assert r is not None, "a reassignment that never stores AR := RAR went unnoticed"
    assert "still shows a reassignment" in (r.violation or ""), describe(r)


def test_invariant_catches_removed_replicas_that_are_never_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B4 done, B5 skipped: the removed replicas leave the ISR but are never told to stop."""

    async def only_leave_the_isr(
        self: ReassignmentProcedure,
        tp: TopicPartition,
        removed: Sequence[int],
        batch: RequestBatch,
    ) -> None:
        replicas = [PartitionReplica(tp, b) for b in removed]
        await self.core.replicas_offline(replicas, batch, stop_replica=False)

    monkeypatch.setattr(ReassignmentProcedure, "_stop_removed", only_leave_the_isr)
    r = _first_violation(CI, range(20))
    assert r is not None, "removed replicas left running went unnoticed for 20 seeds"
    assert "outside its replicas" in (r.violation or ""), describe(r)


def test_invariant_catches_a_lost_stop_replica_left_unrepaired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A StopReplica lost with a controller that died, or to a broker that was away, leaves a
    stray replica; the next controller's FULL LeaderAndIsr (or the one a starting broker
    gets) drops it. Without the FULL requests the strays stay, and the final check sees them."""
    monkeypatch.setattr(RequestBatch, "mark_full", lambda self, broker_ids: None)
    r = _first_violation(CI, range(10))
    assert r is not None, "stray replicas left by lost StopReplicas went unnoticed"
    assert "outside its replicas" in (r.violation or ""), describe(r)


# --- topic administration: what the answers say each name ends as ----------------------------
def test_the_ledger_follows_the_answers() -> None:
    name = NAMES[0]
    ledger = TopicLedger(NAMES)
    assert ledger.expected[name].state == "absent"
    ledger.created(name, ErrorCode.invalid_replication_factor, 2)
    assert ledger.expected[name].state == "absent"  # refused: nothing written
    ledger.created(name, ErrorCode.none, 2)
    assert (ledger.expected[name].state, ledger.expected[name].partitions) == ("present", 2)
    ledger.partitions_added(name, ErrorCode.request_timed_out, 3)
    assert (ledger.expected[name].state, ledger.expected[name].partitions) == ("present", None)
    ledger.partitions_added(name, ErrorCode.none, 3)
    assert ledger.expected[name].partitions == 3
    ledger.deleted(name, ErrorCode.request_timed_out)  # marked; the deletion goes on
    assert ledger.expected[name].state == "absent"
    ledger.unanswered(name)
    assert ledger.expected[name].state == "unknown"
    ledger.deleted(name, ErrorCode.unknown_topic_or_partition)
    assert ledger.expected[name].state == "unknown"
    ledger.created(name, ErrorCode.request_timed_out, 1)
    assert ledger.expected[name].state == "unknown"
