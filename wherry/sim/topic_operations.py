"""Topic administration as simulated events, through a broker's real request path.

An admin client's CreateTopics, CreatePartitions and DeleteTopics go as request frames over
the simulated network to a live broker at random, through its dispatch, codecs and handlers
to `wherry server`'s admin manager, which writes them to the metadata store; the real
controller then acts on them: leaders elected and LeaderAndIsr sent for new partitions, a
deleted topic's replicas stopped and their logs deleted (`kafka-delete-logs` removes the
directories a moment later). The topics come from a small pool of names, so a name is often
deleted and created again, and the operations run beside the faults, the reassignments of
the main topic and controller crashes.

`TopicLedger` keeps, per name, what the answers say the cluster must end with: a create or
CreatePartitions answered NONE, the topic with that many partitions; a delete answered NONE
or timed out (the deletion is marked and goes on), no topic. An unanswered request, or a
create or CreatePartitions that timed out, may have happened or not: the name's expectation is
unknown until a later answer settles it, and the name rests for a while, so nothing still
running at a broker overtakes the next request on it.

After healing, with every broker up (`settle_and_check`): no deletion left pending; each
name as its ledger says; a topic in the store has each partition led, at its stored leader
epoch, by a replica, and a log on each of its replicas and on no other broker; a name not in
the store has no log and no directory on any broker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.coordination.store import NoNodeError
from wherry.sim.admin_client import AdminApi, AdminOperations, AdminWorld
from wherry.sim.invariants import InvariantViolation
from wherry.sim.loop import run_now
from wherry.sim.real_controller import RealControlPlane

__all__ = ["NAMES", "TopicLedger", "TopicOperations"]

CREATE_TOPICS: Final = AdminApi("CreateTopics", 19, 7, "topics")
DELETE_TOPICS: Final = AdminApi("DeleteTopics", 20, 6, "responses")
CREATE_PARTITIONS: Final = AdminApi("CreatePartitions", 37, 3, "results")

# The names the operations use; the world gives them a short `file.delete.delay.ms`.
NAMES: Final = ("admin-a", "admin-b", "admin-c")
# How long the requests' handlers may wait for the metadata (their `timeout`), and how long a
# name rests after a request whose answer never came (longer than any handler runs).
TIMEOUT_MS: Final = 600
REST_MS: Final = 3_000
MAX_PARTITIONS: Final = 3
_ZERO_UUID: Final = uuid.UUID(int=0)


@dataclasses.dataclass(slots=True)
class Expected:
    """What one name must end as: "absent", "present" (with `partitions`, None when that
    is not known) or "unknown"."""

    state: str = "absent"
    partitions: int | None = None


class TopicLedger:
    """Per name, what the answers so far say the cluster must end with."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.expected = {n: Expected() for n in names}
        self.most_partitions = dict.fromkeys(names, 0)  # the most any request asked for

    def asked(self, name: str, partitions: int) -> None:
        self.most_partitions[name] = max(self.most_partitions[name], partitions)

    def unanswered(self, name: str) -> None:
        self.expected[name] = Expected("unknown")

    def created(self, name: str, code: ErrorCode, partitions: int) -> None:
        if code == ErrorCode.none:
            self.expected[name] = Expected("present", partitions)
        elif code == ErrorCode.request_timed_out:  # written, or not (a deletion in the way)
            self.expected[name] = Expected("unknown")

    def deleted(self, name: str, code: ErrorCode) -> None:
        if code in (ErrorCode.none, ErrorCode.request_timed_out):  # marked: it goes on
            self.expected[name] = Expected("absent")

    def partitions_added(self, name: str, code: ErrorCode, count: int) -> None:
        e = self.expected[name]
        if code == ErrorCode.none:
            self.expected[name] = Expected("present", count)
        elif code == ErrorCode.request_timed_out and e.state == "present":
            e.partitions = None  # the new count was written, or not


class TopicOperations(AdminOperations):
    INTERVAL_MS = (100, 400)
    CRASH_CONTROLLER = 0.25

    def __init__(self, world: AdminWorld, plane: RealControlPlane, rng: random.Random) -> None:
        super().__init__(world, rng)
        self.plane = plane
        self.ledger = TopicLedger(NAMES)
        self._busy: set[str] = set()

    # --- one operation --------------------------------------------------------------------------
    async def step(self) -> None:
        """One request on a name no other request is on: a create where the name should be
        free, a delete or more partitions where it should hold a topic, any where unknown."""
        rng = self.rng
        free = [n for n in NAMES if n not in self._busy]
        live = self.admin.live_brokers()
        if not free or not live:
            return
        name = rng.choice(free)
        state = self.ledger.expected[name].state
        if state == "absent":
            kind = "create"
        elif state == "present":
            kind = rng.choice(("delete", "delete", "partitions"))
        else:
            kind = rng.choice(("create", "delete", "partitions"))
        broker = rng.choice(live)
        self._busy.add(name)
        answered = False
        try:
            answered = await {
                "create": self._create,
                "delete": self._delete,
                "partitions": self._add_partitions,
            }[kind](name, broker)
        finally:  # given up at heal too: it may have happened
            if not answered:
                self.ledger.unanswered(name)
        try:
            if not answered:
                await asyncio.sleep(REST_MS / 1000)
        finally:
            self._busy.discard(name)

    async def _ask(
        self,
        name: str,
        broker: int,
        api: AdminApi,
        topic: dict[str, Any],
        record: Callable[[ErrorCode], None],
        **fields: Any,
    ) -> bool:
        """Request `api` of `broker` for one topic; its result's error code `record`ed. False
        when no answer came."""
        body = {"topics": [topic], "timeout": datetime.timedelta(milliseconds=TIMEOUT_MS)}
        code = await self.admin.ask(name, broker, api, {**body, **fields})
        if code is not None:
            record(code)
        return code is not None

    async def _create(self, name: str, broker: int) -> bool:
        w, rng = self.world, self.rng
        partitions = rng.randint(1, MAX_PARTITIONS - 1)
        rf = rng.randint(1, min(3, len(w.broker_ids)))
        assignments: list[dict[str, Any]] = []
        if rng.random() < 0.3:  # the replicas given, down brokers among them maybe
            assignments = [
                {"partition_index": p, "broker_ids": rng.sample(w.broker_ids, rf)}
                for p in range(partitions)
            ]
        self.ledger.asked(name, partitions)
        w.log_fault(
            f"{w.now_ms()}: CreateTopics {name} to broker {broker}: {partitions} partitions, "
            + (f"replicas {[a['broker_ids'] for a in assignments]}" if assignments else f"RF {rf}")
        )
        topic = {
            "name": name,
            "num_partitions": -1 if assignments else partitions,
            "replication_factor": -1 if assignments else rf,
            "assignments": assignments,
            "configs": [],
        }
        return await self._ask(
            name, broker, CREATE_TOPICS, topic,
            lambda code: self.ledger.created(name, code, partitions), validate_only=False,
        )

    async def _delete(self, name: str, broker: int) -> bool:
        w = self.world
        w.log_fault(f"{w.now_ms()}: DeleteTopics {name} to broker {broker}")
        return await self._ask(
            name, broker, DELETE_TOPICS, {"name": name, "topic_id": _ZERO_UUID},
            lambda code: self.ledger.deleted(name, code),
        )

    async def _add_partitions(self, name: str, broker: int) -> bool:
        w = self.world
        e = self.ledger.expected[name]
        count = min(MAX_PARTITIONS, (e.partitions or 1) + self.rng.randint(1, 2))
        self.ledger.asked(name, count)
        w.log_fault(f"{w.now_ms()}: CreatePartitions {name} to {count} to broker {broker}")
        return await self._ask(
            name, broker, CREATE_PARTITIONS, {"name": name, "count": count, "assignments": None},
            lambda code: self.ledger.partitions_added(name, code, count), validate_only=False,
        )

    # --- after healing -------------------------------------------------------------------------
    def _stored(self, path: str) -> bytes | None:
        try:
            data, _ = run_now(self.plane.observer.get(path))
        except NoNodeError:
            return None
        return data

    def check(self) -> None:
        for name in NAMES:
            self._check_name(name)

    def _check_name(self, name: str) -> None:
        if self._stored(paths.delete_topic_path(name)) is not None:
            raise InvariantViolation(f"{name}: after healing, its deletion is still pending")
        assignment = self.plane.stored_assignment(name)
        e = self.ledger.expected[name]
        if e.state == "absent" and assignment is not None:
            raise InvariantViolation(f"{name}: deleted (or never created), yet in the store")
        if e.state == "present":
            if assignment is None:
                raise InvariantViolation(f"{name}: created, yet not in the store")
            if e.partitions is not None and len(assignment.partitions) != e.partitions:
                raise InvariantViolation(
                    f"{name}: {len(assignment.partitions)} partitions in the store, "
                    f"{e.partitions} answered"
                )
        if assignment is None:
            self._check_gone(name)
        else:
            self._check_online(name, assignment.partitions)

    def _check_gone(self, name: str) -> None:
        for b in self.world.broker_ids:
            node = self.world.node(b)
            if node is None:
                raise InvariantViolation(f"broker {b} is down after healing")
            for p in range(self.ledger.most_partitions[name]):
                if node.log_manager.get_log(TopicPartition(name, p)):
                    raise InvariantViolation(f"{name}-{p}: not in the store, yet broker {b} has it")
            left = sorted(
                c.name for d in node.log_dirs for c in d.iterdir() if c.name.startswith(name + "-")
            )
            if left:
                raise InvariantViolation(f"{name}: not in the store, yet broker {b} keeps {left}")

    def _check_online(self, name: str, partitions: Mapping[int, list[int]]) -> None:
        for p, replicas in sorted(partitions.items()):
            tp = TopicPartition(name, p)
            state = self.plane.stored_state(tp)
            if state is None or state.leader not in replicas:
                raise InvariantViolation(f"{tp}: after healing, no leader among {replicas}")
            for b in self.world.broker_ids:
                node = self.world.node(b)
                if node is None:
                    raise InvariantViolation(f"broker {b} is down after healing")
                part = node.replica_manager.get_partition(tp)
                has_log = node.log_manager.get_log(tp) is not None
                if (b in replicas) != has_log:
                    raise InvariantViolation(
                        f"{tp}: broker {b} {'lacks' if has_log is False else 'has'} its log, "
                        f"replicas {replicas}"
                    )
                if b == state.leader and (
                    part is None or not part.is_leader or part.leader_epoch != state.leader_epoch
                ):
                    raise InvariantViolation(
                        f"{tp}: broker {b} does not lead it at the stored state {state}"
                    )

