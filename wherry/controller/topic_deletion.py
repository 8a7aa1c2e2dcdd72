"""Topic deletion (Kafka's TopicDeletionManager), pure: decides which replicas to
stop and delete and when a topic is gone; the controller sends the requests, hears the
StopReplica answers and deletes the topic's nodes.

A topic queued for deletion (`/admin/delete_topics/<t>`) is first announced to every live
broker with leader -2 (they drop it from their metadata caches), then each live replica moves
OfflineReplica → ReplicaDeletionStarted (one StopReplica with delete per broker). A replica
that answers without error is ReplicaDeletionSuccessful; one that fails, or lives on a dead
broker, is ReplicaDeletionIneligible and the topic waits (ineligible) until a broker hosting
it starts again (`resume_for`) or a new controller takes over. Once every replica is
successful, the topic is complete: replicas and partitions become NonExistent and the
controller removes `/brokers/topics/<t>`, `/config/topics/<t>` and the deletion marker. All
of this state lives in the controller context and the replica states, so a new controller
(which starts from the store) resumes a pending deletion.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import ControllerContext
from wherry.controller.partition_state import PartitionStateMachine
from wherry.controller.replica_state import (
    PartitionReplica,
    ReplicaState,
    ReplicaStateMachine,
    replicas_of,
)
from wherry.controller.request_batch import RequestBatch
from wherry.controller.request_states import add_update_metadata
from wherry.runtime.state_change_log import controller_prefix

log = logging.getLogger(__name__)


class TopicDeletionManager:
    def __init__(self, controller_id: int) -> None:
        self.controller_id = controller_id

    def _prefix(self, ctx: ControllerContext) -> str:
        return controller_prefix(self.controller_id, ctx.epoch)

    def init(self, ctx: ControllerContext, queued: Iterable[str]) -> None:
        """At failover: the known topics queued for deletion; those with a replica on a dead
        broker are ineligible for now."""
        ctx.topics_to_delete = {t for t in queued if t in ctx.assignments}
        ctx.topics_ineligible_for_deletion = {
            t
            for t in ctx.topics_to_delete
            if any(ctx.offline_replicas(tp) for tp in ctx.partitions_of(t))
        }

    def enqueue(self, ctx: ControllerContext, topics: Iterable[str]) -> list[str]:
        new = sorted({t for t in topics if t in ctx.assignments} - ctx.topics_to_delete)
        if new:
            log.info("%s topics queued for deletion: %s", self._prefix(ctx), new)
        ctx.topics_to_delete.update(new)
        return new

    def resume_for(self, ctx: ControllerContext, topics: Iterable[str]) -> None:
        """A broker hosting these topics started: their deletion may go on."""
        ctx.topics_ineligible_for_deletion.difference_update(topics)

    def fail_replica_deletion(
        self, ctx: ControllerContext, rsm: ReplicaStateMachine, replicas: Iterable[PartitionReplica]
    ) -> None:
        replicas = list(replicas)
        ctx.topics_ineligible_for_deletion.update(
            r.tp.topic for r in replicas if ctx.is_queued_for_deletion(r.tp.topic)
        )
        failed = [
            r
            for r in replicas
            if ctx.is_queued_for_deletion(r.tp.topic)
            and rsm.state(r) is not ReplicaState.DELETION_INELIGIBLE
        ]
        if not failed:
            return
        topics = sorted({r.tp.topic for r in failed})
        log.info(
            "%s deletion of %s halted: replicas %s could not be deleted",
            self._prefix(ctx),
            topics,
            [str(r) for r in failed],
        )
        # A replica whose deletion never started (its broker died first) goes offline first.
        rsm.complete_offline(
            ctx,
            [r for r in failed if rsm.state(r) in (ReplicaState.ONLINE, ReplicaState.NEW)],
            {},
            RequestBatch(self.controller_id, ctx.epoch),  # dead or failing: nothing to send
            stop_replica=False,
        )
        rsm.to_deletion_ineligible(ctx, failed)

    def stop_replica_answered(
        self,
        ctx: ControllerContext,
        rsm: ReplicaStateMachine,
        broker_id: int,
        errors: Mapping[TopicPartition, int],
    ) -> None:
        """A broker answered a StopReplica with delete: per partition, its error code."""
        started = [
            (PartitionReplica(tp, broker_id), err)
            for tp, err in sorted(errors.items())
            if ctx.is_queued_for_deletion(tp.topic)
            and rsm.state(PartitionReplica(tp, broker_id)) is ReplicaState.DELETION_STARTED
        ]
        rsm.to_deletion_successful(ctx, [r for r, err in started if err == 0])
        self.fail_replica_deletion(ctx, rsm, [r for r, err in started if err != 0])

    def plan(
        self,
        ctx: ControllerContext,
        psm: PartitionStateMachine,
        rsm: ReplicaStateMachine,
        batch: RequestBatch,
    ) -> list[str]:
        """Start (or retry) what can start; returns the topics whose every replica is deleted
        (the controller removes their nodes, then calls `complete`)."""
        done: list[str] = []
        for topic in sorted(ctx.topics_to_delete):
            replicas = replicas_of(ctx, ctx.partitions_of(topic))
            states = [rsm.state(r) for r in replicas]
            if all(s is ReplicaState.DELETION_SUCCESSFUL for s in states):
                done.append(topic)
            elif any(s is ReplicaState.DELETION_STARTED for s in states):
                continue  # answers pending
            elif topic in ctx.topics_ineligible_for_deletion:
                log.info(
                    "%s deletion of %s waits for replicas on brokers %s",
                    self._prefix(ctx),
                    topic,
                    sorted({r.replica for r in replicas if not ctx.is_live(r.replica)}),
                )
            else:
                self._start(ctx, rsm, batch, topic, replicas)
        return done

    def _start(
        self,
        ctx: ControllerContext,
        rsm: ReplicaStateMachine,
        batch: RequestBatch,
        topic: str,
        replicas: list[PartitionReplica],
    ) -> None:
        log.info("%s deleting topic %s", self._prefix(ctx), topic)
        add_update_metadata(batch, ctx, ctx.live_brokers, ctx.partitions_of(topic))
        dead = [r for r in replicas if not ctx.is_live(r.replica)]
        retry = [
            r
            for r in replicas
            if ctx.is_live(r.replica) and rsm.state(r) is not ReplicaState.DELETION_SUCCESSFUL
        ]
        if dead:
            self.fail_replica_deletion(ctx, rsm, dead)
        rsm.complete_offline(ctx, retry, {}, batch, stop_replica=True)
        rsm.to_deletion_started(ctx, retry, batch)

    def complete(
        self,
        ctx: ControllerContext,
        psm: PartitionStateMachine,
        rsm: ReplicaStateMachine,
        topic: str,
    ) -> None:
        """The topic's nodes are gone: forget it."""
        rsm.to_non_existent(ctx, rsm.replicas_of_topic(topic))
        tps = ctx.partitions_of(topic)
        psm.to_offline(ctx, tps)
        psm.to_non_existent(ctx, tps)
        ctx.remove_topic(topic)
        log.info("%s deletion of topic %s completed", self._prefix(ctx), topic)
