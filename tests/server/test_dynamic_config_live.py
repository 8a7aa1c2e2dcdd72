"""Dynamic broker configs that take effect at once: the log cleaner's thread count and
back-off, a connection limit, and (KIP-226) a TLS listener's key store swapped without a
restart, which a client connecting afterwards sees (and a restart keeps)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from tests import kafka_wire
from tests.broker_process import BrokerProcess, wait_until
from tests.helpers import create_topic
from tests.server.test_dynamic_config_table import _incremental
from wherry.server import cleaner_threads
from wherry.testing.cluster import DevCluster

API_VERSIONS = 18
SET, DELETE = 0, 1


def test_log_cleaner_threads_and_backoff_change_live(wherry_broker: DevCluster) -> None:
    c = wherry_broker
    bs = c.bootstrap

    def cleaner() -> tuple[list[str], int, int]:
        b = c.broker(0)
        assert b.log_cleaner is not None
        return cleaner_threads.running(b.scheduler), b.log_cleaner.config.threads, (
            b.log_cleaner.config.backoff_ms
        )

    assert c.call(cleaner) == (["kafka-log-cleaner-thread-0"], 1, 15000)
    # Cluster-wide three threads, then this broker two, with a short back-off.
    assert _incremental(bs, "", {"log.cleaner.threads": "3"}).error_code == ErrorCode.none
    assert wait_until(lambda: len(c.call(cleaner)[0]) == 3, 15), c.call(cleaner)
    assert c.call(cleaner)[0] == [f"kafka-log-cleaner-thread-{i}" for i in range(3)]
    res = _incremental(bs, "0", {"log.cleaner.threads": "2", "log.cleaner.backoff.ms": "50"})
    assert res.error_code == ErrorCode.none, res.error_message
    expected = ([f"kafka-log-cleaner-thread-{i}" for i in range(2)], 2, 50)
    assert wait_until(lambda: c.call(cleaner) == expected, 15), c.call(cleaner)

    def runs() -> int:
        task = c.broker(0).scheduler.get("kafka-log-cleaner-thread-1")
        return 0 if task is None else task.runs

    assert wait_until(lambda: c.call(runs) >= 3, 15)  # every 50 ms now, not every 15 s
    # Unset: back to the cluster default's three, then to the built-in one.
    _incremental(bs, "0", {"log.cleaner.threads": None, "log.cleaner.backoff.ms": None}, DELETE)
    assert wait_until(lambda: c.call(cleaner)[1:] == (3, 15000), 15), c.call(cleaner)
    _incremental(bs, "", {"log.cleaner.threads": None}, DELETE)
    assert wait_until(lambda: len(c.call(cleaner)[0]) == 1, 15), c.call(cleaner)


def test_producer_id_expiration_changes_for_every_log(wherry_broker: DevCluster) -> None:
    c = wherry_broker
    create_topic(c.bootstrap, "pid-expiry", partitions=2)
    c.wait_for_topic("pid-expiry", 2, timeout_s=30)

    def expirations() -> set[int]:
        lm = c.broker(0).log_manager
        return {lm.producer_id_expiration_ms} | {
            lg.producer_state.producer_id_expiration_ms for lg in lm.all_logs()
        }

    assert c.call(expirations) == {86_400_000}
    res = _incremental(c.bootstrap, "", {"producer.id.expiration.ms": "60000"})
    assert res.error_code == ErrorCode.none, res.error_message
    assert wait_until(lambda: c.call(expirations) == {60_000}, 15), c.call(expirations)


def test_alter_log_dirs_copy_rate_changes(wherry_broker: DevCluster) -> None:
    c = wherry_broker
    key = "replica.alter.log.dirs.io.max.bytes.per.second"
    assert _incremental(c.bootstrap, "0", {key: "1000000"}).error_code == ErrorCode.none
    assert wait_until(lambda: c.call(lambda: c.broker(0).log_dir_mover.rate) == 1_000_000, 15)
    assert c.call(lambda: c.broker(0).log_dir_mover.chunk_bytes) <= 1_000_000


def test_a_connection_limit_takes_effect(wherry_broker: DevCluster) -> None:
    c = wherry_broker
    bs = c.bootstrap
    with kafka_wire.connect(bs) as held:
        kafka_wire.call(held, API_VERSIONS, 3, {"client_software_name": "t",
                                                "client_software_version": "1"})

        def from_loopback() -> int:
            return c.broker(0).network.quotas.by_ip.get("127.0.0.1", 0)

        open_now = c.call(from_loopback)
        res = _incremental(held, "0", {"max.connections.per.ip": str(open_now)})
        assert res.error_code == ErrorCode.none, res.error_message
        assert wait_until(
            lambda: c.call(lambda: c.broker(0).network.quotas.max_for_ip("127.0.0.1"))
            == open_now,
            15,
        )
        # A new connection from this address is closed at once; the held one still works.
        with kafka_wire.connect(bs) as refused:
            assert kafka_wire.is_closed(refused, 10)
        # Raised again through the held connection: new connections are served.
        res = _incremental(held, "0", {"max.connections.per.ip": None}, DELETE)
        assert res.error_code == ErrorCode.none
        assert wait_until(
            lambda: c.call(lambda: c.broker(0).network.quotas.max_for_ip("127.0.0.1"))
            == 2**31 - 1,
            15,
        )
        with kafka_wire.connect(bs) as served:
            served.sendall(kafka_wire.encode_request(API_VERSIONS, 0, {}))
            assert kafka_wire.read_response(served, API_VERSIONS, 0).error_code == 0


# --- TLS key store swapped at run time (KIP-226) --------------------------------------------


def _keystore(directory: Path, name: str, common_name: str = "broker") -> tuple[Path, Path, bytes]:
    """A broker key store from a CA of its own, its subject and names always the same but
    for `common_name`: (key store, CA file, the certificate's DER)."""
    ca = trustme.CA(organization_name=f"wherry {name}")
    ca_pem = directory / f"{name}-ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    issued = ca.issue_cert(
        "127.0.0.1",
        "localhost",
        common_name=common_name,
        organization_name="wherry",
        organization_unit_name="brokers",
    )
    keystore = directory / f"{name}.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(keystore))
    der = ssl.PEM_cert_to_DER_cert(issued.cert_chain_pems[0].bytes().decode())
    return keystore, ca_pem, der


@pytest.fixture
def first(tmp_path: Path) -> tuple[Path, Path, bytes]:
    return _keystore(tmp_path, "first")


@pytest.fixture
def ssl_broker(tmp_path: Path, first: tuple[Path, Path, bytes]) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path / "broker",
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        overrides=["ssl.keystore.type=PEM", f"ssl.keystore.location={first[0]}"],
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _served_certificate(address: str, ca: Path) -> bytes | None:
    """The certificate a new TLS client trusting only `ca` is served (None: not trusted)."""
    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with (
            socket.create_connection((host, int(port)), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname=host) as tls_sock,
        ):
            return tls_sock.getpeercert(binary_form=True)
    except ssl.SSLCertVerificationError:
        return None


def test_tls_key_store_swapped_without_restart(
    ssl_broker: BrokerProcess, first: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    plain, secure = ssl_broker.addresses
    assert _served_certificate(secure, first[1]) == first[2]
    keystore, ca2, der2 = _keystore(tmp_path, "second")
    assert _served_certificate(secure, ca2) is None

    # What Kafka refuses: a store that cannot be loaded, a certificate of another subject.
    location = "listener.name.ssl.ssl.keystore.location"
    other, _, _ = _keystore(tmp_path, "other", common_name="someone-else")
    res = _incremental(plain, "0", {location: str(other)})
    assert res.error_code == ErrorCode.invalid_request
    assert "Keystore DistinguishedName does not match" in res.error_message
    bad = _incremental(plain, "0", {location: "/nonexistent.pem"})
    assert bad.error_code == ErrorCode.invalid_request
    assert "Validation of dynamic config update of SSLFactory failed" in bad.error_message
    assert _served_certificate(secure, first[1]) == first[2]  # nothing changed
    # A new key store of the same subject from another CA: new clients get it at once.
    res = _incremental(plain, "0", {location: str(keystore)})
    assert res.error_code == ErrorCode.none, res.error_message
    assert wait_until(lambda: _served_certificate(secure, ca2) == der2, 15)
    assert _served_certificate(secure, first[1]) is None
    # A real client trusting only the new CA connects.
    admin = AdminClient({"bootstrap.servers": secure, "security.protocol": "SSL",
                         "ssl.ca.location": str(ca2), "log_level": 0})
    assert admin.list_topics(timeout=15).brokers

    # The same location with new contents: altering it again reloads the file (as Kafka
    # reloads key stores whose files changed).
    third, ca3, der3 = _keystore(tmp_path, "third")
    keystore.write_bytes(third.read_bytes())
    res = _incremental(plain, "0", {location: str(keystore)})
    assert res.error_code == ErrorCode.none, res.error_message
    assert wait_until(lambda: _served_certificate(secure, ca3) == der3, 15)

    # A restart serves the stored key store from the start.
    ssl_broker.stop()
    ssl_broker.start()
    assert _served_certificate(ssl_broker.addresses[1], ca3) == der3
