"""The simulation's clients and followers reach the brokers through the broker's real request
path (frames decoded by the codecs, the handlers, fetch sessions, share sessions, the admin
manager and producer id blocks on the broker's store session): a bug planted in a request
handler is one the simulation finds."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.manager import LogManager
from wherry.protocol.codec import Request
from wherry.replication.log_dir_mover import LogDirMover
from wherry.server.handlers import LOADED, handler_for, share_state_common
from wherry.server.handlers.share_common import answer, open_session
from wherry.server.metadata_gate import MetadataGate
from wherry.server.producer_ids import ProducerIdManager
from wherry.server.sasl_gate import SaslGate
from wherry.server.services import BrokerServices
from wherry.sim.world import SimOptions, SimResult, run_seed

CI = SimOptions(duration_ms=3_000, settle_ms=2_500)
PRODUCE, FETCH, METADATA, FIND_COORDINATOR = 0, 1, 3, 10


@pytest.fixture
def handlers() -> Iterator[dict[int, Any]]:
    """The handler table, restored afterwards."""
    saved = dict(LOADED)
    yield LOADED
    LOADED.clear()
    LOADED.update(saved)


def first_failure(seeds: int, options: SimOptions = CI) -> SimResult | None:
    for seed in range(seeds):
        result = run_seed(seed, options)
        if not result.ok:
            return result
    return None


async def produce_acknowledged_not_appended(
    broker: BrokerServices, req: Request
) -> Mapping[str, Any]:
    """A Produce handler with a bug: it answers NONE at the log end offset without appending."""
    responses = []
    for t in req.body.topic_data:
        parts = []
        for p in t.partition_data:
            part = broker.replica_manager.get_partition(TopicPartition(t.name, p.index))
            end = part.log.log_end_offset if part is not None else 0
            parts.append(
                {"index": p.index, "error_code": ErrorCode.none, "base_offset": end,
                 "log_append_time": -1, "log_start_offset": 0}
            )
        responses.append({"name": t.name, "partition_responses": parts})
    return {"responses": responses, "throttle_time": 0}


def counted(handlers: dict[int, Any], keys: tuple[int, ...]) -> dict[int, int]:
    """The real handlers of `keys`, each call counted in the table returned."""
    calls = dict.fromkeys(keys, 0)
    real = {k: handler_for(k) for k in keys}

    def counting(key: int) -> Any:
        async def handle(broker: BrokerServices, req: Request) -> Any:
            calls[key] += 1
            return await real[key](broker, req)

        return handle

    for key in keys:
        handlers[key] = counting(key)
    return calls


def test_the_simulation_runs_the_real_handlers(handlers: dict[int, Any]) -> None:
    """Every Produce and Fetch of a default seed went through the handler table, and the
    clients found the leaders with Metadata requests."""
    calls = counted(handlers, (PRODUCE, FETCH, METADATA))
    result = run_seed(0, CI)
    assert result.ok, result.violation or result.error
    assert result.acks > 0
    assert calls[PRODUCE] >= result.acks  # clients' Produce requests
    assert calls[FETCH] > calls[PRODUCE]  # followers' fetches and consumers'
    assert calls[METADATA] > 0


def test_a_produce_handler_that_does_not_append_is_caught(handlers: dict[int, Any]) -> None:
    assert first_failure(3) is None  # the real handler: no failure
    handlers[PRODUCE] = produce_acknowledged_not_appended
    failed = first_failure(50)
    assert failed is not None, "the planted Produce bug went unnoticed for 50 seeds"
    assert failed.violation is not None and "acknowledged" in failed.violation, failed


def test_the_brokers_gates_are_on_the_simulated_request_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As in `wherry server`, every request frame meets the SASL gate and the metadata gate
    before it is decoded: a client's request to a broker just (re)started waits for its first
    metadata, in some seed of a few; and a gate bug -- one holding the controller's own
    requests too, so the metadata that opens it never gets in -- is caught."""
    seen: list[bool] = []
    real_holds = MetadataGate.holds
    sasl_checked: list[int] = []
    real_authenticator = SaslGate.authenticator

    def holds(self: MetadataGate, frame: bytes | memoryview) -> bool:
        seen.append(held := real_holds(self, frame))
        return held

    def authenticator(self: SaslGate, conn: Any) -> Any:
        sasl_checked.append(conn.id)
        return real_authenticator(self, conn)

    monkeypatch.setattr(MetadataGate, "holds", holds)
    monkeypatch.setattr(SaslGate, "authenticator", authenticator)
    assert first_failure(12) is None
    assert any(seen), "no client request waited for a broker's first metadata in 12 seeds"
    assert len(sasl_checked) == len(seen)

    monkeypatch.setattr(MetadataGate, "holds", lambda self, frame: not self.is_open)
    failed = first_failure(3)
    assert failed is not None and failed.violation is not None, failed
    assert "no broker leads" in failed.violation


SHARE = dataclasses.replace(CI, share_consumers=True)
SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79


async def acknowledge_not_recorded(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    """A ShareAcknowledge handler with a bug: its session moves on as it should, but it
    answers NONE for every partition without applying the acknowledgements."""
    opened = await open_session(broker, req.body, fetch=False)
    if isinstance(opened, dict):
        return opened
    by_topic = {
        t.topic_id: [
            {"partition_index": p.partition_index, "error_code": ErrorCode.none,
             "error_message": None, "current_leader": {"leader_id": -1, "leader_epoch": -1}}
            for p in t.partitions
        ]
        for t in req.body.topics
    }
    return answer(ErrorCode.none, lock_ms=opened[0].record_lock_duration_ms, by_topic=by_topic)


def fetch_ignoring_acknowledgements(real: Any) -> Any:
    """A ShareFetch handler with a bug: it drops the acknowledgements a request carries, so
    it answers their partitions' acknowledge error code NONE without applying them."""

    async def handle(broker: BrokerServices, req: Request) -> Any:
        topics = tuple(
            dataclasses.replace(t, partitions=tuple(
                dataclasses.replace(p, acknowledgement_batches=()) for p in t.partitions
            ))
            for t in req.body.topics
        )
        body = dataclasses.replace(req.body, topics=topics)
        return await real(broker, dataclasses.replace(req, body=body))

    return handle


def test_share_consumers_go_through_the_real_handlers(handlers: dict[int, Any]) -> None:
    """The share consumers' heartbeats, fetches and acknowledgements of a seed are request
    frames through the handler table, and so are their FindCoordinator and Metadata."""
    keys = (SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE, FIND_COORDINATOR, METADATA)
    calls = counted(handlers, keys)
    result = run_seed(0, SHARE)
    assert result.ok, result.violation or result.error
    assert result.share_accepts > 0
    assert calls[SHARE_GROUP_HEARTBEAT] > 10
    assert calls[SHARE_FETCH] > 10
    assert calls[SHARE_ACKNOWLEDGE] > 0
    assert calls[FIND_COORDINATOR] > 0 and calls[METADATA] > 0


@pytest.mark.parametrize("bug", ["share_acknowledge", "share_fetch"])
def test_a_share_handler_that_does_not_record_acknowledgements_is_caught(
    handlers: dict[int, Any], bug: str
) -> None:
    assert first_failure(2, SHARE) is None  # the real handlers: no failure
    if bug == "share_acknowledge":
        handlers[SHARE_ACKNOWLEDGE] = acknowledge_not_recorded
    else:
        handlers[SHARE_FETCH] = fetch_ignoring_acknowledgements(handler_for(SHARE_FETCH))
    failed = first_failure(50, SHARE)
    assert failed is not None, f"the planted {bug} bug went unnoticed for 50 seeds"
    assert failed.violation is not None and "delivered again" in failed.violation, failed


READ_SHARE_GROUP_STATE, WRITE_SHARE_GROUP_STATE = 84, 85


def test_the_share_coordinator_is_reached_through_the_real_handlers(
    handlers: dict[int, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The share-partition leaders read and write their state at the share coordinator's
    broker in Read/WriteShareGroupState frames through its handlers (in process only when
    they are that broker), and a share consumer's closed connection closes its share
    sessions at the broker."""
    from wherry.coordinator.shares import ShareGroupsRuntime

    calls = counted(handlers, (READ_SHARE_GROUP_STATE, WRITE_SHARE_GROUP_STATE))
    closed: list[int] = []
    real_close = ShareGroupsRuntime.on_connection_closed

    def on_connection_closed(self: ShareGroupsRuntime, connection_id: int) -> None:
        closed.append(connection_id)
        real_close(self, connection_id)

    monkeypatch.setattr(ShareGroupsRuntime, "on_connection_closed", on_connection_closed)
    result = run_seed(0, SHARE)
    assert result.ok, result.violation or result.error
    assert calls[READ_SHARE_GROUP_STATE] > 0
    assert calls[WRITE_SHARE_GROUP_STATE] > 0
    assert closed  # lost or timed-out requests' connections, closed at the broker too


async def write_state_not_written(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    """A WriteShareGroupState handler with a bug: it answers NONE without writing."""

    async def ok(_key: Any, _p: Any) -> dict[str, Any]:
        return {"error_code": ErrorCode.none, "error_message": None}

    return await share_state_common.answer(broker, req.body, ok, {})


def test_a_share_state_write_that_is_not_written_is_caught(handlers: dict[int, Any]) -> None:
    assert first_failure(2, SHARE) is None  # the real handler: no failure
    handlers[WRITE_SHARE_GROUP_STATE] = write_state_not_written
    failed = first_failure(20, SHARE)
    assert failed is not None, "the planted WriteShareGroupState bug went unnoticed for 20 seeds"
    assert failed.violation is not None and "share" in failed.violation, failed


def _trace(seed: int) -> tuple[object, ...]:
    r = run_seed(seed, SimOptions(duration_ms=1_500, settle_ms=3_000, transactions=True))
    return (r.ok, r.violation, r.steps, r.sim_ms, r.acks, r.produced, r.consumed,
            r.transactions, r.committed, tuple(r.faults))


def test_a_seed_replays_the_same_after_other_worlds_ran_in_the_process() -> None:
    """Nothing of a world outlives it: the same seed, run first and again after other seeds
    in one process, takes the same steps and ends the same."""
    first = _trace(7)
    for other in (1, 2):
        _trace(other)
    assert _trace(7) == first


# --- topic administration (`sim/topic_operations.py`) ----------------------------------------
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37


def counting(handlers: dict[int, Any], keys: tuple[int, ...]) -> dict[tuple[int, str], int]:
    """The real handlers of `keys`; each result's error code (each partition's, for answers
    per partition) counted by (key, name)."""
    seen: dict[tuple[int, str], int] = {}
    real = {k: handler_for(k) for k in keys}

    def wrap(key: int) -> Any:
        async def handle(broker: BrokerServices, req: Request) -> Any:
            out = await real[key](broker, req)
            assert isinstance(out, Mapping)
            items = out.get("topics") or out.get("responses") or out.get("results") or []
            for item in items:
                for result in item.get("partitions", [item]):
                    name = ErrorCode(result["error_code"]).name
                    seen[(key, name)] = seen.get((key, name), 0) + 1
            return out

        return handle

    for key in keys:
        handlers[key] = wrap(key)
    return seen


def test_topic_requests_go_through_the_real_handlers(handlers: dict[int, Any]) -> None:
    """Over a few default seeds, topics are created, deleted and given partitions through the
    handlers, answered NONE mostly, and every seed's final check holds."""
    seen = counting(handlers, (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS))
    assert first_failure(12) is None
    for key in (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS):
        assert seen.get((key, "none"), 0) > 0, (key, seen)


async def delete_answered_not_marked(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    """A DeleteTopics handler with a bug: NONE for every topic, no deletion marked."""
    return {
        "throttle_time": 0,
        "responses": [
            {"name": t.name, "topic_id": t.topic_id, "error_code": ErrorCode.none,
             "error_message": None}
            for t in req.body.topics
        ],
    }


async def partitions_answered_not_written(
    broker: BrokerServices, req: Request
) -> Mapping[str, Any]:
    """A CreatePartitions handler with a bug: NONE for every topic, nothing written."""
    return {
        "throttle_time": 0,
        "results": [
            {"name": t.name, "error_code": ErrorCode.none, "error_message": None}
            for t in req.body.topics
        ],
    }


@pytest.mark.parametrize(
    ("key", "bug", "words"),
    [
        (DELETE_TOPICS, delete_answered_not_marked, "yet in the store"),
        (CREATE_PARTITIONS, partitions_answered_not_written, "answered"),
    ],
)
def test_a_topic_handler_that_answers_without_acting_is_caught(
    handlers: dict[int, Any], key: int, bug: Any, words: str
) -> None:
    handlers[key] = bug
    failed = first_failure(50)
    assert failed is not None, f"the planted bug of API {key} went unnoticed for 50 seeds"
    assert failed.violation is not None and words in failed.violation, failed


def test_producer_ids_come_from_the_brokers_blocks_in_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With transactions, new producer ids come from `wherry server`'s producer id blocks,
    claimed in the simulated metadata store: each id handed out once across the brokers."""
    given: list[tuple[int, int]] = []
    real = ProducerIdManager.next_id

    async def next_id(self: ProducerIdManager) -> int:
        pid = await real(self)
        given.append((pid, self.broker_id))
        return pid

    monkeypatch.setattr(ProducerIdManager, "next_id", next_id)
    result = run_seed(1, dataclasses.replace(CI, transactions=True))
    assert result.ok, result.violation or result.error
    ids = [pid for pid, _ in given]
    assert ids and len(set(ids)) == len(ids), given
    assert len({b for _, b in given}) > 1 or len(ids) < 2  # blocks of several brokers


# --- log-dir moves (`sim/log_dir_operations.py`) -------------------------------------------------
ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35


def test_replicas_move_between_log_dirs_through_the_real_handlers(
    handlers: dict[int, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's DescribeLogDirs and AlterReplicaLogDirs go through the handlers, and the
    brokers' log-dir movers promote future logs while the faults go on; the seeds hold."""
    seen = counting(handlers, (ALTER_REPLICA_LOG_DIRS,))
    described = counted(handlers, (DESCRIBE_LOG_DIRS,))
    promoted: list[TopicPartition] = []
    real = LogManager.promote_future_log

    def promote(self: LogManager, tp: TopicPartition, **kw: Any) -> bool:
        done = real(self, tp, **kw)
        if done:
            promoted.append(tp)
        return done

    monkeypatch.setattr(LogManager, "promote_future_log", promote)
    assert first_failure(6) is None
    assert described[DESCRIBE_LOG_DIRS] > 0
    assert seen.get((ALTER_REPLICA_LOG_DIRS, "none"), 0) > 0, seen
    assert len(promoted) > 3, promoted


def test_a_log_dir_mover_that_stops_copying_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mover bug -- steps that copy nothing -- leaves moves unfinished after healing."""

    async def idle_step(self: LogDirMover, tp: TopicPartition) -> int:
        return 0

    monkeypatch.setattr(LogDirMover, "_step", idle_step)
    failed = first_failure(10)
    assert failed is not None, "moves that never finish went unnoticed for 10 seeds"
    assert failed.violation is not None and "moves not finished" in failed.violation, failed
