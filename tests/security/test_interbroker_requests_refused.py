"""The controller's requests from anyone but a broker are refused, and change nothing.

Three real `wherry server --zookeeper` processes, each with a SASL_PLAINTEXT listener (the
inter-broker one: brokers authenticate as the super user `admin`) and a PLAINTEXT one (clients
there are `User:ANONYMOUS`), the ACL authorizer on. A topic with replication factor 3 holds
data. An attacker on the PLAINTEXT listener, then `alice` over SASL (authenticated, but without
ClusterAction), sends LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown and
AlterPartition with the *current* controller and broker epochs — each would take effect if it
were accepted. Every answer is CLUSTER_AUTHORIZATION_FAILED; afterwards each broker's metadata,
every replica's log (end offset, high watermark, bytes), the partition's state in ZooKeeper and
its directories on disk are as before, and the brokers go on replicating what `admin`
produces.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode

from tests.helpers import running_zookeeper
from tests.security.wire_principals import (
    ANONYMOUS,
    PASSWORDS,
    SECURED_OVERRIDES,
    Login,
    WirePrincipals,
)
from wherry.coordination.paths import PartitionState, partition_state_path
from wherry.protocol.interbroker import (
    ControlledShutdownRequest,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from wherry.protocol.records import iter_batches
from wherry.testing.cluster import ZkCluster, wait_until

TOPIC = "guarded"
ADMIN, ALICE = Login.of("admin"), Login.of("alice")
DENIED = int(ErrorCode.cluster_authorization_failed)
SASL, PLAIN = "SASL_PLAINTEXT", "PLAINTEXT"


@dataclass
class Secured:
    cluster: ZkCluster
    wire: WirePrincipals
    topic_id: uuid.UUID

    def sasl(self, b: int) -> str:
        return self.cluster.address(b, SASL)

    def admin_call(self, b: int, api_key: int, version: int, body: Any) -> Any:
        return self.wire.call(self.sasl(b), ADMIN, api_key, version, body)

    def client_conf(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.cluster.bootstrap_of(SASL),
                "security.protocol": SASL, "sasl.mechanism": "PLAIN",
                "sasl.username": "admin", "sasl.password": PASSWORDS["admin"],
                "log_level": 0}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    overrides = {
        **SECURED_OVERRIDES,
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": SASL,
        "auto.leader.rebalance.enable": "false",
        "unclean.leader.election.enable": "false",
    }
    with running_zookeeper() as zk:
        cluster = ZkCluster(tmp_path_factory.mktemp("ib-refused"), brokers=3, zookeeper=zk,
                            chroot=f"/wherry-{uuid.uuid4().hex[:8]}", overrides=overrides,
                            listeners=(SASL, PLAIN), session_timeout_ms=6_000)
        wire = WirePrincipals()
        try:
            cluster.start()
            assert wait_until(lambda: cluster.controller() is not None, 20)
            resp = wire.call(cluster.address(0, SASL), ADMIN, 19, 7, {"topics": [{
                "name": TOPIC, "num_partitions": 1, "replication_factor": 3,
                "assignments": [], "configs": [{"name": "min.insync.replicas", "value": "2"}]}],
                "timeout": 10_000, "validate_only": False})
            [t] = resp.topics
            assert t.error_code == ErrorCode.none, t
            s = Secured(cluster, wire, t.topic_id)
            # CreateTopics answers once the controller wrote the topic; each broker learns it
            # from the UpdateMetadata that follows, and until then does not know it.
            assert wait_until(lambda: all(_knows_topic(s, b) and _meta(s, b)[0][3] == (0, 1, 2)
                                          for b in range(3)), 40)
            _produce(s, 0, 30)
            _wait_replicated(s, 30)
            yield s
        finally:
            wire.close()
            cluster.stop()


# --- what the brokers and ZooKeeper hold ----------------------------------------------------
def _knows_topic(s: Secured, b: int) -> bool:
    m = s.admin_call(b, 3, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    return bool(m.topics[0].error_code == ErrorCode.none and m.topics[0].partitions)


def _meta(s: Secured, b: int) -> tuple[tuple[Any, ...], ...]:
    """Broker b's metadata as admin: the partition (leader, epoch, replicas, ISR), the live
    brokers and the controller."""
    m = s.admin_call(b, 3, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    [t] = m.topics
    assert t.error_code == ErrorCode.none, t
    [p] = t.partitions
    brokers = tuple(sorted((x.node_id, x.port) for x in m.brokers))
    return ((p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(sorted(p.isr_nodes)),
             tuple(p.offline_replicas)), brokers, (m.controller_id,))


def _replica_log(s: Secured, b: int) -> tuple[int, int, int, bytes]:
    """Broker b's replica as Kafka's debugging consumer (replica id -2) reads it, up to its
    log end: (log start, high watermark, log end offset, the record bytes)."""
    body = {"replica_id": -2, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 22,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": [{
                "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 22,
                "current_leader_epoch": -1, "log_start_offset": -1,
                "last_fetched_epoch": -1}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    [p] = s.admin_call(b, 1, 12, body).responses[0].partitions
    assert p.error_code == ErrorCode.none, p
    records = bytes(p.records or b"")
    end = max((h.next_offset for _, h in iter_batches(records)), default=0)
    return p.log_start_offset, p.high_watermark, end, records


def _zk_state(s: Secured) -> tuple[Any, ...]:
    zk = s.cluster.zk()
    data, stat = zk.get(partition_state_path(TOPIC, 0))
    st = PartitionState.from_json(data)
    return (st.leader, st.leader_epoch, tuple(sorted(st.isr)), st.controller_epoch,
            stat.version, s.cluster.controller(), s.cluster.controller_epoch(),
            tuple(sorted(s.cluster.registered_brokers())))


def _dirs(s: Secured) -> tuple[bool, ...]:
    return tuple((s.cluster.directory / f"broker-{b}" / f"{TOPIC}-0").is_dir() for b in range(3))


def _snapshot(s: Secured) -> dict[str, Any]:
    return {
        "metadata": {b: _meta(s, b) for b in range(3)},
        "logs": {b: _replica_log(s, b) for b in range(3)},
        "zookeeper": _zk_state(s),
        "dirs": _dirs(s),
        "running": tuple(s.cluster.is_running(b) for b in range(3)),
    }


def _produce(s: Secured, start: int, n: int) -> None:
    producer = Producer({**s.client_conf(), "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    for i in range(start, start + n):
        producer.produce(TOPIC, f"v{i}".encode(),
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(30) == 0
    assert not errors, errors


def _wait_replicated(s: Secured, n: int) -> None:
    """Every replica holds n records and knows they are committed (HW = LEO = n)."""
    def done() -> bool:
        return all(_replica_log(s, b)[1:3] == (n, n) for b in range(3))

    assert wait_until(done, 30), {b: _replica_log(s, b)[:3] for b in range(3)}


# --- the attack -----------------------------------------------------------------------------
def _damaging(s: Secured, b: int) -> list[tuple[str, int, int, Any]]:
    """Requests to broker b with the current epochs that would each change something."""
    c = s.cluster
    controller = c.controller()
    assert controller is not None
    ce = c.controller_epoch()
    be = c.broker_epoch(b)
    assert be is not None
    data, stat = c.zk().get(partition_state_path(TOPIC, 0))
    st = PartitionState.from_json(data)
    # b makes itself the only in-sync leader, one epoch on.
    take_over = LeaderAndIsrPartitionState(TOPIC, 0, ce, b, st.leader_epoch + 1, (b,),
                                           stat.version + 1, (0, 1, 2))
    leader_be = c.broker_epoch(st.leader)
    assert leader_be is not None
    return [
        ("LeaderAndIsr", 4, 7, LeaderAndIsrRequest(
            controller, ce, be, (take_over,), {TOPIC: s.topic_id}, ())),
        ("StopReplica", 5, 4, StopReplicaRequest(
            controller, ce, be, (StopReplicaPartition(TOPIC, 0, st.leader_epoch + 1, True),))),
        ("UpdateMetadata", 6, 8, UpdateMetadataRequest(controller, ce, be, (), (),
                                                       is_full=True)),
        ("ControlledShutdown", 7, 3, ControlledShutdownRequest(broker_id=b, broker_epoch=be)),
        # To every broker, the controller among them: the leader shrinks the ISR to itself.
        ("AlterPartition", 56, 3, {
            "broker_id": st.leader, "broker_epoch": leader_be, "topics": [{
                "topic_id": s.topic_id, "partitions": [{
                    "partition_index": 0, "leader_epoch": st.leader_epoch,
                    "new_isr_with_epochs": [{"broker_id": st.leader,
                                             "broker_epoch": leader_be}],
                    "leader_recovery_state": 0, "partition_epoch": stat.version}]}]}),
    ]


def _attack(s: Secured, who: Login, listener: str) -> None:
    for b in range(3):
        address = s.cluster.address(b, listener)
        for name, key, version, body in _damaging(s, b):
            resp = s.wire.call(address, who, key, version, body)
            assert resp.error_code == DENIED, (name, b, resp)
            if key in (4, 5):  # every partition answered with the same error
                assert [e.error_code for e in resp.partition_errors] == [DENIED], (name, resp)


def _assert_unchanged(s: Secured, before: dict[str, Any]) -> None:
    time.sleep(1.0)  # what a refused request could have started has had time to show
    after = _snapshot(s)
    for part in before:
        assert after[part] == before[part], f"{part} changed"


def test_anonymous_and_alice_are_refused_and_nothing_changes(secured: Secured) -> None:
    s = secured
    before = _snapshot(s)
    assert before["dirs"] == (True, True, True)
    assert before["metadata"][0][0][3] == (0, 1, 2)  # every replica in sync
    assert before["logs"][0][2] == 30

    _attack(s, ANONYMOUS, PLAIN)
    _assert_unchanged(s, before)
    _attack(s, ALICE, SASL)
    _assert_unchanged(s, before)

    # The brokers' own requests, over SASL as admin, were never refused: what admin produces
    # now reaches every replica, and the ISR, leader and epochs stay as they were.
    _produce(s, 30, 20)
    _wait_replicated(s, 50)
    after = _snapshot(s)
    assert after["metadata"] == before["metadata"]
    assert after["zookeeper"] == before["zookeeper"]
    logs = {b: after["logs"][b][3] for b in range(3)}
    assert logs[0] == logs[1] == logs[2]
    for b in range(3):
        assert logs[b].startswith(before["logs"][b][3])

    consumer = Consumer({**s.client_conf(), "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 50 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value() or b"")
    finally:
        consumer.close()
    assert got == [f"v{i}".encode() for i in range(50)]

    # Each broker's authorizer logged the refusals, naming who asked.
    for b in range(3):
        out = Path(s.cluster.output_path(b)).read_text(errors="replace")
        for who in ("User:ANONYMOUS", "User:alice"):
            assert (f"Principal = {who} is Denied Operation = ClusterAction" in out), (b, who)


def test_the_same_requests_from_a_broker_principal_take_effect(secured: Secured) -> None:
    """The control (it runs last: it breaks the partition): sent by `admin`, the principal
    the brokers use, the AlterPartition above shrinks the ISR in ZooKeeper and the StopReplica
    deletes a follower's replica: the refused requests were not harmless ones."""
    s = secured
    leader = _zk_state(s)[0]
    follower = next(b for b in range(3) if b != leader)
    controller = s.cluster.controller()
    assert controller is not None
    by_name = {name: (key, version, body) for name, key, version, body in _damaging(s, 0)}
    key, version, body = by_name["AlterPartition"]
    resp = s.admin_call(controller, key, version, body)
    assert resp.error_code == ErrorCode.none
    assert resp.topics[0].partitions[0].error_code == ErrorCode.none, resp
    assert _zk_state(s)[2] == (leader,)

    by_name = {name: (key, version, body) for name, key, version, body in _damaging(s, follower)}
    key, version, body = by_name["StopReplica"]
    resp = s.admin_call(follower, key, version, body)
    assert resp.error_code == ErrorCode.none
    assert [e.error_code for e in resp.partition_errors] == [ErrorCode.none]
    assert wait_until(lambda: not _dirs(s)[follower], 15)
