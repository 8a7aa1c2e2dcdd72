"""AlterPartition (API 56) on the controller (Kafka 3.9's
KafkaController.processAlterPartition in ZooKeeper mode, with KIP-903's broker epochs).

* `parse_request`: the wire request (v2/v3) as plain values.
* `validate`: pure; one partition's verdict from the controller's context: the new state to
  write, the current one (already as asked), or an error.
* `process_alter_partition`: runs on the controller's event queue (the controller checks it
  is acting first); validates against the context, writes the new ISRs through the
  controller's conditional write function (partition epoch = state node version, +1 per
  write; a conflict is INVALID_UPDATE_VERSION) and answers with what is stored; the caller
  records what was written for propagation.
* `IsrChangePropagation`: pure; the seed's batching of ISR-only UpdateMetadata (propagate
  once no change arrived for `blackout_ms`, or `interval_ms` after the last propagation,
  whichever comes first). Leader changes never wait for it: they go out with their
  LeaderAndIsr. `add_due_isr_changes` puts the due ones in the controller's request batch.

This module does not know the controller: it gets the context, the write function and the
batch as arguments (`controller.py` imports it, never the other way round).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import ControllerContext, LeaderIsr
from wherry.controller.request_batch import RequestBatch
from wherry.controller.request_states import add_update_metadata
from wherry.runtime.state_change_log import controller_prefix, log_controller_partition_change

log = logging.getLogger(__name__)

DEFAULT_ISR_CHANGE_BLACKOUT_MS = 5_000
DEFAULT_ISR_CHANGE_INTERVAL_MS = 60_000
DEFAULT_ISR_CHANGE_CHECK_MS = 2_500

DecideLeaderIsr = Callable[[TopicPartition, LeaderIsr], LeaderIsr | None]
"""A partition's new state from its current one (None: write nothing)."""

WriteLeaderIsr = Callable[
    [Iterable[TopicPartition], DecideLeaderIsr], Awaitable[dict[TopicPartition, LeaderIsr]]
]
"""The controller's conditional write (`Controller._update_leader_isr`): decides each
partition's state from its current one, writes it fenced and conditionally, re-reads and
decides again on conflict; returns what was written (also put in the context)."""


# --- the request --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class IsrChange:
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    isr: tuple[int, ...]
    broker_epochs: tuple[int, ...]  # -1: not checked
    partition_epoch: int
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class AlterPartitionInput:
    broker_id: int
    broker_epoch: int
    changes: tuple[IsrChange, ...]


def parse_request(body: Any) -> AlterPartitionInput:
    changes: list[IsrChange] = []
    for t in body.topics:
        for p in t.partitions:
            with_epochs = getattr(p, "new_isr_with_epochs", None)
            if with_epochs is not None:
                isr = tuple(int(b.broker_id) for b in with_epochs)
                epochs = tuple(int(b.broker_epoch) for b in with_epochs)
            else:
                isr = tuple(int(b) for b in getattr(p, "new_isr", ()))
                epochs = tuple(-1 for _ in isr)
            changes.append(
                IsrChange(
                    t.topic_id,
                    int(p.partition_index),
                    int(p.leader_epoch),
                    isr,
                    epochs,
                    int(p.partition_epoch),
                    int(getattr(p, "leader_recovery_state", 0)),
                )
            )
    return AlterPartitionInput(int(body.broker_id), int(body.broker_epoch), tuple(changes))


# --- the rules (pure) ---------------------------------------------------------------------
def check_requester(ctx: ControllerContext, broker_id: int, broker_epoch: int) -> ErrorCode:
    """The requesting broker must be live with the epoch it registered with."""
    reg = ctx.live_brokers.get(broker_id)
    if reg is None or (broker_epoch != -1 and reg.epoch != broker_epoch):
        return ErrorCode.stale_broker_epoch
    return ErrorCode.none


@dataclass(frozen=True, slots=True)
class Verdict:
    error: ErrorCode = ErrorCode.none
    write: LeaderIsr | None = None  # the state to write (conditionally on its zk_version)
    current: LeaderIsr | None = None  # already as asked: answer with it, write nothing


def validate(
    ctx: ControllerContext,
    requester: int,
    tp: TopicPartition,
    change: IsrChange,
    *,
    shutting_down: Collection[int] = (),
) -> Verdict:
    cur = ctx.states.get(tp)
    if cur is None or ctx.is_queued_for_deletion(tp.topic):
        return Verdict(ErrorCode.unknown_topic_or_partition)
    if change.partition_epoch > cur.zk_version or change.leader_epoch > cur.leader_epoch:
        # The leader knows a newer state than ours: we are likely no longer the controller.
        return Verdict(ErrorCode.not_controller)
    if change.leader_epoch < cur.leader_epoch:
        return Verdict(ErrorCode.fenced_leader_epoch)
    if requester != cur.leader:
        return Verdict(ErrorCode.not_leader_or_follower)
    if sorted(change.isr) == sorted(cur.isr):
        return Verdict(current=cur)  # idempotent: a retried request that was applied
    if change.partition_epoch < cur.zk_version:
        return Verdict(ErrorCode.invalid_update_version)
    if requester not in change.isr:
        return Verdict(ErrorCode.invalid_request)
    assigned = ctx.replicas(tp)
    if any(r not in assigned for r in change.isr):
        # As Kafka's ZooKeeper-mode controller: the leader reverts to its committed ISR rather
        # than retrying (a leader whose replica list is stale proposes a removed replica).
        return Verdict(ErrorCode.ineligible_replica)
    for r, epoch in zip(change.isr, change.broker_epochs, strict=True):
        reg = ctx.live_brokers.get(r)
        if (
            reg is None
            or r in shutting_down
            or (epoch != -1 and r != requester and reg.epoch != epoch)
        ):
            return Verdict(ErrorCode.ineligible_replica)
    new = LeaderIsr(
        cur.leader, cur.leader_epoch, tuple(sorted(change.isr)), ctx.epoch, cur.zk_version
    )
    return Verdict(write=new)


# --- propagation --------------------------------------------------------------------------
@dataclass(slots=True)
class IsrChangePropagation:
    blackout_ms: int = DEFAULT_ISR_CHANGE_BLACKOUT_MS
    interval_ms: int = DEFAULT_ISR_CHANGE_INTERVAL_MS
    check_interval_ms: int = DEFAULT_ISR_CHANGE_CHECK_MS
    changed: set[TopicPartition] = field(default_factory=set)
    last_change_ms: int = 0
    last_propagation_ms: int = 0

    def record(self, tps: Iterable[TopicPartition], now_ms: int) -> None:
        added = False
        for tp in tps:
            self.changed.add(tp)
            added = True
        if added:
            self.last_change_ms = now_ms

    def take_due(self, now_ms: int) -> list[TopicPartition]:
        """The partitions to announce now (emptied), or [] (nothing, or not yet)."""
        if not self.changed:
            return []
        if (
            self.last_change_ms + self.blackout_ms < now_ms
            or self.last_propagation_ms + self.interval_ms < now_ms
        ):
            out = sorted(self.changed)
            self.changed.clear()
            self.last_propagation_ms = now_ms
            return out
        return []

    def clear(self) -> None:
        self.changed.clear()


def add_due_isr_changes(
    batch: RequestBatch, ctx: ControllerContext, propagation: IsrChangePropagation, now_ms: int
) -> None:
    """Add the ISR changes due for propagation (of partitions that still exist) to `batch`
    as UpdateMetadata to every live broker."""
    tps = [tp for tp in propagation.take_due(now_ms) if tp in ctx.states]
    if tps:
        add_update_metadata(batch, ctx, ctx.live_brokers, tps)


# --- on the controller's queue ------------------------------------------------------------
def error_response(code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "topics": []}


def unanswered_response(still_active: bool) -> dict[str, Any]:
    """The answer to a request whose event ended without one. A controller that resigned on
    the way (its session ended, a fenced write failed) answers NOT_CONTROLLER, as Kafka does,
    and the leader retries with the controller its metadata names next; an active one that
    failed answers UNKNOWN_SERVER_ERROR."""
    return error_response(
        ErrorCode.unknown_server_error if still_active else ErrorCode.not_controller
    )


def _partition_answer(
    partition: int, error: ErrorCode, st: LeaderIsr | None = None
) -> dict[str, Any]:
    if st is None:
        return {
            "partition_index": partition,
            "error_code": error,
            "leader_id": -1,
            "leader_epoch": -1,
            "isr": [],
            "leader_recovery_state": 0,
            "partition_epoch": -1,
        }
    return {
        "partition_index": partition,
        "error_code": ErrorCode.none,
        "leader_id": st.leader,
        "leader_epoch": st.leader_epoch,
        "isr": list(st.isr),
        "leader_recovery_state": 0,
        "partition_epoch": st.zk_version,
    }


@dataclass(frozen=True, slots=True)
class AlterPartitionOutcome:
    response: dict[str, Any]  # a version-neutral AlterPartitionResponse mapping
    written: dict[TopicPartition, LeaderIsr]  # the new states (to propagate)


async def process_alter_partition(
    ctx: ControllerContext,
    req: AlterPartitionInput,
    write: WriteLeaderIsr,
    *,
    controller_id: int,
) -> AlterPartitionOutcome:
    """The answer to `req` from the acting controller `controller_id` with context `ctx`;
    new ISRs are written with `write`."""
    top = check_requester(ctx, req.broker_id, req.broker_epoch)
    if top is not ErrorCode.none:
        log.info(
            "%s ignoring AlterPartition from broker %d: broker epoch %d is stale",
            controller_prefix(controller_id, ctx.epoch),
            req.broker_id,
            req.broker_epoch,
        )
        return AlterPartitionOutcome(error_response(top), {})
    names = {tid: name for name, tid in ctx.topic_ids.items()}
    answers: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}
    wanted: dict[TopicPartition, IsrChange] = {}
    for ch in req.changes:
        name = names.get(ch.topic_id)
        if name is None:
            answers[(ch.topic_id, ch.partition)] = _partition_answer(
                ch.partition, ErrorCode.unknown_topic_id
            )
            continue
        wanted[TopicPartition(name, ch.partition)] = ch
    verdicts: dict[TopicPartition, Verdict] = {}

    def decide(tp: TopicPartition, cur: LeaderIsr) -> LeaderIsr | None:
        verdicts[tp] = v = validate(
            ctx, req.broker_id, tp, wanted[tp], shutting_down=ctx.shutting_down
        )
        return v.write

    written = await write(list(wanted), decide)
    for tp, ch in wanted.items():
        key = (ch.topic_id, ch.partition)
        v = verdicts.get(tp) or validate(
            ctx, req.broker_id, tp, ch, shutting_down=ctx.shutting_down
        )
        if tp in written:
            st = written[tp]
            answers[key] = _partition_answer(ch.partition, ErrorCode.none, st)
            log_controller_partition_change(
                controller_id,
                ctx.epoch,
                tp.topic,
                tp.partition,
                "OnlinePartition",
                "OnlinePartition",
                leader=st.leader,
                leader_epoch=st.leader_epoch,
                isr=st.isr,
                zk_version=st.zk_version,
                reason="AlterPartition",
            )
        elif v.current is not None:
            answers[key] = _partition_answer(ch.partition, ErrorCode.none, v.current)
        elif v.error is not ErrorCode.none:
            answers[key] = _partition_answer(ch.partition, v.error)
        else:  # decided to write, but every attempt conflicted
            answers[key] = _partition_answer(ch.partition, ErrorCode.invalid_update_version)
    topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for (tid, _), ans in answers.items():
        topics.setdefault(tid, []).append(ans)
    response = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()],
    }
    return AlterPartitionOutcome(response, written)
