"""Moving leadership on request: preferred and unclean elections (ElectLeaders,
the legacy `/admin/preferred_replica_election` node, auto leader rebalance) and controlled
shutdown. Kafka's onReplicaElection / processReplicaLeaderElection and doControlledShutdown
(ZooKeeper mode), run with the controller's primitives (`ControllerCore`) inside one event.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.core import ControllerCore
from wherry.controller.election import ElectionStrategy
from wherry.controller.leader_balance import PartitionLeadership, rebalance_candidates
from wherry.controller.reassignment import OK, ApiResult
from wherry.controller.replica_state import PartitionReplica
from wherry.controller.request_batch import RequestBatch
from wherry.controller.request_states import add_stop_replica
from wherry.coordination import paths
from wherry.protocol.interbroker import NO_LEADER

log = logging.getLogger(__name__)

PREFERRED = 0
UNCLEAN = 1


class LeadershipMoves:
    def __init__(self, core: ControllerCore) -> None:
        self.core = core

    # --- elections on request ----------------------------------------------------------------
    async def elect(
        self,
        election_type: int,
        partitions: Collection[TopicPartition] | None,
        batch: RequestBatch,
        *,
        trigger: str = "admin request",
    ) -> dict[TopicPartition, ApiResult]:
        """Kafka's processReplicaLeaderElection: unknown partitions, partitions that already
        have a valid leader (ELECTION_NOT_NEEDED) and the elected ones."""
        core, ctx = self.core, self.core.ctx
        if election_type not in (PREFERRED, UNCLEAN):
            return {
                tp: (ErrorCode.invalid_request, f"Unknown election type {election_type}")
                for tp in (partitions or ())
            }
        tps = sorted(ctx.all_partitions() if partitions is None else set(partitions))
        results: dict[TopicPartition, ApiResult] = {}
        electable: list[TopicPartition] = []
        live = ctx.leader_candidates()
        for tp in tps:
            st = ctx.states.get(tp)
            if not ctx.replicas(tp) or st is None or ctx.is_queued_for_deletion(tp.topic):
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    "The partition does not exist.",
                )
            elif (election_type == PREFERRED and st.leader == ctx.replicas(tp)[0]) or (
                election_type == UNCLEAN and st.leader != NO_LEADER and st.leader in live
            ):
                results[tp] = (ErrorCode.election_not_needed, "Leader election not needed")
            else:
                electable.append(tp)
        if not electable:
            return results
        if election_type == PREFERRED:
            outcomes = await core.elect_with(electable, ElectionStrategy.PREFERRED, batch)
            failed = ErrorCode.preferred_leader_not_available
        else:
            outcomes = await core.elect_with(electable, ElectionStrategy.UNCLEAN, batch)
            failed = ErrorCode.eligible_leaders_not_available
        for tp in electable:
            o = outcomes.get(tp)
            if o is not None and o.written:
                results[tp] = OK
            else:
                why = (o.error if o is not None else None) or "the new state could not be written"
                results[tp] = (failed, f"Failed to elect leader for partition {tp}: {why}")
        elected = [tp for tp in electable if results[tp] == OK]
        if elected:
            log.info(
                "%s %s election (%s) moved the leadership of %s",
                core.prefix,
                "preferred" if election_type == PREFERRED else "unclean",
                trigger,
                ", ".join(map(str, elected)),
            )
        return results

    async def preferred_node_election(
        self, partitions: list[tuple[str, int]], batch: RequestBatch
    ) -> None:
        """`/admin/preferred_replica_election` was created: elect, then delete the node."""
        core = self.core
        tps = [TopicPartition(t, p) for t, p in partitions]
        results = await self.elect(
            PREFERRED, tps, batch, trigger=paths.ADMIN_PREFERRED_REPLICA_ELECTION
        )
        for tp, (code, msg) in sorted(results.items()):
            if code not in (ErrorCode.none, ErrorCode.election_not_needed):
                log.warning("%s preferred election of %s: %s %s", core.prefix, tp, code.name, msg)
        await core.zk.delete_preferred_election_request(core.ctx.epoch_zk_version)

    async def auto_rebalance(self, percentage: int, batch: RequestBatch) -> list[TopicPartition]:
        """One round of auto leader rebalance; the partitions whose leadership moved."""
        ctx = self.core.ctx
        if ctx.reassigning:
            return []  # Kafka leaves the leaders alone while partitions move
        partitions = {
            tp: PartitionLeadership(ctx.replicas(tp), st.leader, st.isr)
            for tp, st in ctx.states.items()
            if not ctx.is_queued_for_deletion(tp.topic) and ctx.replicas(tp)
        }
        candidates = rebalance_candidates(partitions, ctx.leader_candidates(), percentage)
        if not candidates:
            return []
        results = await self.elect(PREFERRED, candidates, batch, trigger="auto rebalance")
        return [tp for tp, r in results.items() if r == OK]

    # --- controlled shutdown ------------------------------------------------------------------
    async def controlled_shutdown(
        self, broker_id: int, broker_epoch: int, batch: RequestBatch
    ) -> tuple[ErrorCode, list[TopicPartition]]:
        """Kafka's doControlledShutdown: the broker joins the shutting-down brokers (it can no
        longer lead or join an ISR); partitions it leads (with other replicas) elect another
        leader from the ISR; partitions it follows drop it from the ISR and stop it. Returns
        the partitions it still leads (those with no other eligible replica)."""
        core, ctx = self.core, self.core.ctx
        reg = ctx.live_brokers.get(broker_id)
        if reg is None:
            return ErrorCode.broker_not_available, []
        if broker_epoch != -1 and broker_epoch < reg.epoch:
            log.info(
                "%s controlled shutdown request from an old epoch %d of broker %d (now %d)",
                core.prefix,
                broker_epoch,
                broker_id,
                reg.epoch,
            )
            return ErrorCode.stale_broker_epoch, []
        log.info("%s shutting down broker %d", core.prefix, broker_id)
        ctx.shutting_down.add(broker_id)
        to_act_on = [
            tp
            for tp in ctx.partitions_on_broker(broker_id)
            if len(ctx.replicas(tp)) > 1
            and tp in ctx.states
            and not ctx.is_queued_for_deletion(tp.topic)
        ]
        led = [tp for tp in to_act_on if ctx.states[tp].leader == broker_id]
        followed = [tp for tp in to_act_on if ctx.states[tp].leader != broker_id]
        if led:
            await core.elect_with(led, ElectionStrategy.CONTROLLED_SHUTDOWN, batch)
        for tp in followed:
            add_stop_replica(batch, ctx, broker_id, tp, delete=False)
        replicas = [PartitionReplica(tp, broker_id) for tp in followed]
        await core.replicas_offline(replicas, batch, stop_replica=False)
        remaining = self.led_by(broker_id)
        log.info(
            "%s broker %d in controlled shutdown still leads %d partitions%s",
            core.prefix,
            broker_id,
            len(remaining),
            f": {', '.join(map(str, remaining))}" if remaining else "",
        )
        return ErrorCode.none, remaining

    def led_by(self, broker_id: int) -> list[TopicPartition]:
        """Partitions (with more than one replica) `broker_id` leads."""
        ctx = self.core.ctx
        return sorted(
            tp
            for tp, st in ctx.states.items()
            if st.leader == broker_id
            and len(ctx.replicas(tp)) > 1
            and not ctx.is_queued_for_deletion(tp.topic)
        )
