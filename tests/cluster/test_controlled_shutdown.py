"""Controlled shutdown (SPEC H11, issue 11): a stopping broker has the controller move its
leaderships away while it still serves, then stops; when no other replica can take over it
stops anyway after its attempts, its data intact.

Three brokers in this process (`DevCluster`, an `AsyncDevCluster` on its own loop), real
clients, ControlledShutdown on the wire through the broker's own `outbound.RequestClient`; and
three `wherry server --zookeeper` processes stopped by SIGTERM (slow).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from kio.schema.errors import ErrorCode

from tests.helpers import create_topic, poll_messages, zk_cluster
from wherry.outbound.client import RequestClient
from wherry.outbound.connection import OutboundConnection
from wherry.protocol.interbroker import (
    CONTROLLED_SHUTDOWN_KEY,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from wherry.runtime.state_change_log import STATE_CHANGE_LOG_FILE, merge_state_change_logs
from wherry.server.config import BrokerConfigError, load_config
from wherry.testing.cluster import DevCluster, ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

BACKOFF_MS = 200
FAST_RETRIES = {
    "controlled.shutdown.max.retries": "2",
    "controlled.shutdown.retry.backoff.ms": str(BACKOFF_MS),
    "group.initial.rebalance.delay.ms": "0",
}


def new_name() -> str:
    return f"cs-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with DevCluster(tmp_path / "cluster", brokers=3, overrides=FAST_RETRIES) as c:
        c.wait_for_controller()
        yield c


def produce(bootstrap: str, topic: str, count: int, prefix: str) -> None:
    """``count`` records ``<prefix>-<i>`` with acks=all, spread over the partitions."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for i in range(count):
        p.produce(topic, f"{prefix}-{i}".encode())
    assert p.flush(20) == 0


def new_topic(c: DevCluster, partitions: int, rf: int) -> str:
    t = new_name()
    create_topic(c.bootstrap, t, partitions=partitions, replication_factor=rf)
    c.wait_for_topic(t, partitions)
    return t


def consume_all(c: DevCluster, topic: str, count: int) -> list[str]:
    """Every record of the topic's partitions from offset 0, sorted."""
    partitions = len(c.metadata(c.running[0], [topic]).partitions(topic))
    consumer = Consumer(
        {"bootstrap.servers": c.bootstrap, "group.id": new_name(), "log_level": 0,
         "enable.auto.commit": False}
    )
    try:
        consumer.assign([CKTopicPartition(topic, p, 0) for p in range(partitions)])
        msgs = poll_messages(consumer, count, 30, skip_errors=True)
        return sorted(m.value().decode() for m in msgs)  # type: ignore[union-attr]
    finally:
        consumer.close()


def led_by(c: DevCluster, broker: int, topic: str) -> list[int]:
    return sorted(p for p, st in c.metadata(broker, [topic]).partitions(topic).items()
                  if st.leader == broker)


def messages(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


@pytest.mark.parametrize("victim_kind", ["controller", "other"])
def test_stopping_a_leader_moves_its_leaderships_before_it_stops(
    cluster: DevCluster, victim_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    c = cluster
    controller = c.wait_for_controller()
    t = new_topic(c, partitions=6, rf=3)
    produce(c.bootstrap, t, 60, "before")
    victim = controller if victim_kind == "controller" else (controller + 1) % 3
    led = led_by(c, victim, t)
    assert led, "the victim leads some partitions"
    others = [b for b in c.running if b != victim]
    victim_log = c.broker(victim).config.data_dir / STATE_CHANGE_LOG_FILE

    caplog.set_level(logging.INFO)
    started = time.monotonic()
    c.stop_broker(victim)
    took = time.monotonic() - started

    # Right after the stop: the others lead everything, the victim is in no ISR.
    for b in others:
        parts = c.metadata(b, [t]).partitions(t)
        assert len(parts) == 6
        for p, st in parts.items():
            assert st.leader in others, (b, p, st)
            assert victim not in st.isr, (b, p, st)
    # The first attempt succeeded: no backoff waited.
    assert took < BACKOFF_MS / 1000 + 5
    lines = [r.getMessage() for r in caplog.records]
    prefix = f"[Broker id={victim}]"
    succeeded = [i for i, m in enumerate(lines)
                 if m.startswith(prefix) and "controlled shutdown succeeded after 1 attempt" in m]
    closed = [i for i, m in enumerate(lines) if m == f"{prefix} shut down completed"]
    assert succeeded and closed and succeeded[0] < closed[0], lines
    assert not any(m.startswith(prefix) and "retrying controlled shutdown" in m for m in lines)
    # The victim itself (so before it stopped) became a follower of each partition it led,
    # under a new leader.
    followed = {
        r.partition
        for r in merge_state_change_logs([victim_log])
        if r.topic == t and r.node_kind == "Broker" and r.is_change
        and r.leader is not None and r.leader != victim and (r.leader_epoch or 0) >= 1
    }
    assert set(led) <= followed, (led, followed)
    # Nothing was lost, and the topic takes writes with the victim gone, once every broker
    # knows it is gone: until then the victim, which fetched as a follower until it stopped,
    # is a live caught-up replica about to join the ISR, which holds the high watermark (as
    # Kafka's maybeIncrementLeaderHW does).
    assert wait_until(lambda: all(sorted(c.metadata(b).brokers) == others for b in others), 10)
    produce(c.bootstrap, t, 30, "after")
    assert consume_all(c, t, 90) == sorted(
        messages("before", 60) + messages("after", 30)
    )


def test_last_isr_member_stops_after_its_attempts_and_keeps_its_data(
    cluster: DevCluster, caplog: pytest.LogCaptureFixture
) -> None:
    c = cluster
    controller = c.wait_for_controller()
    t = new_topic(c, partitions=3, rf=3)
    produce(c.bootstrap, t, 30, "all")
    first, second = [b for b in c.running if b != controller]
    c.stop_broker(first)
    c.stop_broker(second)
    # The last broker leads everything, alone in every ISR; it takes writes alone.
    view = c.metadata(controller, [t])
    assert all(st.leader == controller and list(st.isr) == [controller]
               for st in view.partitions(t).values())
    produce(c.bootstrap, t, 30, "alone")

    caplog.set_level(logging.INFO)
    started = time.monotonic()
    c.stop_broker(controller)
    took = time.monotonic() - started
    prefix = f"[Broker id={controller}]"
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and r.getMessage().startswith(prefix)]
    failed = [w for w in warnings if "controlled shutdown failed after 2 attempt(s)" in w]
    assert failed, warnings
    for p in range(3):
        assert f"{t}-{p}" in failed[0]
    assert BACKOFF_MS / 1000 <= took < 20

    for b in (controller, first, second):  # the one with every record first
        c.start_broker(b)
    c.wait_for_topic(t, 3)
    assert consume_all(c, t, 60) == sorted(messages("all", 30) + messages("alone", 30))


def test_single_replica_partitions_need_no_move(
    cluster: DevCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka moves only partitions with other replicas: one whose only replica is the stopping
    broker does not hold the shutdown up."""
    c = cluster
    controller = c.wait_for_controller()
    victim = (controller + 1) % 3
    t = new_name()
    create_topic(c.bootstrap, t, [[victim], [victim]])
    c.wait_for_topic(t, 2)
    produce(c.bootstrap, t, 20, "rf1")
    caplog.set_level(logging.INFO)
    c.stop_broker(victim)
    lines = [r.getMessage() for r in caplog.records]
    assert any(f"[Broker id={victim}] controlled shutdown succeeded after 1 attempt" in m
               for m in lines), lines
    c.start_broker(victim)
    c.wait_for_topic(t, 2)
    assert consume_all(c, t, 20) == sorted(messages("rf1", 20))


def test_hard_stop_leaves_leaderships_to_the_broker_change(
    cluster: DevCluster, caplog: pytest.LogCaptureFixture
) -> None:
    c = cluster
    controller = c.wait_for_controller()
    t = new_topic(c, partitions=3, rf=3)
    victim = (controller + 1) % 3
    assert led_by(c, victim, t)
    caplog.set_level(logging.INFO)
    c.stop_broker(victim, controlled=False)
    assert not any("controlled shutdown" in r.getMessage() and f"id={victim}]" in r.getMessage()
                   for r in caplog.records)
    others = [b for b in c.running]
    assert wait_until(
        lambda: all(st.leader in others
                    for st in c.metadata(others[0], [t]).partitions(t).values()),
        10,
    )


def test_controlled_shutdown_on_the_wire(cluster: DevCluster) -> None:
    """The broker's own client (`RequestClient`) sends ControlledShutdown: a broker that is not
    the controller answers NOT_CONTROLLER; the controller checks the broker and its epoch."""
    c = cluster
    controller = c.wait_for_controller()
    other = (controller + 1) % 3
    epoch = c.call(lambda: c.broker(other).fence.broker_epoch)

    async def ask(broker: int, version: int, body: ControlledShutdownRequest) -> object:
        host, port = c.address(broker).rsplit(":", 1)
        client = RequestClient(
            OutboundConnection(host, int(port), connect_timeout_s=5, request_timeout_s=10).connect,
            client_id="test", peer=f"broker {broker}",
        )
        try:
            return await client.call(CONTROLLED_SHUTDOWN_KEY, version, body)
        finally:
            client.close()

    for v in range(4):
        answer = asyncio.run(ask(other, v, ControlledShutdownRequest(other, epoch)))
        assert answer == ControlledShutdownResponse(ErrorCode.not_controller), v
    stale = asyncio.run(ask(controller, 3, ControlledShutdownRequest(other, epoch - 1)))
    assert stale == ControlledShutdownResponse(ErrorCode.stale_broker_epoch)
    unknown = asyncio.run(ask(controller, 2, ControlledShutdownRequest(42, 1)))
    assert unknown == ControlledShutdownResponse(ErrorCode.broker_not_available)
    # Nothing moved, nobody is shutting down: the three brokers still serve.
    assert sorted(c.metadata(controller).brokers) == [0, 1, 2]


def test_controlled_shutdown_configs() -> None:
    default = load_config(None, {})
    assert (default.controlled_shutdown_enable, default.controlled_shutdown_max_retries,
            default.controlled_shutdown_retry_backoff_ms) == (True, 3, 5000)
    cfg = load_config(None, {"controlled.shutdown.enable": "false",
                             "controlled.shutdown.max.retries": "0",
                             "controlled.shutdown.retry.backoff.ms": "10"})
    assert (cfg.controlled_shutdown_enable, cfg.controlled_shutdown_max_retries,
            cfg.controlled_shutdown_retry_backoff_ms) == (False, 0, 10)
    for key, bad in (("controlled.shutdown.enable", "maybe"),
                     ("controlled.shutdown.max.retries", "-1"),
                     ("controlled.shutdown.retry.backoff.ms", "soon")):
        with pytest.raises(BrokerConfigError, match=key):
            load_config(None, {key: bad})


def test_disabled_controlled_shutdown_stops_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    overrides = {**FAST_RETRIES, "controlled.shutdown.enable": "false"}
    with DevCluster(tmp_path / "c", brokers=2, overrides=overrides) as c:
        controller = c.wait_for_controller()
        t = new_topic(c, partitions=2, rf=2)
        victim = 1 - controller
        assert led_by(c, victim, t)
        caplog.set_level(logging.INFO)
        c.stop_broker(victim)
        assert not any("controlled shutdown" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_sigterm_is_a_controlled_shutdown_between_processes(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """`wherry server --zookeeper` processes: SIGTERM (ZkCluster.stop_broker) stops a broker
    only after the controller, in another process, moved its leaderships and took it out of
    every ISR."""
    with zk_cluster(zookeeper, tmp_path, session_timeout_ms=4_000,
                    overrides={"controlled.shutdown.retry.backoff.ms": "500"}) as c:
        zc: ZkCluster = c
        assert wait_until(lambda: zc.controller() is not None, 15)
        controller = zc.controller()
        assert controller is not None
        t = new_name()
        zc.create_topic(t, {p: [(p + i) % 3 for i in range(3)] for p in range(6)})
        assert wait_until(
            lambda: all((s := zc.partition_state(t, p)) is not None and len(s.isr) == 3
                        for p in range(6)),
            20,
        )
        victim = next(b for b in range(3) if b != controller)
        assert any(zc.partition_state(t, p).leader == victim for p in range(6))  # type: ignore[union-attr]
        assert zc.stop_broker(victim) == 0
        for p in range(6):
            st = zc.partition_state(t, p)
            assert st is not None and st.leader != victim and victim not in st.isr, (p, st)
        assert "controlled shutdown succeeded" in zc.output(victim)
