"""A 3-broker cluster whose inter-broker traffic is SASL_SSL (SPEC M4, issue 13).

Three `wherry server --zookeeper` processes on a real ZooKeeper (`ZkCluster`), each with ONE
listener, SASL_SSL: there is no other way between brokers, so replication (follower fetches),
the controller's LeaderAndIsr/UpdateMetadata/StopReplica, AlterPartition and controlled shutdown
all go over TLS (hostname checked: the CA-issued broker certificate names 127.0.0.1) after a
SASL login, once with PLAIN and once with SCRAM-SHA-512 as the inter-broker mechanism (the SCRAM
credential of the broker user is written into ZooKeeper before any broker starts, Kafka's
bootstrap way: `wherry users --zookeeper ... --add-config 'SCRAM-SHA-512=[password=...]'`).

What the tests show, per inter-broker mechanism:

* replication: an RF 3 topic created over SASL_SSL, acks=all, every replica in the ISR (read
  from ZooKeeper) and the three replicas' segment files byte-identical;
* the three client libraries produce and consume over SASL_SSL with PLAIN and SCRAM-SHA-512;
* controller requests reach the brokers: topic creation, and a leader election after a broker
  is stopped (the new leader serves, the ISR shrinks);
* a broker restarted with a WRONG inter-broker password cannot rejoin: its fetches fail with an
  authentication error in its log and the ISR stays without it; restarted with the right
  password it is back in the ISR.

When a test fails, the tail of each broker's log is printed (the whole logs stay under pytest's
base temp); the test steps are printed with timestamps to set beside the brokers' log lines.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.helpers import running_zookeeper
from tests.security.security_clients import ROUNDTRIPS, ClientAuth, confluent_conf
from tests.security.tls_material import TlsMaterial, make_tls_material
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

BROKER_USER, BROKER_PASSWORD = "admin", "admin-secret"
CLIENT_USER, CLIENT_PASSWORD = "alice", "alice-secret"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
LAG_MS = 3_000  # replica.lag.time.max.ms: a silent follower leaves the ISR after this
# A few records acks=all are acknowledged in well under a second; the bound catches a produce
# answered only when its request times out (librdkafka's request.timeout.ms, 30 s) and retried
SMALL_PRODUCE_S = 20
LOG_TAIL_LINES = 80


def _step(what: str) -> None:
    """A test step, timestamped as the brokers' log lines are (shown when a test fails)."""
    now = time.time()
    print(
        f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))},{int(now % 1 * 1000):03d}]"
        f" STEP {what}",
        flush=True,
    )


def _plain_jaas(password: str) -> str:
    return (
        f'{PLAIN_MODULE} required username="{BROKER_USER}" password="{password}" '
        f'user_{BROKER_USER}="{BROKER_PASSWORD}" user_{CLIENT_USER}="{CLIENT_PASSWORD}";'
    )


def _scram_jaas(password: str) -> str:
    return f'{SCRAM_MODULE} required username="{BROKER_USER}" password="{password}";'


def _security_overrides(tls: TlsMaterial, mechanism: str, password: str) -> dict[str, str]:
    """The settings of a broker whose only listener is SASL_SSL, for inter-broker traffic too."""
    return {
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": mechanism,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _plain_jaas(
            password if mechanism == "PLAIN" else BROKER_PASSWORD
        ),
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _scram_jaas(
            password if mechanism == "SCRAM-SHA-512" else BROKER_PASSWORD
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_pem),
        "ssl.client.auth": "none",
        # https: the broker checks the peer's certificate names 127.0.0.1 (Kafka's default)
        "ssl.endpoint.identification.algorithm": "https",
        "replica.lag.time.max.ms": str(LAG_MS),
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.replication.factor": "3",
    }


def _add_scram_user(connect: str, user: str, password: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "wherry",
            "users",
            "--zookeeper",
            connect,
            "--alter",
            "--entity-name",
            user,
            "--add-config",
            f"SCRAM-SHA-512=[password={password}]",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Completed updating config for user {user}." in done.stdout, done.stdout


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module", params=["PLAIN", "SCRAM-SHA-512"])
def cluster(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tls: TlsMaterial,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ZkCluster]:
    mechanism: str = request.param
    c = ZkCluster(
        tmp_path_factory.mktemp(f"sasl-ssl-{mechanism.lower()}"),
        brokers=3,
        zookeeper=zookeeper,
        chroot=f"/wherry-{uuid.uuid4().hex[:8]}",
        session_timeout_ms=6_000,
        listeners=("SASL_SSL",),
        overrides=_security_overrides(tls, mechanism, BROKER_PASSWORD),
        start_timeout_s=60,
    )
    # Kafka's bootstrap: SCRAM users exist in ZooKeeper before any broker starts (the broker
    # user is needed for inter-broker SCRAM; alice for the SCRAM clients).
    _add_scram_user(c.connect_string, BROKER_USER, BROKER_PASSWORD)
    _add_scram_user(c.connect_string, CLIENT_USER, CLIENT_PASSWORD)
    with c:
        c.mechanism = mechanism  # type: ignore[attr-defined]
        assert wait_until(lambda: c.registered_brokers() == {0, 1, 2}, 30)
        assert wait_until(lambda: c.controller() is not None, 30)
        # Every broker must also know the controller (from the controller's UpdateMetadata)
        # before an admin client asks: librdkafka looks the controller up once, and when the
        # broker it asks names none (-1) yet, its CreateTopics waits out its whole timeout.
        controller = c.controller()
        for b in c.broker_ids:
            assert wait_until(lambda b=b: _knows_cluster(c, tls, b, controller), 30), (
                f"broker {b} does not name controller {controller}:\n{c.output(b)[-3000:]}"
            )
        yield c


def _knows_cluster(c: ZkCluster, tls: TlsMaterial, broker: int, controller: int | None) -> bool:
    """Does `broker`, asked alone over SASL_SSL, name the controller and all three brokers?"""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    conf = confluent_conf(c.address(broker, "SASL_SSL"), _auth(tls, "PLAIN"))
    try:
        md = AdminClient(conf).list_topics(timeout=5)
    except KafkaException:  # not answering yet
        return False
    return md.controller_id == controller and set(md.brokers) == {0, 1, 2}


@pytest.fixture(autouse=True)
def _broker_logs_on_failure(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    """When the test fails, print where each broker's log is and its last lines."""
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before or "cluster" not in request.fixturenames:
        return
    try:
        c: ZkCluster = request.getfixturevalue("cluster")
    except (Exception, pytest.fail.Exception):  # the cluster did not start (its error says why)
        return
    with capsys.disabled():
        for b in c.broker_ids:
            tail = c.output(b).splitlines()[-LOG_TAIL_LINES:]
            print(f"\n===== broker {b}: {c.output_path(b)} (last {len(tail)} lines)")
            print("\n".join(tail))


def _auth(tls: TlsMaterial, mechanism: str) -> ClientAuth:
    return ClientAuth(
        "SASL_SSL",
        ca=tls.ca_pem,
        mechanism=mechanism,
        username=CLIENT_USER,
        password=CLIENT_PASSWORD,
    )


def _create(c: ZkCluster, tls: TlsMaterial, topic: str, partitions: int, rf: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    _step(f"create topic {topic}")
    admin = AdminClient(confluent_conf(c.bootstrap_of("SASL_SSL"), _auth(tls, "PLAIN")))
    admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(30)
    _step(f"created topic {topic}")


def _full_isr(c: ZkCluster, topic: str, partitions: int, replicas: set[int]) -> bool:
    for p in range(partitions):
        state = c.partition_state(topic, p)
        if state is None or set(state.isr) != replicas:
            return False
    return True


def _segments(c: ZkCluster, broker: int, topic: str, partition: int) -> bytes:
    d = c.directory / f"broker-{broker}" / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def _produce(
    c: ZkCluster,
    tls: TlsMaterial,
    topic: str,
    n: int,
    prefix: str,
    partitions: int = 1,
    within_s: float = 60,
) -> None:
    from confluent_kafka import Producer

    _step(f"produce {n} records {prefix!r} to {topic}")
    conf = confluent_conf(c.bootstrap_of("SASL_SSL"), _auth(tls, "SCRAM-SHA-512"))
    producer = Producer({**conf, "acks": "all", "linger.ms": 5})
    failed: list[object] = []
    for i in range(n):
        producer.produce(
            topic,
            f"{prefix}-{i}".encode(),
            partition=i % partitions,
            on_delivery=lambda err, _m: failed.append(err) if err else None,
        )
    left = producer.flush(within_s)
    _step(f"produced {prefix!r}: {n - left} of {n} acknowledged")
    assert left == 0, f"{left} of {n} records not acknowledged within {within_s} s"
    assert not failed, failed[:3]


def test_replication_over_sasl_ssl(cluster: ZkCluster, tls: TlsMaterial) -> None:
    c = cluster
    topic = "replicated"
    _create(c, tls, topic, partitions=3, rf=3)  # CreateTopics → controller → LeaderAndIsr
    assert wait_until(lambda: _full_isr(c, topic, 3, {0, 1, 2}), 30)
    _produce(c, tls, topic, 3000, "r", partitions=3)
    # Every follower fetched everything (over SASL_SSL, the only listener): the ISR is still
    # full and the three copies of each partition are byte-identical.
    assert _full_isr(c, topic, 3, {0, 1, 2})
    for p in range(3):
        assert wait_until(
            lambda p=p: len({_segments(c, b, topic, p) for b in range(3)}) == 1, 30
        ), [len(_segments(c, b, topic, p)) for b in range(3)]
        assert len(_segments(c, 0, topic, p)) > 1000 * 10
    for b in range(3):
        out = c.output(b)
        assert "refused our SASL" not in out and "TLS with" not in out, out[-3000:]
        assert "eof_received" not in out, out[-3000:]


@pytest.mark.parametrize("client_mechanism", ["PLAIN", "SCRAM-SHA-512"])
@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
def test_clients_over_sasl_ssl(
    cluster: ZkCluster, tls: TlsMaterial, client: str, client_mechanism: str
) -> None:
    topic = f"clients-{client}-{client_mechanism.lower()}"
    _create(cluster, tls, topic, partitions=1, rf=3)
    got = ROUNDTRIPS[client](cluster.bootstrap_of("SASL_SSL"), _auth(tls, client_mechanism), topic)
    assert len(got) == 20 and len(set(got)) == 20


def test_leader_election_and_a_broker_with_a_wrong_password(
    cluster: ZkCluster, tls: TlsMaterial
) -> None:
    """Runs last on its cluster: stops and restarts broker 2."""
    c = cluster
    mechanism: str = c.mechanism  # type: ignore[attr-defined]
    topic = "election"
    c.create_topic(topic, {0: [2, 0, 1]})  # written into ZooKeeper: broker 2 leads
    assert wait_until(lambda: _full_isr(c, topic, 1, {0, 1, 2}), 30)
    state = c.partition_state(topic, 0)
    assert state is not None and state.leader == 2

    def _produce_one(tag: str) -> None:
        _produce(c, tls, topic, 3, tag, within_s=SMALL_PRODUCE_S)

    _produce_one("before")

    # Stopping the leader: the controller elects another one and tells the brokers.
    _step("stop broker 2")
    c.stop_broker(2)
    assert wait_until(
        lambda: (
            (s := c.partition_state(topic, 0)) is not None
            and s.leader in (0, 1)
            and set(s.isr) == {0, 1}
        ),
        30,
    )
    _produce_one("after-stop")

    # Broker 2 back with a wrong inter-broker password: its listener still accepts the others
    # (its own server-side users are right), but its fetches to the leader fail to log in.
    wrong = _security_overrides(tls, mechanism, "not-the-password")
    c.broker_overrides[2] = wrong
    _step("start broker 2 with a wrong inter-broker password")
    c.start_broker(2)
    start = len(c.output(2))
    assert wait_until(lambda: "refused our SASL" in c.output(2)[start:], 30), c.output(2)[-3000:]
    line = next(ln for ln in c.output(2)[start:].splitlines() if "refused our SASL" in ln)
    assert mechanism in line and "Error reaching the leader" in line, line
    assert "Authentication failed" in line, line
    leader = c.partition_state(topic, 0).leader  # type: ignore[union-attr]
    assert wait_until(lambda: "SASL authentication failed" in c.output(leader), 10)
    _produce_one("while-wrong")
    wait_until(lambda: False, 2 * LAG_MS / 1000)  # time enough to have joined, were it able
    state = c.partition_state(topic, 0)
    assert state is not None and set(state.isr) == {0, 1}, state

    # With the right password it catches up and is back in the ISR.
    _step("restart broker 2 with the right password")
    c.stop_broker(2)
    del c.broker_overrides[2]
    c.start_broker(2)
    assert wait_until(lambda: _full_isr(c, topic, 1, {0, 1, 2}), 30), c.output(2)[-3000:]
    _produce_one("after-fix")
    state = c.partition_state(topic, 0)
    assert state is not None
    assert wait_until(lambda: len({_segments(c, b, topic, 0) for b in range(3)}) == 1, 30)
