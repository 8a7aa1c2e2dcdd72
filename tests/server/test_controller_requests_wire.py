"""LeaderAndIsr, StopReplica and UpdateMetadata sent to a real broker process over the wire.

Every rejected request is followed by Metadata, Produce and Fetch to show the broker's state is
intact; the test that moves the controller epoch forward uses a broker of its own, since its
own controller is fenced afterwards.
"""

from __future__ import annotations

import re
import socket
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess, wait_until
from tests.kafka_wire import call, connect, fetch_body, is_closed, produce_body, recv_exact
from wherry.protocol.interbroker import (
    LEADER_DURING_DELETE,
    BrokerEndpoint,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wherry.protocol.interbroker_codec import (
    INTERBROKER_VERSIONS,
    InterbrokerRequestBody,
    InterbrokerResponseBody,
    decode_interbroker_response,
    encode_interbroker_request,
)
from wherry.protocol.records import build_batch

LAI, STOP, UM = 4, 5, 6


# --- helpers --------------------------------------------------------------------------------
def _key(body: InterbrokerRequestBody) -> int:
    if isinstance(body, LeaderAndIsrRequest):
        return LAI
    return STOP if isinstance(body, StopReplicaRequest) else UM


def send(
    target: str | socket.socket, body: InterbrokerRequestBody, version: int | None = None
) -> InterbrokerResponseBody:
    key = _key(body)
    v = INTERBROKER_VERSIONS[key][1] if version is None else version
    sock = connect(target) if isinstance(target, str) else target
    try:
        sock.sendall(encode_interbroker_request(key, v, 42, "controller-test", body))
        (size,) = struct.unpack(">i", recv_exact(sock, 4))
        corr, resp = decode_interbroker_response(key, v, recv_exact(sock, size))
        assert corr == 42
        return resp
    finally:
        if isinstance(target, str):
            sock.close()


def epochs(b: BrokerProcess) -> tuple[int, int]:
    """(controller epoch, broker epoch) as the broker logged them at startup."""
    text = b.log_text()
    ce = re.findall(r"elected as controller with epoch (\d+)", text)
    be = re.findall(r"registered at \S+ with broker epoch (\d+)", text)
    assert ce and be, text[-3000:]
    return int(ce[-1]), int(be[-1])


def name() -> str:
    return f"ctl-{uuid.uuid4().hex[:10]}"


def create(bs: str, topic: str) -> uuid.UUID:
    r = call(bs, 19, 7, {"topics": [{"name": topic, "num_partitions": 1,
                                     "replication_factor": 1, "configs": []}],
                         "timeout": 10_000, "validate_only": False}).topics[0]
    assert r.error_code == ErrorCode.none
    tid: uuid.UUID = r.topic_id
    return tid


def metadata(bs: str, topic: str) -> Any:
    m = call(bs, 3, 12, {"topics": [{"name": topic, "topic_id": None}],
                         "allow_auto_topic_creation": False,
                         "include_topic_authorized_operations": False})
    return m


def partition_meta(bs: str, topic: str) -> Any:
    (tm,) = metadata(bs, topic).topics
    assert tm.error_code == ErrorCode.none, tm
    (p,) = tm.partitions
    return p


def produce(bs: str, topic: str, value: bytes) -> Any:
    body = produce_body(topic, build_batch([(None, value)]))
    return call(bs, 0, 9, body).responses[0].partition_responses[0]


def fetch(bs: str, topic: str, leader_epoch: int = -1) -> Any:
    return call(bs, 1, 12, fetch_body(topic, leader_epoch=leader_epoch)).responses[0].partitions[0]


def new_topic(bs: str, first_record: bytes | None = None) -> tuple[str, uuid.UUID, int]:
    """A new one-partition topic (holding `first_record` if given): its name, topic id and
    leader epoch."""
    t = name()
    tid = create(bs, t)
    if first_record is not None:
        assert produce(bs, t, first_record).error_code == ErrorCode.none
    return t, tid, partition_meta(bs, t).leader_epoch


def assert_intact(b: BrokerProcess, topic: str, leader_epoch: int, records_before: int) -> None:
    """The topic is still listed, led by broker 0 at the same leader epoch, and takes and
    serves records."""
    p = partition_meta(b.bootstrap, topic)
    assert (p.leader_id, p.leader_epoch, list(p.replica_nodes)) == (0, leader_epoch, [0])
    r = produce(b.bootstrap, topic, b"after")
    assert r.error_code == ErrorCode.none and r.base_offset == records_before
    f = fetch(b.bootstrap, topic, leader_epoch)
    assert f.error_code == ErrorCode.none and f.high_watermark == records_before + 1
    assert (b.data_dir / f"{topic}-0").is_dir()


def self_endpoint(b: BrokerProcess) -> BrokerEndpoint:
    return BrokerEndpoint(0, "127.0.0.1", b.port)


def lai(ce: int, be: int, topic: str, tid: uuid.UUID | None, *, leader: int, leader_epoch: int,
        replicas: tuple[int, ...], b: BrokerProcess) -> LeaderAndIsrRequest:
    st = LeaderAndIsrPartitionState(topic, 0, ce, leader, leader_epoch, (leader,), leader_epoch,
                                    replicas)
    return LeaderAndIsrRequest(0, ce, be, (st,), {topic: tid} if tid else {},
                               (self_endpoint(b),))


def um(ce: int, be: int, topic: str, tid: uuid.UUID | None, *, leader: int, leader_epoch: int,
       b: BrokerProcess) -> UpdateMetadataRequest:
    st = UpdateMetadataPartitionState(topic, 0, ce, leader, leader_epoch, (0,), leader_epoch,
                                      (0,))
    return UpdateMetadataRequest(0, ce, be, (st,), (self_endpoint(b),),
                                 {topic: tid} if tid else {})


def stop(ce: int, be: int, topic: str, *, leader_epoch: int, delete: bool) -> StopReplicaRequest:
    return StopReplicaRequest(0, ce, be, (StopReplicaPartition(topic, 0, leader_epoch, delete),))


def lai_codes(resp: InterbrokerResponseBody) -> tuple[int, list[int]]:
    assert isinstance(resp, LeaderAndIsrResponse)
    return resp.error_code, [e.error_code for e in resp.partition_errors]


# --- tests ----------------------------------------------------------------------------------
def test_controller_apis_are_advertised(broker: BrokerProcess) -> None:
    resp = call(broker.bootstrap, 18, 3, {"client_software_name": "t",
                                          "client_software_version": "1"})
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert {k: got[k] for k in (LAI, STOP, UM)} == {LAI: (0, 7), STOP: (0, 4), UM: (0, 8)}


def test_stale_controller_epoch_is_refused_and_changes_nothing(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    ce, be = epochs(broker)
    assert ce >= 1
    t, tid, e0 = new_topic(bs, b"before")
    old = ce - 1
    sock = connect(bs)  # one connection, as a controller would use
    for v in range(INTERBROKER_VERSIONS[LAI][1] + 1):
        # would make broker 0 a follower of broker 9 at a newer leader epoch
        resp = send(sock, lai(old, be, t, tid, leader=9, leader_epoch=e0 + 5, replicas=(0, 9),
                              b=broker), v)
        assert lai_codes(resp) == (ErrorCode.stale_controller_epoch,
                                   [ErrorCode.stale_controller_epoch]), v
        if v >= 5:  # responses v5+ name the topic by id
            assert isinstance(resp, LeaderAndIsrResponse)
            assert resp.partition_errors[0].topic_id == tid
    for v in range(INTERBROKER_VERSIONS[UM][1] + 1):
        # would delete the topic from the metadata cache
        resp = send(sock, um(old, be, t, tid, leader=LEADER_DURING_DELETE, leader_epoch=e0,
                             b=broker), v)
        assert resp == UpdateMetadataResponse(ErrorCode.stale_controller_epoch), v
    for v in range(INTERBROKER_VERSIONS[STOP][1] + 1):
        resp = send(sock, stop(old, be, t, leader_epoch=-2, delete=True), v)
        assert resp == StopReplicaResponse(ErrorCode.stale_controller_epoch), v
    sock.close()
    assert_intact(broker, t, e0, 1)


def test_stale_broker_epoch_is_refused_and_records_nothing(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    ce, be = epochs(broker)
    t, tid, e0 = new_topic(bs)
    newer_ce = ce + 100  # must not be recorded: the requests are for an earlier incarnation
    resp = send(bs, lai(newer_ce, be - 1, t, tid, leader=9, leader_epoch=e0 + 5,
                        replicas=(0, 9), b=broker))
    assert lai_codes(resp) == (ErrorCode.stale_broker_epoch, [ErrorCode.stale_broker_epoch])
    resp = send(bs, um(newer_ce, be - 1, t, tid, leader=LEADER_DURING_DELETE, leader_epoch=e0,
                       b=broker))
    assert resp == UpdateMetadataResponse(ErrorCode.stale_broker_epoch)
    resp = send(bs, stop(newer_ce, be - 1, t, leader_epoch=-2, delete=True))
    assert resp == StopReplicaResponse(ErrorCode.stale_broker_epoch)
    assert_intact(broker, t, e0, 0)
    # The broker's own controller (epoch `ce`) is still obeyed: a new topic comes up.
    t2 = name()
    create(bs, t2)
    assert produce(bs, t2, b"x").error_code == ErrorCode.none
    # A newer broker epoch is accepted (the controller may learn of it first), and the
    # broker epoch -1 (unknown) skips the check: with a stale leader epoch, both get to the
    # per-partition check.
    for broker_epoch in (be + 1, -1):
        resp = send(bs, lai(ce, broker_epoch, t, tid, leader=0, leader_epoch=e0, replicas=(0,),
                            b=broker))
        assert lai_codes(resp) == (ErrorCode.none, [ErrorCode.stale_controller_epoch])


def test_partition_rules_and_unknown_topics(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    ce, be = epochs(broker)
    t, tid, e0 = new_topic(bs, b"before")
    # LeaderAndIsr, per partition (top-level NONE):
    unknown = name()
    resp = send(bs, LeaderAndIsrRequest(0, ce, be, (
        # same leader epoch as the broker has: stale
        LeaderAndIsrPartitionState(t, 0, ce, 9, e0, (9,), e0, (0, 9)),
        # an unknown topic whose replicas do not include this broker: ignored
        LeaderAndIsrPartitionState(unknown, 0, ce, 5, 0, (5, 6), 0, (5, 6)),
    ), {t: tid, unknown: uuid.uuid4()}, (self_endpoint(broker),)))
    assert lai_codes(resp) == (ErrorCode.none, [ErrorCode.stale_controller_epoch,
                                                ErrorCode.unknown_topic_or_partition])
    # another topic id for the topic: inconsistent
    resp = send(bs, lai(ce, be, t, uuid.uuid4(), leader=0, leader_epoch=e0 + 1, replicas=(0,),
                        b=broker))
    assert lai_codes(resp) == (ErrorCode.none, [ErrorCode.inconsistent_topic_id])
    # StopReplica for a partition this broker does not host: NONE (Kafka), nothing to do
    resp = send(bs, StopReplicaRequest(0, ce, be, (StopReplicaPartition(unknown, 0, -2, True),
                                                   StopReplicaPartition(unknown, 1, 3, False))))
    assert isinstance(resp, StopReplicaResponse) and resp.error_code == ErrorCode.none
    assert {(e.topic_name, e.partition_index, e.error_code) for e in resp.partition_errors} == {
        (unknown, 0, ErrorCode.none), (unknown, 1, ErrorCode.none)}
    # UpdateMetadata deleting an unknown topic: accepted, nothing to remove
    resp = send(bs, um(ce, be, unknown, None, leader=LEADER_DURING_DELETE, leader_epoch=0,
                       b=broker))
    assert resp == UpdateMetadataResponse(ErrorCode.none)
    (tm,) = metadata(bs, unknown).topics
    assert tm.error_code == ErrorCode.unknown_topic_or_partition
    assert not (broker.data_dir / f"{unknown}-0").exists()
    assert [(b.node_id, b.port) for b in metadata(bs, t).brokers] == [(0, broker.port)]
    assert_intact(broker, t, e0, 1)


def test_newer_controller_epoch_is_accepted(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker.start()
    bs = b.bootstrap
    ce, be = epochs(b)
    t, tid, e0 = new_topic(bs, b"one")
    new_ce, e1 = ce + 1, e0 + 1
    # A newer controller moves the leader epoch on (this broker stays the leader).
    resp = send(bs, lai(new_ce, be, t, tid, leader=0, leader_epoch=e1, replicas=(0,), b=b))
    assert lai_codes(resp) == (ErrorCode.none, [ErrorCode.none])
    assert fetch(bs, t, e0).error_code == ErrorCode.fenced_leader_epoch
    assert fetch(bs, t, e1).error_code == ErrorCode.none
    # The epoch is recorded per broker: its own controller's UpdateMetadata is stale now.
    resp = send(bs, um(ce, be, t, tid, leader=0, leader_epoch=e1, b=b))
    assert resp == UpdateMetadataResponse(ErrorCode.stale_controller_epoch)
    assert partition_meta(bs, t).leader_epoch == e0
    resp = send(bs, um(new_ce, be, t, tid, leader=0, leader_epoch=e1, b=b))
    assert resp == UpdateMetadataResponse(ErrorCode.none)
    assert partition_meta(bs, t).leader_epoch == e1
    assert_intact(b, t, e1, 1)
    # StopReplica with a leader epoch older than the partition's is fenced...
    resp = send(bs, stop(new_ce, be, t, leader_epoch=e0, delete=True))
    assert isinstance(resp, StopReplicaResponse) and resp.error_code == ErrorCode.none
    assert [e.error_code for e in resp.partition_errors] == [ErrorCode.fenced_leader_epoch]
    assert_intact(b, t, e1, 2)
    # ... and the deletion sentinel goes through: the replica and its log are gone.
    resp = send(bs, stop(new_ce, be, t, leader_epoch=-2, delete=True))
    assert isinstance(resp, StopReplicaResponse)
    assert (resp.error_code, [e.error_code for e in resp.partition_errors]) == (0, [0])
    assert wait_until(lambda: not (Path(b.data_dir) / f"{t}-0").exists(), 10)
    assert produce(bs, t, b"gone").error_code != ErrorCode.none


@pytest.mark.parametrize("api", [LAI, STOP, UM])
def test_garbage_controller_request_closes_only_that_connection(
    broker: BrokerProcess, api: int
) -> None:
    bs = broker.bootstrap
    bad = connect(bs)
    body = struct.pack(">hhi", api, 1, 7) + b"\x00\x04test" + b"\xff" * 3
    bad.sendall(struct.pack(">i", len(body)) + body)
    assert is_closed(bad)
    bad.close()
    resp = call(bs, 18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert resp.error_code == ErrorCode.none
