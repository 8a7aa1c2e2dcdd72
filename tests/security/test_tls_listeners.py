"""SSL listeners (SPEC M4, issue 13): real clients over TLS with a CA made in the test;
client certificates when `ssl.client.auth=required`; listener settings that cannot work
refuse to start with one line naming the key."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.security.security_clients import ROUNDTRIPS, ClientAuth, confluent_conf, create_topic
from tests.security.tls_material import TlsMaterial, make_tls_material


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def ssl_broker(
    tmp_path_factory: pytest.TempPathFactory, tls: TlsMaterial
) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("ssl-broker"),
        listeners="SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        overrides=[*tls.broker_overrides(), "group.initial.rebalance.delay.ms=0"],
    ).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
def test_clients_produce_and_consume_over_ssl(
    ssl_broker: BrokerProcess, tls: TlsMaterial, client: str
) -> None:
    ssl_address = ssl_broker.addresses[0]
    auth = ClientAuth("SSL", ca=tls.ca_pem)
    topic = f"tls-{client}"
    create_topic(ssl_address, auth, topic)
    got = ROUNDTRIPS[client](ssl_address, auth, topic)
    assert len(got) == 20 and len(set(got)) == 20


def test_metadata_names_the_listener_the_client_came_in_on(
    ssl_broker: BrokerProcess, tls: TlsMaterial
) -> None:
    from confluent_kafka.admin import AdminClient

    ssl_address, plain_address = ssl_broker.addresses
    over_ssl = AdminClient(confluent_conf(ssl_address, ClientAuth("SSL", ca=tls.ca_pem)))
    over_plain = AdminClient({"bootstrap.servers": plain_address})
    (b_ssl,) = over_ssl.list_topics(timeout=10).brokers.values()
    (b_plain,) = over_plain.list_topics(timeout=10).brokers.values()
    assert f"{b_ssl.host}:{b_ssl.port}" == ssl_address
    assert f"{b_plain.host}:{b_plain.port}" == plain_address


def test_plaintext_bytes_on_an_ssl_listener_are_refused_and_nothing_breaks(
    ssl_broker: BrokerProcess, tls: TlsMaterial
) -> None:
    import socket

    host, port = ssl_broker.addresses[0].rsplit(":", 1)
    # An ApiVersions request in clear text: the TLS layer rejects it, the connection closes.
    frame = bytes.fromhex("0000001d00120003000000010009776865727279000003776800000000")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(frame)
        s.settimeout(5)
        try:
            data = s.recv(1024)
        except ConnectionResetError:
            data = b""
        assert not data.startswith(b"\x00\x00")  # no Kafka answer in clear text
    auth = ClientAuth("SSL", ca=tls.ca_pem)
    create_topic(ssl_broker.addresses[0], auth, "tls-after-garbage")
    assert (
        len(ROUNDTRIPS["confluent-kafka"](ssl_broker.addresses[0], auth, "tls-after-garbage", 3))
        == 3
    )


def test_client_certificates_required(tmp_path: Path, tls: TlsMaterial) -> None:
    from confluent_kafka.admin import AdminClient

    b = BrokerProcess(
        tmp_path / "data",
        listeners="SSL://127.0.0.1:0",
        overrides=tls.broker_overrides(client_auth="required"),
    ).start()
    try:
        address = b.addresses[0]
        # Without a client certificate the handshake fails: no metadata.
        bare = AdminClient(confluent_conf(address, ClientAuth("SSL", ca=tls.ca_pem)))
        with pytest.raises(Exception):  # noqa: B017 - KafkaException: transport failure
            bare.list_topics(timeout=3)
        alice = ClientAuth("SSL", ca=tls.ca_pem, cert=tls.client("alice"))
        create_topic(address, alice, "mtls")
        got = ROUNDTRIPS["confluent-kafka"](address, alice, "mtls", 5)
        assert len(got) == 5
    finally:
        b.stop()


def _refusal(tmp_path: Path, listeners: str, overrides: list[str]) -> str:
    cmd = [
        sys.executable,
        "-m",
        "wherry",
        "server",
        "--listeners",
        listeners,
        "--log-dirs",
        str(tmp_path / "data"),
    ]
    for o in overrides:
        cmd += ["--override", o]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout + done.stderr
    return done.stderr


@pytest.mark.parametrize(
    ("listeners", "overrides", "names"),
    [
        ("SSL://127.0.0.1:0", [], "ssl.keystore.location"),
        (
            "SSL://127.0.0.1:0",
            ["ssl.keystore.type=JKS", "ssl.keystore.location=/x.jks"],
            "ssl.keystore.type",
        ),
        (
            "SSL://127.0.0.1:0",
            ["ssl.keystore.type=PEM", "ssl.keystore.location=/nonexistent.pem"],
            "ssl.keystore.location",
        ),
        ("INTERNAL://127.0.0.1:0", [], "listener.security.protocol.map"),
        (
            "INTERNAL://127.0.0.1:0",
            ["listener.security.protocol.map=INTERNAL:KERBEROS"],
            "listener.security.protocol.map",
        ),
        ("SASL_PLAINTEXT://127.0.0.1:0", [], "sasl.enabled.mechanisms"),
        (
            "SASL_PLAINTEXT://127.0.0.1:0",
            ["sasl.enabled.mechanisms=GSSAPI"],
            "sasl.enabled.mechanisms",
        ),
        (
            "SASL_PLAINTEXT://127.0.0.1:0",
            ["sasl.enabled.mechanisms=PLAIN"],
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
        (
            "PLAINTEXT://127.0.0.1:0",
            ["inter.broker.listener.name=OTHER"],
            "inter.broker.listener.name",
        ),
        (
            "PLAINTEXT://127.0.0.1:0",
            ["inter.broker.listener.name=PLAINTEXT", "security.inter.broker.protocol=PLAINTEXT"],
            "security.inter.broker.protocol",
        ),
        (
            "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            ["ssl.keystore.type=PEM", "ssl.keystore.location=KS", "ssl.client.auth=sometimes"],
            "ssl.client.auth",
        ),
    ],
)
def test_unusable_security_settings_refuse_to_start(
    tmp_path: Path, tls: TlsMaterial, listeners: str, overrides: list[str], names: str
) -> None:
    overrides = [o.replace("=KS", f"={tls.broker_keystore}") for o in overrides]
    err = _refusal(tmp_path, listeners, overrides)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert names in lines[0], lines[0]
