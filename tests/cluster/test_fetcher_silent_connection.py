"""A replica fetcher whose connection to the leader goes silent (bytes accepted, nothing
forwarded, nothing answered, the connection left open: a network cut that TCP has not noticed)
gives it up within `replica.socket.timeout.ms` and fetches over a new connection, as Kafka's
fetcher does. Two `wherry server --zookeeper` processes on a real ZooKeeper; the leader is
advertised at a TCP proxy the test runs (and stops), which silences every connection open at
one moment and forwards the ones opened later."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer

from tests.helpers import create_topic, zk_cluster
from wherry.server.config import BrokerConfig, BrokerConfigError
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

SOCKET_TIMEOUT_MS = 3_000
BACKOFF_MS = 100
SLACK_S = 4.0  # a loaded machine: the produce round trips after the reconnect, scheduling


class _Pair:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client, self.upstream = client, upstream
        self.silent = False
        self.dropped = 0  # bytes received while silent

    def close(self) -> None:
        for s in (self.client, self.upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


class SilentProxy:
    """Forwards each connection to `target`; `silence()` makes the connections open at that
    moment swallow what they receive, both ways, without closing them."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.pairs: list[_Pair] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, upstream)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self.pairs.append(pair)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if pair.silent:
                    pair.dropped += len(data)
                else:
                    dst.sendall(data)
        except OSError:
            pass
        pair.close()

    def silence(self) -> list[_Pair]:
        with self._lock:
            silenced = [p for p in self.pairs if p.client.fileno() >= 0]
            for p in silenced:
                p.silent = True
            return silenced

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pairs = list(self.pairs)
        self.listener.close()
        for p in pairs:
            p.close()


@pytest.fixture
def proxied_cluster(zookeeper: ZooKeeperServer, tmp_path: Path
                    ) -> Iterator[tuple[ZkCluster, SilentProxy]]:
    c = zk_cluster(zookeeper, tmp_path, session_timeout_ms=6_000, brokers=2, overrides={
        "replica.socket.timeout.ms": str(SOCKET_TIMEOUT_MS),
        "replica.fetch.backoff.ms": str(BACKOFF_MS),
        "replica.fetch.wait.max.ms": "500",
        "replica.lag.time.max.ms": "30000",
    })
    host, port = c.address(0).rsplit(":", 1)
    proxy = SilentProxy((host, int(port)))
    c.broker_overrides[0] = {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}
    try:
        with c:
            yield c, proxy
    finally:
        proxy.close()


def _produce_one(bootstrap: str, topic: str, value: bytes, timeout_s: float) -> float:
    """Seconds until `value` is acknowledged by all in-sync replicas (acks=all)."""
    outcome: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0,
                         "message.timeout.ms": int(timeout_s * 1000)})
    started = time.monotonic()
    done = 0.0

    def delivered(err: KafkaError | None, _: Message) -> None:
        nonlocal done
        done = time.monotonic()
        outcome.append(err)

    producer.produce(topic, value=value, on_delivery=delivered)
    producer.flush(timeout_s + 5)
    assert outcome == [None], outcome
    return done - started


def test_a_silent_fetcher_connection_is_replaced_within_the_socket_timeout(
    proxied_cluster: tuple[ZkCluster, SilentProxy],
) -> None:
    c, proxy = proxied_cluster
    topic = "silent-fetch"
    # Leader 0 (reached through the proxy), follower 1; acks=all needs both.
    create_topic(c.address(1), topic, [[0, 1]], **{"min.insync.replicas": "2"})
    assert wait_until(lambda: (s := c.partition_state(topic, 0)) is not None
                      and s.leader == 0 and sorted(s.isr) == [0, 1], 20)
    _produce_one(c.address(1), topic, b"before", 30)

    silenced = proxy.silence()  # the follower's fetch connection among them
    assert silenced
    elapsed = _produce_one(c.address(1), topic, b"after", 30)
    print(f"acknowledged {elapsed:.2f} s after the silence "
          f"(replica.socket.timeout.ms={SOCKET_TIMEOUT_MS})")
    # The follower's fetch on the silent connection timed out, was dropped, and a new
    # connection fetched the record, all within replica.socket.timeout.ms (and slack).
    assert elapsed < SOCKET_TIMEOUT_MS / 1000 + BACKOFF_MS / 1000 + SLACK_S, elapsed
    assert any(p.dropped for p in silenced)  # requests did go into the silence
    assert wait_until(lambda: "Error reaching the leader" in c.output(1), 5)
    state = c.partition_state(topic, 0)
    assert state is not None and sorted(state.isr) == [0, 1]  # never dropped out of the ISR


def test_the_socket_timeout_must_cover_the_fetch_wait() -> None:
    with pytest.raises(BrokerConfigError, match=r"at least replica\.fetch\.wait\.max\.ms"):
        BrokerConfig.from_props({"replica.socket.timeout.ms": "400",
                                 "replica.fetch.wait.max.ms": "500"})
    BrokerConfig.from_props({"replica.socket.timeout.ms": "500",
                             "replica.fetch.wait.max.ms": "500"})
