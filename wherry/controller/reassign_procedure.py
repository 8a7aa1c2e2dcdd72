"""Running partition reassignments on the controller (Kafka's
onPartitionReassignment and its ZooKeeper-mode entry points). The rules and values are in
`controller/reassignment.py`; this module does the steps with the controller's primitives
(`ControllerCore`), inside one controller event at a time, adding requests to the event's batch.

Entry points:

* `alter` -- AlterPartitionReassignments (API 45): start, replace or cancel reassignments;
  the newest request for a partition wins, also over the legacy node.
* `on_legacy_request` -- `/admin/reassign_partitions` was created: start what it lists;
  each partition leaves the node when it completes (the node goes when empty).
* `drop_strays` -- at failover, before the first LeaderAndIsr: any partition's ISR members
  outside its replicas -- left by a controller lost between storing a replaced
  reassignment's replicas and shrinking the ISR -- leave the ISR (and the leadership),
  stopped and deleted.
* `resume` -- at failover: every partition the store shows as being reassigned, and what
  the legacy node lists, continue from where they stood (each step is idempotent: AR :=
  OAR + RAR is rewritten, the epoch bumped, and step B runs once RAR is in the ISR).
* `on_isr_change` -- an ISR grew (AlterPartition): a reassignment whose target replicas are
  all in the ISR completes.
* `on_brokers_started` -- a broker came (back): reassignments with replicas on it are sent to
  it again.

Every write of a partition's reassignment state in progress rewrites the topic's assignment
node (fenced by the controller epoch) before the context changes. A state with nothing in
progress -- the final AR := RAR, or a cancel -- is stored last, after the leader epoch bump
that gives the replicas their new list and after the old replicas left the ISR and were told
to stop, so a controller that fails at any step leaves the store showing the reassignment
still running, and the next one's LeaderAndIsr (at a new leader epoch) reaches every replica.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import LeaderIsr
from wherry.controller.core import ControllerCore
from wherry.controller.election import ElectionStrategy
from wherry.controller.reassignment import OK, ApiResult, Reassignment, validate_target
from wherry.controller.replica_state import (
    PartitionReplica,
    ReplicaState,
    remove_replicas_from_isr,
)
from wherry.controller.request_batch import RequestBatch
from wherry.controller.request_states import (
    add_leader_and_isr,
    add_stop_replica,
    add_update_metadata,
)
from wherry.coordination import paths
from wherry.protocol.interbroker_parts import ZERO_UUID
from wherry.runtime.state_change_log import state_change_logger

log = logging.getLogger(__name__)


class ReassignmentProcedure:
    def __init__(self, core: ControllerCore) -> None:
        self.core = core

    # --- entry points ------------------------------------------------------------------------
    async def alter(
        self, targets: Mapping[TopicPartition, Sequence[int] | None], batch: RequestBatch
    ) -> dict[TopicPartition, ApiResult]:
        """AlterPartitionReassignments: validate each, start the valid ones (None cancels)."""
        ctx = self.core.ctx
        results: dict[TopicPartition, ApiResult] = {}
        wanted: dict[TopicPartition, Reassignment] = {}
        for tp, target in targets.items():
            current = ctx.reassignment(tp)
            if target is not None and ctx.replicas(tp):
                err = validate_target(current, target, ctx.leader_candidates())
                if err != OK:
                    results[tp] = err
                    continue
            if target is not None:
                wanted[tp] = current.reassign_to(target)
            elif current.in_progress:
                wanted[tp] = current.reassign_to(current.original)
            else:
                results[tp] = (
                    ErrorCode.no_reassignment_in_progress,
                    f"No reassignment is in progress for partition {tp}",
                )
        await self._remove_from_legacy(wanted)
        results.update(await self._trigger(wanted, batch))
        return results

    async def on_legacy_request(
        self, requested: Mapping[tuple[str, int], list[int]], batch: RequestBatch
    ) -> None:
        """`/admin/reassign_partitions` lists these targets: start them; the ones that fail
        leave the node at once."""
        ctx = self.core.ctx
        wanted: dict[TopicPartition, Reassignment] = {}
        for (t, p), target in requested.items():
            tp = TopicPartition(t, p)
            current = ctx.reassignment(tp)
            new = current.reassign_to(target)
            if new != current or not current.in_progress:  # not already running
                wanted[tp] = new
        results = await self._trigger(wanted, batch)
        failed = {tp: r for tp, r in results.items() if r[0] is not ErrorCode.none}
        for tp, (code, msg) in sorted(failed.items()):
            log.warning(
                "%s reassignment of %s through the store failed: %s %s",
                self.core.prefix,
                tp,
                code.name,
                msg or "",
            )
        ctx.legacy_reassignments.update(tp for tp in wanted if tp not in failed)
        ctx.legacy_reassignments.update(
            TopicPartition(t, p) for t, p in requested if TopicPartition(t, p) in ctx.reassigning
        )
        listed = {TopicPartition(t, p) for t, p in requested}
        done = {tp for tp in listed if tp in failed or tp not in ctx.reassigning}
        ctx.legacy_reassignments.difference_update(done)
        await self._rewrite_legacy_node(requested, dropped=done)

    async def drop_strays(self, batch: RequestBatch) -> None:
        """At failover, before any LeaderAndIsr goes out: take out of every partition's ISR
        the members its replicas (those of its reassignment, if one runs) no longer hold
        (`_drop_strays`). Sent first as stored, such an ISR would have the leader count a
        member it keeps no replica of, and move its high watermark past that member's log."""
        ctx = self.core.ctx
        for tp, st in sorted(ctx.states.items()):
            r = ctx.reassignment(tp)
            if not set(st.isr) <= set(r.replicas):
                await self._drop_strays(tp, r, batch)

    async def resume(
        self, legacy: Mapping[tuple[str, int], list[int]] | None, batch: RequestBatch
    ) -> None:
        """At failover, after `drop_strays`: continue every reassignment the store shows."""
        ctx = self.core.ctx
        ongoing = dict(ctx.reassigning)
        for tp, r in sorted(ongoing.items()):
            log.info(
                "%s resuming the reassignment of %s: replicas %s, adding %s, removing %s",
                self.core.prefix,
                tp,
                list(r.replicas),
                list(r.adding),
                list(r.removing),
            )
        await self._trigger(ongoing, batch)
        if legacy:
            pending = {k: v for k, v in legacy.items() if TopicPartition(*k) not in ongoing}
            if pending:
                await self.on_legacy_request(pending, batch)
            else:
                ctx.legacy_reassignments.update(TopicPartition(*k) for k in legacy)
                await self._maybe_clear_legacy()

    async def _drop_strays(self, tp: TopicPartition, r: Reassignment, batch: RequestBatch) -> None:
        """ISR members outside the partition's replicas leave the ISR (and a leader among them
        the leadership, which the offline election gives to an assigned replica), and are
        stopped and deleted. A replaced reassignment's replicas leave the assignment first
        (U1) and the ISR after (`_stop_removed`): a controller lost between the two leaves
        them in the ISR, where the leader, which has no replica of theirs to wait for, would
        move its high watermark past their logs, and where a later reassignment adding them
        back would find them "in sync" with whatever their logs hold."""
        core, ctx = self.core, self.core.ctx
        st = ctx.states.get(tp)
        stray = frozenset(() if st is None else (b for b in st.isr if b not in r.replicas))
        if not stray:
            return
        state_change_logger.info(
            "%s Removing replicas %s of partition %s from its ISR %s: not among its replicas %s",
            core.prefix,
            sorted(stray),
            tp,
            list(st.isr) if st is not None else [],
            list(r.replicas),
        )
        epoch = ctx.epoch

        def shrink(_: TopicPartition, cur: LeaderIsr) -> LeaderIsr | None:
            return remove_replicas_from_isr(cur, stray, epoch)

        written = await core.update_leader_isr([tp], shrink)
        if tp not in written:
            return
        for b in sorted(stray):
            add_stop_replica(batch, ctx, b, tp, delete=True)
        if written[tp].leader < 0:
            await core.elect_with([tp], ElectionStrategy.OFFLINE, batch)
        else:
            add_leader_and_isr(batch, ctx, ctx.replicas(tp), tp)

    async def on_isr_change(self, tps: Iterable[TopicPartition], batch: RequestBatch) -> None:
        ctx = self.core.ctx
        for tp in sorted(tps):
            r = ctx.reassigning.get(tp)
            st = ctx.states.get(tp)
            if r is not None and st is not None and r.is_complete(st.isr):
                await self.reassign(tp, r, batch)

    async def on_brokers_started(self, brokers: Collection[int], batch: RequestBatch) -> None:
        ctx = self.core.ctx
        for tp, r in sorted(ctx.reassigning.items()):
            if set(r.replicas) & set(brokers):
                await self.reassign(tp, r, batch)

    async def ongoing(
        self, tps: Collection[TopicPartition] | None
    ) -> dict[TopicPartition, Reassignment]:
        ctx = self.core.ctx
        if tps is None:
            return dict(sorted(ctx.reassigning.items()))
        return {tp: ctx.reassigning[tp] for tp in tps if tp in ctx.reassigning}

    # --- the procedure -----------------------------------------------------------------------
    async def _trigger(
        self, wanted: Mapping[TopicPartition, Reassignment], batch: RequestBatch
    ) -> dict[TopicPartition, ApiResult]:
        """Kafka's maybeTriggerPartitionReassignment."""
        ctx = self.core.ctx
        results: dict[TopicPartition, ApiResult] = {}
        for tp, r in sorted(wanted.items()):
            if ctx.is_queued_for_deletion(tp.topic):
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    f"The partition {tp} belongs to a topic being deleted.",
                )
            elif not ctx.replicas(tp) or tp not in ctx.states:
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    f"The partition {tp} does not exist.",
                )
            else:
                await self.reassign(tp, r, batch)
                results[tp] = OK
        return results

    async def reassign(self, tp: TopicPartition, new: Reassignment, batch: RequestBatch) -> None:
        """Kafka's onPartitionReassignment: phase A until the target replicas are all in the
        ISR, then phase B."""
        core, ctx = self.core, self.core.ctx
        ctx.topics_ineligible_for_deletion.add(tp.topic)
        await self._update_current(tp, new, batch)
        r = ctx.reassignment(tp)
        st = ctx.states[tp]
        if not r.is_complete(st.isr):
            state_change_logger.info(
                "%s Reassigning partition %s: replicas %s (adding %s, removing %s), waiting for "
                "ISR %s to hold %s",
                core.prefix,
                tp,
                list(r.replicas),
                list(r.adding),
                list(r.removing),
                list(st.isr),
                list(r.target),
            )
            await self._bump_epoch_and_send(tp, r.replicas, batch)  # A2
            fresh = [
                PartitionReplica(tp, b)
                for b in r.adding
                if core.replica_sm.state(PartitionReplica(tp, b)) is ReplicaState.NON_EXISTENT
            ]
            core.replica_sm.to_new(ctx, fresh, batch)  # A3
        else:
            await self._complete(tp, r, batch)

    async def _update_current(
        self, tp: TopicPartition, new: Reassignment, batch: RequestBatch
    ) -> None:
        """U1 store, U2 memory; replicas a replaced reassignment was adding stop at once.

        A new state with nothing in progress (a cancel, or a target already in the ISR) is
        complete at once: step B stores it last (B6), after the leader epoch bump that gives
        the replicas the new list (B3). Stored first, a controller lost before the bump would
        leave the store with no reassignment to resume and the leader with the old list at
        the current leader epoch, which the next controller's LeaderAndIsr does not replace.
        """
        ctx = self.core.ctx
        current = ctx.reassignment(tp)
        if current == new:
            return
        if new.in_progress:
            await self._write_assignment(tp.topic, {tp: new})
        ctx.set_reassignment(tp, new)
        unneeded = [b for b in current.replicas if b not in new.replicas]
        if unneeded:
            await self._stop_removed(tp, unneeded, batch)

    async def _complete(self, tp: TopicPartition, r: Reassignment, batch: RequestBatch) -> None:
        core, ctx = self.core, self.core.ctx
        core.replica_sm.to_online(ctx, [PartitionReplica(tp, b) for b in r.adding], batch)  # B1
        completed = Reassignment(r.target)
        ctx.set_reassignment(tp, completed)  # B2 (memory only)
        await self._move_leader_if_required(tp, batch)  # B3
        await self._stop_removed(tp, r.removing, batch)  # B4, B5
        await self._write_assignment(tp.topic, {})  # B6: AR := RAR, stored last
        state_change_logger.info(
            "%s Completed the reassignment of partition %s to replicas %s",
            core.prefix,
            tp,
            list(completed.replicas),
        )
        if tp in ctx.legacy_reassignments:  # B7
            ctx.legacy_reassignments.discard(tp)
            await self._drop_from_legacy_node([tp])
        add_update_metadata(batch, ctx, ctx.live_brokers, [tp])  # B8
        if not any(t.topic == tp.topic for t in ctx.reassigning):
            core.deletion.resume_for(ctx, [tp.topic])

    async def _move_leader_if_required(self, tp: TopicPartition, batch: RequestBatch) -> None:
        core, ctx = self.core, self.core.ctx
        st = ctx.states[tp]
        target = ctx.replicas(tp)
        if st.leader not in target or st.leader not in ctx.leader_candidates():
            outcome = (await core.elect_with([tp], ElectionStrategy.REASSIGN, batch)).get(tp)
            if outcome is None or not outcome.written:
                log.warning(
                    "%s no leader from the target replicas %s of %s: %s",
                    core.prefix,
                    list(target),
                    tp,
                    outcome and outcome.error,
                )
        else:
            await self._bump_epoch_and_send(tp, target, batch)

    async def _bump_epoch_and_send(
        self, tp: TopicPartition, to: Sequence[int], batch: RequestBatch
    ) -> None:
        """Kafka's updateLeaderEpochAndSendRequest: same leader and ISR, next leader epoch,
        LeaderAndIsr to `to` (the new replica list reaches every replica with it)."""
        core, ctx = self.core, self.core.ctx
        epoch = ctx.epoch

        def bump(_: TopicPartition, cur: LeaderIsr) -> LeaderIsr:
            return LeaderIsr(cur.leader, cur.leader_epoch + 1, cur.isr, epoch, cur.zk_version)

        written = await core.update_leader_isr([tp], bump)
        if tp in written:
            add_leader_and_isr(batch, ctx, to, tp)
        else:
            state_change_logger.error(
                "%s Failed to bump the leader epoch of partition %s for its reassignment",
                core.prefix,
                tp,
            )

    async def _stop_removed(
        self, tp: TopicPartition, removed: Sequence[int], batch: RequestBatch
    ) -> None:
        """B4, B5: the removed replicas leave the ISR, are stopped and deleted."""
        core, ctx = self.core, self.core.ctx
        if not removed:
            return
        replicas = [PartitionReplica(tp, b) for b in removed]
        rsm = core.replica_sm
        await core.replicas_offline(replicas, batch, stop_replica=True)
        rsm.to_deletion_started(ctx, replicas, batch)
        rsm.to_deletion_successful(ctx, replicas)
        rsm.to_non_existent(ctx, replicas)
        rsm.forget(replicas)

    # --- the store ---------------------------------------------------------------------------
    async def _write_assignment(
        self, topic: str, changed: Mapping[TopicPartition, Reassignment]
    ) -> None:
        """Write the topic's node: the context's assignment with `changed` applied."""
        ctx = self.core.ctx
        parts: dict[int, list[int]] = {}
        adding: dict[int, list[int]] = {}
        removing: dict[int, list[int]] = {}
        for tp in ctx.partitions_of(topic):
            r = changed.get(tp) or ctx.reassignment(tp)
            parts[tp.partition] = list(r.replicas)
            if r.adding:
                adding[tp.partition] = list(r.adding)
            if r.removing:
                removing[tp.partition] = list(r.removing)
        a = paths.TopicAssignment(
            ctx.topic_ids.get(topic, ZERO_UUID), parts, adding, removing
        )
        await self.core.zk.set_topic_assignment(topic, a, ctx.epoch_zk_version)

    async def _remove_from_legacy(self, tps: Collection[TopicPartition]) -> None:
        """An API reassignment takes precedence over the node's for the same partition."""
        ctx = self.core.ctx
        hit = [tp for tp in tps if tp in ctx.legacy_reassignments]
        if hit:
            ctx.legacy_reassignments.difference_update(hit)
            await self._drop_from_legacy_node(hit)

    async def _drop_from_legacy_node(self, tps: Collection[TopicPartition]) -> None:
        requested = await self.core.zk.reassignment_request(None)
        if requested is not None:
            await self._rewrite_legacy_node(requested, dropped=set(tps))

    async def _rewrite_legacy_node(
        self, requested: Mapping[tuple[str, int], list[int]], *, dropped: Collection[TopicPartition]
    ) -> None:
        remaining = {k: v for k, v in requested.items() if TopicPartition(*k) not in set(dropped)}
        if remaining != dict(requested) or not remaining:
            await self.core.zk.set_reassignment_request(remaining, self.core.ctx.epoch_zk_version)

    async def _maybe_clear_legacy(self) -> None:
        requested = await self.core.zk.reassignment_request(None)
        if requested is None:
            return
        ctx = self.core.ctx
        done = {TopicPartition(*k) for k in requested if TopicPartition(*k) not in ctx.reassigning}
        ctx.legacy_reassignments.difference_update(done)
        await self._rewrite_legacy_node(requested, dropped=done)
