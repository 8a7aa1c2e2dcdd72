"""Broker APIs at the wire level, every answer checked against Kafka's error codes."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess, wait_until
from tests.kafka_wire import (
    call,
    connect,
    encode_request,
    is_closed,
    produce_body,
    read_response,
)
from wherry.protocol.records import build_batch
from wherry.server.handlers import SUPPORTED_VERSIONS


def create(bs: str, name: str, partitions: int = 1, rf: int = 1, configs: dict | None = None,
           validate_only: bool = False):  # type: ignore[no-untyped-def,type-arg]
    return call(bs, 19, 7, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 10_000, "validate_only": validate_only}).topics[0]


def produce(bs: str | socket.socket, topic: str, records: bytes, partition: int = 0,
            acks: int = -1):  # type: ignore[no-untyped-def]
    body = produce_body(topic, records, partition=partition, acks=acks)
    return call(bs, 0, 9, body).responses[0].partition_responses[0]


def fetch_body(topic: str | None, offset: int, *, topic_id: uuid.UUID | None = None,
               max_wait: int = 0, min_bytes: int = 0, leader_epoch: int = -1) -> dict:  # type: ignore[type-arg]
    return {"replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                 "current_leader_epoch": leader_epoch, "log_start_offset": -1,
                 "last_fetched_epoch": -1}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def name() -> str:
    return f"w-{uuid.uuid4().hex[:10]}"


def test_api_versions_advertises_exactly_what_is_implemented(broker: BrokerProcess) -> None:
    for v in range(5):
        resp = call(broker.bootstrap, 18, v, {"client_software_name": "t",
                                              "client_software_version": "1"})
        assert resp.error_code == ErrorCode.none
        got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert got == SUPPORTED_VERSIONS


def test_idempotent_producer_sequence_rules(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    t = name()
    assert create(bs, t).error_code == ErrorCode.none
    init = call(bs, 22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                            "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == ErrorCode.none and init.producer_id >= 0
    pid = init.producer_id

    def batch(seq: int, epoch: int = 0, n: int = 2) -> bytes:
        return build_batch([(None, f"s{seq + i}".encode()) for i in range(n)], producer_id=pid,
                           producer_epoch=epoch, base_sequence=seq)

    offsets = []
    for seq in range(0, 14, 2):  # seven batches of two records
        r = produce(bs, t, batch(seq))
        assert r.error_code == ErrorCode.none
        offsets.append(r.base_offset)
    assert offsets == list(range(0, 14, 2))
    # a retry of any of the last five batches: no error, original offset, nothing written
    for seq, off in ((12, 12), (4, 4)):
        r = produce(bs, t, batch(seq))
        assert (r.error_code, r.base_offset) == (ErrorCode.none, off)
    # an older duplicate (beyond the last five) and a gap are out of order
    assert produce(bs, t, batch(0)).error_code == ErrorCode.out_of_order_sequence_number
    assert produce(bs, t, batch(20)).error_code == ErrorCode.out_of_order_sequence_number
    # a new epoch must start at sequence 0; then the old epoch is fenced
    assert produce(bs, t, batch(5, epoch=1)).error_code == ErrorCode.out_of_order_sequence_number
    assert produce(bs, t, batch(0, epoch=1)).error_code == ErrorCode.none
    assert produce(bs, t, batch(14, epoch=0)).error_code == ErrorCode.invalid_producer_epoch
    r = call(bs, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": t, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                    "timestamp": -1}]}]})
    assert r.topics[0].partitions[0].offset == 16  # 14 + the epoch-1 batch, no duplicates


def test_transactional_init_producer_id_after_find_coordinator(broker: BrokerProcess) -> None:
    tid = f"tx-{name()}"
    assert wait_until(lambda: call(broker.bootstrap, 10, 4, {
        "key_type": 1, "coordinator_keys": [tid]}).coordinators[0].error_code == ErrorCode.none,
        timeout_s=20)
    answers: list[object] = []

    def init() -> bool:
        r = call(broker.bootstrap, 22, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                           "producer_id": -1, "producer_epoch": -1})
        answers.append(r)
        return bool(r.error_code != ErrorCode.coordinator_load_in_progress)

    assert wait_until(init, timeout_s=20)
    r = answers[-1]
    assert r.error_code == ErrorCode.none and r.producer_epoch == 0  # type: ignore[attr-defined]


def test_metadata_topic_list_semantics_and_auto_create(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    t = name()
    assert create(bs, t, partitions=2).error_code == ErrorCode.none
    v0_all = call(bs, 3, 0, {"topics": []})
    assert t in {x.name for x in v0_all.topics}
    v1_none = call(bs, 3, 1, {"topics": []})
    assert v1_none.topics == ()
    v1_all = call(bs, 3, 1, {"topics": None})
    assert t in {x.name for x in v1_all.topics}
    m = call(bs, 3, 13, {"topics": [{"name": t, "topic_id": uuid.UUID(int=0)}],
                         "allow_auto_topic_creation": False,
                         "include_topic_authorized_operations": False})
    assert m.error_code == ErrorCode.none and m.cluster_id
    (tm,) = m.topics
    assert tm.topic_id != uuid.UUID(int=0)
    assert [p.leader_id for p in tm.partitions] == [0, 0]
    # by topic id
    m2 = call(bs, 3, 12, {"topics": [{"name": None, "topic_id": tm.topic_id}],
                          "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    assert m2.topics[0].name == t
    # an unknown id: no name, written "" before v12 (not nullable there) and null from v12
    for version, no_name in ((10, ""), (12, None)):
        m6 = call(bs, 3, version, {"topics": [{"name": None, "topic_id": uuid.uuid4()}],
                                   "allow_auto_topic_creation": False,
                                   "include_cluster_authorized_operations": False,
                                   "include_topic_authorized_operations": False})
        assert [(x.error_code, x.name) for x in m6.topics] == [
            (ErrorCode.unknown_topic_id, no_name)]
    # unknown topic without auto-creation; an illegal name; auto-creation
    missing = name()
    m3 = call(bs, 3, 9, {"topics": [{"name": missing}, {"name": "bad name!"}],
                         "allow_auto_topic_creation": False,
                         "include_cluster_authorized_operations": False,
                         "include_topic_authorized_operations": False})
    assert [x.error_code for x in m3.topics] == [ErrorCode.unknown_topic_or_partition,
                                                 ErrorCode.invalid_topic_exception]
    m4 = call(bs, 3, 9, {"topics": [{"name": missing}], "allow_auto_topic_creation": True,
                         "include_cluster_authorized_operations": False,
                         "include_topic_authorized_operations": False})
    assert m4.topics[0].error_code in (ErrorCode.leader_not_available, ErrorCode.none)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m5 = call(bs, 3, 1, {"topics": [{"name": missing}]})
        if m5.topics[0].error_code == ErrorCode.none and m5.topics[0].partitions:
            break
        time.sleep(0.05)
    assert m5.topics[0].error_code == ErrorCode.none


def test_metadata_answers_follow_topics_deleted_created_again_and_grown(
    broker: BrokerProcess,
) -> None:
    """A broker keeps each topic's part of its Metadata answers while the topic is unchanged:
    a topic deleted, created again under its name and grown is answered anew each time, by
    name and among all topics, on every version family."""
    bs, t = broker.bootstrap, name()
    ask = {"allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
           "include_topic_authorized_operations": False}

    def seen(version: int, by_name: bool) -> tuple[int, uuid.UUID | None] | None:
        topics = [{"name": t, "topic_id": uuid.UUID(int=0)}] if by_name else None
        m = call(bs, 3, version, {**ask, "topics": topics})
        mine = [x for x in m.topics if x.name == t and x.error_code == ErrorCode.none]
        if not mine:
            return None
        return len(mine[0].partitions), getattr(mine[0], "topic_id", None)

    def all_answers() -> set[tuple[int, uuid.UUID | None] | None]:
        # By name from v4 on: before it a request naming a topic asks for its creation (Kafka
        # reads the absent allow_auto_topic_creation as true), which would bring a deleted
        # topic back as soon as its deletion completes.
        return {seen(v, False) for v in (1, 9, 12)} | {seen(v, True) for v in (4, 9, 12)}

    def settles(want: int) -> bool:
        return wait_until(lambda: {a and a[0] for a in all_answers()} == {want}, timeout_s=20)

    first = create(bs, t, partitions=2)
    assert first.error_code == ErrorCode.none and settles(2)
    assert call(bs, 20, 6, {"topics": [{"name": t, "topic_id": None}], "timeout": 10_000}
                ).responses[0].error_code == ErrorCode.none
    assert wait_until(lambda: all_answers() == {None}, timeout_s=20)
    again = create(bs, t, partitions=1)
    assert again.error_code == ErrorCode.none and settles(1)
    assert seen(12, True) == (1, again.topic_id) != (2, first.topic_id)
    assert call(bs, 37, 3, {"topics": [{"name": t, "count": 3, "assignments": None}],
                            "timeout": 10_000, "validate_only": False}
                ).results[0].error_code == ErrorCode.none
    assert settles(3)


def test_fetch_by_topic_id_long_poll_and_leader_epoch(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    t = name()
    created = create(bs, t)
    tid = created.topic_id
    produce(bs, t, build_batch([(b"k", b"v")]))
    r = call(bs, 1, 15, fetch_body(None, 0, topic_id=tid))
    part = r.responses[0].partitions[0]
    assert r.responses[0].topic_id == tid
    assert part.error_code == ErrorCode.none and part.high_watermark == 1 and part.records
    # unknown topic id
    r = call(bs, 1, 15, fetch_body(None, 0, topic_id=uuid.uuid4()))
    assert r.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
    # a leader epoch from the future is unknown to this broker
    r = call(bs, 1, 12, fetch_body(t, 0, leader_epoch=7))
    assert r.responses[0].partitions[0].error_code == ErrorCode.unknown_leader_epoch
    # offset out of range
    r = call(bs, 1, 12, fetch_body(t, 99))
    assert r.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
    # long poll: parked in the purgatory, completed by a produce from another connection
    s = connect(bs)
    s.sendall(encode_request(1, 12, fetch_body(t, 1, max_wait=5000, min_bytes=1)))
    time.sleep(0.3)
    started = time.monotonic()
    threading.Timer(0.2, lambda: produce(bs, t, build_batch([(None, b"late")]))).start()
    r = read_response(s, 1, 12)
    waited = time.monotonic() - started
    assert r.responses[0].partitions[0].records and waited < 3
    # and without new data it answers when max_wait expires
    started = time.monotonic()
    s.sendall(encode_request(1, 12, fetch_body(t, 2, max_wait=600, min_bytes=1)))
    r = read_response(s, 1, 12)
    assert 0.5 < time.monotonic() - started < 3
    assert not r.responses[0].partitions[0].records
    # an unknown session id (an incremental fetch; epoch -1 would be a full one, KIP-227)
    body = fetch_body(t, 0)
    body["session_id"] = 1234
    body["session_epoch"] = 1
    s.sendall(encode_request(1, 12, body))
    assert read_response(s, 1, 12).error_code == ErrorCode.fetch_session_id_not_found
    s.close()


def test_list_offsets(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    t = name()
    create(bs, t)
    now = int(time.time() * 1000)
    for i in range(5):
        produce(bs, t, build_batch([(None, b"a"), (None, b"b")], timestamp_ms=now + i * 1000))

    def lo(ts: int) -> tuple[int, int, int]:
        r = call(bs, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": t, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                        "timestamp": ts}]}]})
        p = r.topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp

    assert lo(-2)[:2] == (0, 0)
    assert lo(-1)[:2] == (0, 10)
    assert lo(now + 2500) == (0, 6, now + 3000)
    assert lo(now + 99_000)[1] == -1
    assert lo(-3)[1] in (8, 9)  # the batch with the largest timestamp
    r = call(bs, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": name(), "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                         "timestamp": -1}]}]})
    assert r.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_delete_records(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    t = name()
    create(bs, t)
    compacted = name()
    create(bs, compacted, configs={"cleanup.policy": "compact"})
    for _ in range(5):
        produce(bs, t, build_batch([(None, b"a"), (None, b"b")]))

    def delete(topic: str, offset: int) -> tuple[int, int]:
        r = call(bs, 21, 2, {"timeout": 5000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}]})
        p = r.topics[0].partitions[0]
        return p.error_code, p.low_watermark

    assert delete(t, 4) == (0, 4)
    assert delete(t, 2) == (0, 4)  # never moves back
    assert delete(t, 11) == (ErrorCode.offset_out_of_range, -1)
    assert delete(compacted, 0)[0] == ErrorCode.policy_violation
    assert delete(name(), 0)[0] == ErrorCode.unknown_topic_or_partition
    # Reads below the new start are out of range; ListOffsets earliest moved; data above kept.
    r = call(bs, 1, 12, fetch_body(t, 0))
    assert r.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
    r = call(bs, 1, 12, fetch_body(t, 4))
    assert r.responses[0].partitions[0].error_code == ErrorCode.none
    assert r.responses[0].partitions[0].log_start_offset == 4
    assert delete(t, -1) == (0, 10)  # -1: up to the high watermark


def test_create_topics_errors(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    t = name()
    assert create(bs, t, validate_only=True).error_code == ErrorCode.none
    assert call(bs, 3, 4, {"topics": [{"name": t}], "allow_auto_topic_creation": False}
                ).topics[0].error_code == ErrorCode.unknown_topic_or_partition
    ok = create(bs, t, partitions=3, configs={"retention.ms": "1000000"})
    assert (ok.error_code, ok.num_partitions, ok.replication_factor) == (ErrorCode.none, 3, 1)
    assert {c.name: c.value for c in ok.configs}["retention.ms"] == "1000000"
    assert create(bs, t).error_code == ErrorCode.topic_already_exists
    assert create(bs, name(), partitions=0).error_code == ErrorCode.invalid_partitions
    assert create(bs, name(), rf=2).error_code == ErrorCode.invalid_replication_factor
    assert create(bs, "bad/name").error_code == ErrorCode.invalid_topic_exception
    assert create(bs, name(), configs={"retention.ms": "soon"}).error_code == \
        ErrorCode.invalid_config
    assert create(bs, name(), configs={"no.such.config": "1"}).error_code == \
        ErrorCode.invalid_config
    # log compaction is supported: compact (and compact,delete) are accepted
    assert create(bs, name(), configs={"cleanup.policy": "compact"}).error_code == \
        ErrorCode.none
    dup = name()
    r = call(bs, 19, 7, {"topics": [{"name": dup, "num_partitions": 1, "replication_factor": 1},
                                    {"name": dup, "num_partitions": 1, "replication_factor": 1}],
                         "timeout": 5000, "validate_only": False})
    assert [x.error_code for x in r.topics] == [ErrorCode.invalid_request] * 2


def test_create_partitions_and_delete(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    t = name()
    create(bs, t)
    r = call(bs, 37, 3, {"topics": [{"name": t, "count": 3, "assignments": None}],
                         "timeout": 10_000, "validate_only": False})
    assert r.results[0].error_code == ErrorCode.none
    m = call(bs, 3, 1, {"topics": [{"name": t}]})
    assert sorted(p.partition_index for p in m.topics[0].partitions) == [0, 1, 2]
    assert produce(bs, t, build_batch([(None, b"x")]), partition=2).error_code == 0
    r = call(bs, 37, 3, {"topics": [{"name": t, "count": 2, "assignments": None}],
                         "timeout": 10_000, "validate_only": False})
    assert r.results[0].error_code == ErrorCode.invalid_partitions
    r = call(bs, 37, 3, {"topics": [{"name": name(), "count": 2, "assignments": None}],
                         "timeout": 10_000, "validate_only": False})
    assert r.results[0].error_code == ErrorCode.unknown_topic_or_partition
    r = call(bs, 20, 6, {"topics": [{"name": t, "topic_id": uuid.UUID(int=0)}],
                         "timeout": 10_000})
    assert r.responses[0].error_code == ErrorCode.none
    assert call(bs, 3, 4, {"topics": [{"name": t}], "allow_auto_topic_creation": False}
                ).topics[0].error_code == ErrorCode.unknown_topic_or_partition
    # the replica is stopped and its directory deleted right after the metadata update
    assert wait_until(lambda: not list(broker.data_dir.glob(f"{t}-[0-9]")), timeout_s=10)
    r = call(bs, 20, 4, {"topic_names": [t], "timeout": 10_000})
    assert r.responses[0].error_code == ErrorCode.unknown_topic_or_partition


def test_configs(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    t = name()
    create(bs, t, configs={"retention.ms": "123456"})

    def describe(keys: list[str] | None = None) -> dict[str, tuple[str, int]]:
        r = call(bs, 32, 4, {"resources": [{"resource_type": 2, "resource_name": t,
                                            "configuration_keys": keys}],
                             "include_synonyms": True, "include_documentation": True})
        res = r.results[0]
        assert res.error_code == ErrorCode.none
        return {c.name: (c.value, c.config_source) for c in res.configs}

    cfg = describe()
    assert cfg["retention.ms"] == ("123456", 1)  # DYNAMIC_TOPIC_CONFIG
    assert cfg["segment.bytes"] == ("1073741824", 5)  # DEFAULT_CONFIG
    assert len(cfg) >= 16
    assert set(describe(["flush.messages"])) == {"flush.messages"}
    # IncrementalAlterConfigs: set, delete, append to a list
    r = call(bs, 44, 1, {"resources": [{"resource_type": 2, "resource_name": t, "configs": [
        {"name": "segment.bytes", "config_operation": 0, "value": "100000"},
        {"name": "retention.ms", "config_operation": 1, "value": None}]}],
        "validate_only": False})
    assert r.responses[0].error_code == ErrorCode.none
    deadline = time.monotonic() + 5
    while describe()["segment.bytes"][0] != "100000" and time.monotonic() < deadline:
        time.sleep(0.05)
    cfg = describe()
    assert cfg["segment.bytes"] == ("100000", 1) and cfg["retention.ms"][1] == 5
    r = call(bs, 44, 1, {"resources": [{"resource_type": 2, "resource_name": t, "configs": [
        {"name": "segment.bytes", "config_operation": 2, "value": "1"}]}],
        "validate_only": False})
    assert r.responses[0].error_code == ErrorCode.invalid_config
    # AlterConfigs replaces all overrides; a bad value is INVALID_CONFIG and changes nothing
    r = call(bs, 33, 2, {"resources": [{"resource_type": 2, "resource_name": t, "configs": [
        {"name": "max.message.bytes", "value": "x"}]}], "validate_only": False})
    assert r.responses[0].error_code == ErrorCode.invalid_config
    r = call(bs, 33, 2, {"resources": [{"resource_type": 2, "resource_name": t, "configs": [
        {"name": "max.message.bytes", "value": "2000"}]}], "validate_only": False})
    assert r.responses[0].error_code == ErrorCode.none
    deadline = time.monotonic() + 5
    while describe()["max.message.bytes"][0] != "2000" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert describe()["segment.bytes"][1] == 5
    # the new max.message.bytes is enforced
    assert produce(bs, t, build_batch([(None, b"x" * 3000)])).error_code == \
        ErrorCode.message_too_large
    # broker configs are described and static
    r = call(bs, 32, 4, {"resources": [{"resource_type": 4, "resource_name": "0",
                                        "configuration_keys": None}],
                         "include_synonyms": False, "include_documentation": False})
    bcfg = {c.name: c.value for c in r.results[0].configs}
    assert bcfg["broker.id"] == "0" and "log.segment.bytes" in bcfg
    r = call(bs, 33, 2, {"resources": [{"resource_type": 4, "resource_name": "0", "configs": [
        {"name": "num.partitions", "value": "5"}]}], "validate_only": False})
    assert r.responses[0].error_code == ErrorCode.invalid_request
    r = call(bs, 32, 4, {"resources": [{"resource_type": 2, "resource_name": name(),
                                        "configuration_keys": None}],
                         "include_synonyms": False, "include_documentation": False})
    assert r.results[0].error_code == ErrorCode.unknown_topic_or_partition


def test_describe_cluster(broker: BrokerProcess) -> None:
    r = call(broker.bootstrap, 60, 1, {"include_cluster_authorized_operations": False,
                                       "endpoint_type": 1})
    assert r.error_code == ErrorCode.none
    assert [(b.broker_id, b.port) for b in r.brokers] == [(0, broker.port)]
    assert r.controller_id == 0 and r.cluster_id


def test_acks_zero(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    t = name()
    create(bs, t)
    s = connect(bs)
    s.sendall(encode_request(0, 9, {"acks": 0, "timeout": 1000, "topic_data": [
        {"name": t, "partition_data": [{"index": 0, "records": build_batch([(None, b"z")])}]}]}))
    # no response; the next request's answer is the next thing on the wire
    s.sendall(encode_request(18, 3, {"client_software_name": "t",
                                      "client_software_version": "1"}, correlation_id=2))
    (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
    assert struct.unpack(">i", s.recv(size, socket.MSG_WAITALL)[:4])[0] == 2
    # a failing acks=0 produce closes the connection so the client notices
    s.sendall(encode_request(0, 9, {"acks": 0, "timeout": 1000, "topic_data": [
        {"name": name(), "partition_data": [{"index": 0, "records": build_batch([(None, b"z")])}]}
    ]}))
    assert is_closed(s)
    s.close()


@pytest.mark.parametrize("deletion", [False])
def test_topic_deletion_disabled(fresh_broker: BrokerProcess, deletion: bool) -> None:
    fresh_broker.overrides = [f"delete.topic.enable={str(deletion).lower()}"]
    b = fresh_broker.start()
    t = name()
    create(b.bootstrap, t)
    r = call(b.bootstrap, 20, 6, {"topics": [{"name": t, "topic_id": uuid.UUID(int=0)}],
                                  "timeout": 5000})
    assert r.responses[0].error_code == ErrorCode.topic_deletion_disabled


def test_requests_the_fuzzer_found_get_answers(broker: BrokerProcess) -> None:
    """Three requests that made handlers fail (the connection closed with a traceback) get
    answers with error codes, and the connection stays open."""
    bs = broker.bootstrap
    with connect(bs) as sock:
        # DeleteTopics v6 naming a topic by neither name nor id.
        r = call(sock, 20, 6, {"topics": [{"name": None, "topic_id": uuid.UUID(int=0)}],
                               "timeout_ms": 5_000})
        assert [t.error_code for t in r.responses] == [ErrorCode.invalid_request]
        # DescribeConfigs of the group "".
        r = call(sock, 32, 4, {"resources": [{"resource_type": 32, "resource_name": "",
                                              "configuration_keys": None}],
                               "include_synonyms": False, "include_documentation": False})
        assert [x.error_code for x in r.results] == [ErrorCode.invalid_request]
        # Metadata v10 asking for a topic by an unknown id: the name in the answer is not
        # nullable before v12.
        tid = uuid.uuid4()
        r = call(sock, 3, 10, {"topics": [{"topic_id": tid, "name": None}],
                               "allow_auto_topic_creation": False,
                               "include_cluster_authorized_operations": False,
                               "include_topic_authorized_operations": False})
        assert [(t.name, t.error_code) for t in r.topics] == [("", ErrorCode.unknown_topic_id)]
        assert not is_closed(sock, 0.2)
