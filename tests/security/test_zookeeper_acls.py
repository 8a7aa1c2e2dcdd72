"""ZooKeeper ACLs on the broker's nodes (Kafka's `zookeeper.set.acl`, issue 13) with a real
ZooKeeper and ZooKeeper's digest scheme (`coordination/zk_acl.py`).

Two `wherry server --zookeeper` processes with `zookeeper.set.acl=true` and the identity
`zookeeper.digest.username/password` work normally (topics, replication, SCRAM users, ACLs,
produce and consume). A ZooKeeper client without that identity cannot write the nodes they
created (`/brokers/topics/...`, `/kafka-acl/...`, `/config/...`: NoAuthError), nor read the
sensitive ones (`/config/users/<u>`: NoAuthError), while everything else stays readable; a
client with the identity can do both. Settings that cannot work refuse to start."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl_credential

from tests.helpers import running_zookeeper
from tests.security.security_clients import ROUNDTRIPS, ClientAuth
from wherry.coordination.zk_acl import ZkAclConfigError, sensitive_path, zk_security_from_props
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

ZK_USER, ZK_PASSWORD = "wherry-broker", "zk-secret"
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ZkCluster]:
    c = ZkCluster(
        tmp_path_factory.mktemp("zk-acl"),
        brokers=2,
        zookeeper=zookeeper,
        chroot=f"/wherry-{uuid.uuid4().hex[:8]}",
        session_timeout_ms=6_000,
        overrides={
            "zookeeper.set.acl": "true",
            "zookeeper.digest.username": ZK_USER,
            "zookeeper.digest.password": ZK_PASSWORD,
            "authorizer.class.name": ACL_AUTHORIZER,
            "allow.everyone.if.no.acl.found": "true",
            "offsets.topic.replication.factor": "2",
            "group.initial.rebalance.delay.ms": "0",
        },
    )
    # Kafka's bootstrap of a SCRAM user before any broker runs, with the brokers' identity.
    props = c.directory / "zk.properties"
    props.write_text(
        f"zookeeper.set.acl=true\nzookeeper.digest.username={ZK_USER}\n"
        f"zookeeper.digest.password={ZK_PASSWORD}\n"
    )
    done = _users_tool(
        c,
        "--zk-config-file",
        str(props),
        "--alter",
        "--entity-name",
        "admin",
        "--add-config",
        "SCRAM-SHA-512=[password=admin-secret]",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with c:
        assert wait_until(lambda: c.registered_brokers() == {0, 1}, 30)
        yield c


def _users_tool(c: ZkCluster, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "wherry", "users", "--zookeeper", c.connect_string, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _client(c: ZkCluster, authenticated: bool) -> Iterator[KazooClient]:
    auth = [("digest", f"{ZK_USER}:{ZK_PASSWORD}")] if authenticated else None
    zk = KazooClient(hosts=c.connect_string, timeout=10.0, auth_data=auth)
    zk.start(timeout=10.0)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


@pytest.fixture
def stranger(cluster: ZkCluster) -> Iterator[KazooClient]:
    yield from _client(cluster, authenticated=False)


@pytest.fixture
def broker_identity(cluster: ZkCluster) -> Iterator[KazooClient]:
    yield from _client(cluster, authenticated=True)


def _admin(c: ZkCluster) -> object:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": c.bootstrap})


@pytest.fixture(scope="module")
def populated(cluster: ZkCluster) -> ZkCluster:
    """A topic, a SCRAM user and an ACL, all made through the brokers."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        NewTopic,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = _admin(cluster)
    admin.create_topics([NewTopic("guarded", 2, 2)])["guarded"].result(30)  # type: ignore[attr-defined]
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsert = UserScramCredentialUpsertion("alice", info, b"alice-secret")
    for f in admin.alter_user_scram_credentials([upsert]).values():  # type: ignore[attr-defined]
        f.result(30)
    binding = AclBinding(
        ResourceType.TOPIC,
        "alices",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    for f in admin.create_acls([binding]).values():  # type: ignore[attr-defined]
        f.result(30)
    zk = cluster.zk()
    assert wait_until(lambda: zk.exists("/config/users/alice") is not None, 10)
    assert zk.exists("/kafka-acl/Topic/alices") is not None
    return cluster


def test_the_broker_works_with_acls_on(populated: ZkCluster) -> None:
    c = populated
    got = ROUNDTRIPS["confluent-kafka"](c.bootstrap, ClientAuth(), "guarded", 20)
    assert len(got) == 20
    state = c.partition_state("guarded", 0)
    assert state is not None and set(state.isr) == {0, 1}
    for b in (0, 1):
        assert "NoAuth" not in c.output(b) and "Traceback" not in c.output(b), c.output(b)[-3000:]


def test_nodes_are_created_with_the_broker_identity_and_world_read(
    populated: ZkCluster, broker_identity: KazooClient
) -> None:
    owner = f"{ZK_USER}:{make_digest_acl_credential(ZK_USER, ZK_PASSWORD).split(':', 1)[1]}"
    zk = broker_identity

    def ids(path: str) -> dict[tuple[str, str], int]:
        acls, _ = zk.get_acls(path)
        return {(a.id.scheme, a.id.id): a.perms for a in acls}

    for path in (
        "/",
        "/brokers/topics/guarded",
        "/brokers/ids/0",
        "/kafka-acl/Topic/alices",
        "/config/topics/guarded",
        "/controller",
        "/brokers/topics/guarded/partitions/0/state",
    ):
        assert ids(path) == {("digest", owner): 31, ("world", "anyone"): 1}, path
    for path in ("/config/users", "/config/users/alice", "/config/users/admin"):
        assert ids(path) == {("digest", owner): 31}, path


def test_a_client_without_the_identity_cannot_write_or_read_secrets(
    populated: ZkCluster, stranger: KazooClient
) -> None:
    zk = stranger
    # World-readable: metadata any tool may look at.
    data, _ = zk.get("/brokers/topics/guarded")
    assert b"partitions" in data
    assert "guarded" in zk.get_children("/brokers/topics")
    zk.get("/kafka-acl/Topic/alices")
    # Not writable: topic assignments, partition states, ACLs, configs, registrations.
    with pytest.raises(NoAuthError):
        zk.set("/brokers/topics/guarded", b"{}")
    with pytest.raises(NoAuthError):
        zk.delete("/brokers/topics/guarded/partitions/0/state")
    with pytest.raises(NoAuthError):
        zk.create("/brokers/topics/intruder", b"{}")
    with pytest.raises(NoAuthError):
        zk.set("/kafka-acl/Topic/alices", b'{"version":1,"acls":[]}')
    with pytest.raises(NoAuthError):
        zk.create("/kafka-acl/Topic/other", b'{"version":1,"acls":[]}')
    with pytest.raises(NoAuthError):
        zk.create("/config/changes/config_change_", b"{}", sequence=True)
    with pytest.raises(NoAuthError):
        zk.create("/admin/delete_topics/guarded")
    with pytest.raises(NoAuthError):
        zk.delete("/controller")
    # Not readable: SCRAM credentials, nor even who has them.
    with pytest.raises(NoAuthError):
        zk.get("/config/users/alice")
    with pytest.raises(NoAuthError):
        zk.get("/config/users/admin")  # written by `wherry users --zookeeper --zk-config-file`
    with pytest.raises(NoAuthError):
        zk.get_children("/config/users")
    # The tool without the identity cannot list them either.
    done = _users_tool(populated, "--describe")
    assert (
        done.returncode == 1 and "Error while executing config command" in done.stdout + done.stderr
    )


def test_the_broker_identity_can_read_the_secrets(
    populated: ZkCluster, broker_identity: KazooClient
) -> None:
    data, _ = broker_identity.get("/config/users/alice")
    assert b"SCRAM-SHA-512" in data
    done = _users_tool(
        populated, "--zk-config-file", str(populated.directory / "zk.properties"), "--describe"
    )
    assert done.returncode == 0, done.stderr
    assert "user-principal 'admin' are SCRAM-SHA-512=iterations=4096" in done.stdout, done.stdout
    assert "user-principal 'alice'" in done.stdout


def test_zk_security_settings() -> None:
    assert zk_security_from_props({}) is None
    s = zk_security_from_props(
        {
            "zookeeper.set.acl": "true",
            "zookeeper.digest.username": "u",
            "zookeeper.digest.password": "p",
        }
    )
    assert s is not None and s.set_acl and "p" not in repr(s)
    assert [a.id.scheme for a in s.acls("/brokers/ids/1")] == ["digest", "world"]
    assert [a.id.scheme for a in s.acls("/config/users/alice")] == ["digest"]
    assert [(a.id.scheme, a.perms) for a in s.acls("/consumers")] == [("world", 31)]
    assert sensitive_path("/config/brokers") and sensitive_path("/delegation_token/tokens/x")
    assert not sensitive_path("/config/usersX") and not sensitive_path("/config/topics")
    open_ = zk_security_from_props(
        {"zookeeper.digest.username": "u", "zookeeper.digest.password": "p"}
    )
    assert open_ is not None and [(a.id.scheme, a.perms) for a in open_.acls("/x")] == [
        ("world", 31)
    ]
    for props, key in (
        ({"zookeeper.set.acl": "true"}, "zookeeper.digest.username"),
        ({"zookeeper.set.acl": "yes"}, "zookeeper.set.acl"),
        ({"zookeeper.digest.username": "u"}, "zookeeper.digest.password"),
        (
            {"zookeeper.digest.username": "a:b", "zookeeper.digest.password": "p"},
            "zookeeper.digest.username",
        ),
    ):
        with pytest.raises(ZkAclConfigError, match=key):
            zk_security_from_props(props)


def test_set_acl_without_an_identity_refuses_to_start(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "wherry",
        "server",
        "--zookeeper",
        "127.0.0.1:1/x",
        "--broker-id",
        "0",
        "--listeners",
        "PLAINTEXT://127.0.0.1:0",
        "--log-dirs",
        str(tmp_path),
        "--override",
        "zookeeper.set.acl=true",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "zookeeper.digest.username" in lines[0], done.stderr
