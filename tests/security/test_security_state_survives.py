"""ACLs and SCRAM users live in ZooKeeper: they survive a broker's restart and the controller's
crash, and changes made afterwards reach every broker.

Three real `wherry server --zookeeper` processes with one SASL_PLAINTEXT listener (PLAIN for
the brokers' admin, SCRAM-SHA-512 for users made with AlterUserScramCredentials) and the ACL
authorizer. Every check is made on each broker separately (each answers logins from its own
credential cache and decisions from its own ACL cache): `carol` (SCRAM) logs in with her
current password and not with another, Describe/Write on her topic are allowed, another topic
is refused, and DescribeAcls lists exactly what was created.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from tests.authz_table import _produce
from tests.helpers import running_zookeeper
from tests.security.wire_principals import (
    PASSWORDS,
    SECURED_OVERRIDES,
    Login,
    WirePrincipals,
    acl,
    create_acls,
    describe_acls,
)
from wherry.outbound.client import RequestError
from wherry.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from wherry.testing.cluster import ZkCluster, wait_until

ADMIN = Login.of("admin")
SASL = "SASL_PLAINTEXT"
MINE, OTHER = "carol-topic", "other-topic"
T, G = ResourceType.TOPIC, ResourceType.GROUP
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def carol(password: str) -> Login:
    return Login("carol", password, "SCRAM-SHA-512")


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    with running_zookeeper() as zk:
        c = ZkCluster(tmp_path_factory.mktemp("sec-state"), brokers=3, zookeeper=zk,
                      chroot=f"/wherry-{uuid.uuid4().hex[:8]}", listeners=(SASL,),
                      overrides={**SECURED_OVERRIDES, "auto.leader.rebalance.enable": "false"},
                      session_timeout_ms=4_000)
        try:
            c.start()
            yield c
        finally:
            c.stop()


def _admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "security.protocol": SASL,
                        "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                        "sasl.password": PASSWORDS["admin"], "log_level": 0})


def _set_scram(bootstrap: str, users: dict[str, str]) -> None:
    """AlterUserScramCredentials (SCRAM-SHA-512, 8192 iterations) through confluent-kafka."""
    admin = _admin_client(bootstrap)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(u, info, pw.encode()) for u, pw in users.items()],
        request_timeout=30)
    for f in futures.values():
        f.result(40)


def _scram_users(bootstrap: str) -> dict[str, list[tuple[ScramMechanism, int]]]:
    admin = _admin_client(bootstrap)
    future = admin.describe_user_scram_credentials(request_timeout=15)  # all users: one future
    assert not isinstance(future, dict)
    got = future.result(20)
    return {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos]
            for u, d in got.items()}


def _controller_seen(wire: WirePrincipals, c: ZkCluster, b: int) -> int:
    """The controller in broker b's metadata."""
    return int(wire.call(c.address(b), ADMIN, 3, 12, {
        "topics": [], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}).controller_id)


class Probe:
    """What one broker decides for carol, asked on that broker only."""

    def __init__(self, cluster: ZkCluster, wire: WirePrincipals) -> None:
        self.cluster = cluster
        self.wire = wire

    def logs_in(self, b: int, login: Login) -> bool:
        address = self.cluster.address(b)
        try:
            self.wire.call(address, login, 18, 3, {"client_software_name": "probe",
                                                   "client_software_version": "1"})
            return True
        except RequestError:
            return False
        finally:
            self.wire.forget(address, login)

    def describe(self, b: int, login: Login, topic: str) -> int:
        m = self.wire.call(self.cluster.address(b), login, 3, 12, {
            "topics": [{"name": topic}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False})
        return int(m.topics[0].error_code)

    def write(self, b: int, login: Login, topic: str) -> int:
        """Produce's answer: authorization comes before leadership, so any answer but
        TOPIC_AUTHORIZATION_FAILED (NONE on the leader, NOT_LEADER elsewhere) is allowed."""
        r = self.wire.call(self.cluster.address(b), login, 0, 9, _produce(topic))
        return int(r.responses[0].partition_responses[0].error_code)

    def state(self, b: int, password: str, others: tuple[str, ...]) -> dict[str, Any]:
        me = carol(password)
        ok = self.logs_in(b, me)
        return {
            "login": ok,
            "other passwords": [self.logs_in(b, carol(p)) for p in others],
            "describe mine": ok and self.describe(b, me, MINE) == ErrorCode.none,
            "write mine": ok and self.write(b, me, MINE) != ErrorCode.topic_authorization_failed,
            "describe other": ok and self.describe(b, me, OTHER) == ErrorCode.none,
            "acls": describe_acls(self.wire, self.cluster.address(b)),
        }


def _expected(acls: set[Any], *, describe_mine: bool = True) -> dict[str, Any]:
    return {"login": True, "other passwords": [False], "describe mine": describe_mine,
            "write mine": True, "describe other": False, "acls": acls}


def _wait_state(probe: Probe, brokers: list[int], password: str, other: str,
                expected: dict[str, Any], timeout_s: float = 20.0) -> None:
    for b in brokers:
        last: dict[str, Any] = {}

        def holds(b: int = b, last: dict[str, Any] = last) -> bool:
            last.update(probe.state(b, password, (other,)))
            return last == expected

        assert wait_until(holds, timeout_s, 0.2), (b, last, expected)


def _roundtrip_as_carol(cluster: ZkCluster, password: str, n: int = 10) -> None:
    """A real client logs in as carol with SCRAM-SHA-512, produces and consumes."""
    conf = {"bootstrap.servers": cluster.bootstrap, "security.protocol": SASL,
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
            "sasl.password": password, "log_level": 0}
    producer = Producer({**conf, "acks": "all", "enable.idempotence": False})
    errors: list[Any] = []
    tag = uuid.uuid4().hex[:6]
    for i in range(n):
        producer.produce(MINE, f"{tag}-{i}".encode(),
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and not errors, errors
    consumer = Consumer({**conf, "group.id": f"carol-{tag}", "auto.offset.reset": "earliest"})
    consumer.subscribe([MINE])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(
                [v for v in got if v.startswith(tag.encode())]) < n:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value() or b"")
    finally:
        consumer.close()
    assert [v for v in got if v.startswith(tag.encode())] == [
        f"{tag}-{i}".encode() for i in range(n)]


def test_acls_and_scram_users_survive_restart_and_controller_failover(
    cluster: ZkCluster,
) -> None:
    c = cluster
    wire = WirePrincipals()
    probe = Probe(c, wire)
    try:
        assert wait_until(lambda: c.controller() is not None, 20)
        resp = wire.call(c.address(0), ADMIN, 19, 7, {"topics": [
            {"name": t, "num_partitions": 1, "replication_factor": 3, "assignments": [],
             "configs": []} for t in (MINE, OTHER)], "timeout": 10_000, "validate_only": False})
        assert all(t.error_code == ErrorCode.none for t in resp.topics), resp

        # SCRAM users and ACLs, made through broker 0.
        _set_scram(c.address(0), {"carol": "carol-1"})
        creations = [
            acl(AclOperation.WRITE, T, MINE, "User:carol"),
            acl(AclOperation.READ, T, MINE, "User:carol"),
            acl(AclOperation.READ, G, "carol-", "User:carol", pattern=PRE),
            acl(AclOperation.DESCRIBE, T, OTHER, "User:alice"),
        ]
        create_acls(wire, c.address(0), creations)
        acls = {(int(T), MINE, int(LIT), "User:carol", "*", int(AclOperation.WRITE), int(ALLOW)),
                (int(T), MINE, int(LIT), "User:carol", "*", int(AclOperation.READ), int(ALLOW)),
                (int(G), "carol-", int(PRE), "User:carol", "*", int(AclOperation.READ),
                 int(ALLOW)),
                (int(T), OTHER, int(LIT), "User:alice", "*", int(AclOperation.DESCRIBE),
                 int(ALLOW))}
        _wait_state(probe, [0, 1, 2], "carol-1", "carol-2", _expected(acls))
        _roundtrip_as_carol(c, "carol-1")

        # A restart (SIGTERM, then start): the broker loads both from ZooKeeper.
        controller = c.controller()
        restarted = next(b for b in range(3) if b != controller)
        c.restart(restarted)
        wire.forget_address(c.address(restarted))
        assert probe.state(restarted, "carol-1", ("carol-2",)) == _expected(acls)
        _roundtrip_as_carol(c, "carol-1")

        # The controller crashes (SIGKILL); another one is elected once its session expires.
        old = c.controller()
        assert old is not None
        c.kill(old)
        wire.forget_address(c.address(old))
        survivors = [b for b in range(3) if b != old]
        assert wait_until(lambda: c.controller() in survivors, 30), c.controller()
        new = c.controller()
        # ... and the survivors know it: a client sends AlterUserScramCredentials to the
        # controller their metadata names (until the new one's UpdateMetadata, the dead one).
        assert wait_until(lambda: all(_controller_seen(wire, c, b) == new for b in survivors),
                          30), {b: _controller_seen(wire, c, b) for b in survivors}
        # Changes through a surviving broker reach every surviving broker: a new password,
        # a new user, a DENY that beats carol's READ-implied Describe of her topic.
        through = survivors[-1]
        _set_scram(c.address(through), {"carol": "carol-2", "dave": "dave-secret"})
        deny = acl(AclOperation.DESCRIBE, T, MINE, "User:carol", permission=DENY)
        create_acls(wire, c.address(through), [deny])
        acls2 = acls | {(int(T), MINE, int(LIT), "User:carol", "*", int(AclOperation.DESCRIBE),
                         int(DENY))}
        expected2 = _expected(acls2, describe_mine=False)
        _wait_state(probe, survivors, "carol-2", "carol-1", expected2)
        for b in survivors:
            assert probe.logs_in(b, Login("dave", "dave-secret", "SCRAM-SHA-512"))
        # The crashed broker comes back with all of it, old and new.
        c.start_broker(old)
        _wait_state(probe, [old], "carol-2", "carol-1", expected2)
        assert probe.logs_in(old, Login("dave", "dave-secret", "SCRAM-SHA-512"))
        for b in range(3):
            assert _scram_users(c.address(b)) == {
                "carol": [(ScramMechanism.SCRAM_SHA_512, 8192)],
                "dave": [(ScramMechanism.SCRAM_SHA_512, 8192)]}
    finally:
        wire.close()
