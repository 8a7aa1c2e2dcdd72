"""SASL listeners end to end (SPEC M4, issue 13): the three client libraries over
SASL_PLAINTEXT (PLAIN, SCRAM-SHA-512) and SASL_SSL (PLAIN, SCRAM-SHA-256); bad credentials
(wrong password, unknown user) get one error, one message and one timing class; random SASL
frames never crash the broker and never authenticate; nothing but ApiVersions and SASL is
served before authentication."""

from __future__ import annotations

import asyncio
import random
import socket
import statistics
import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.broker_process import BrokerProcess
from tests.security.security_clients import ROUNDTRIPS, ClientAuth, create_topic
from tests.security.tls_material import TlsMaterial, make_tls_material
from wherry.outbound.connection import OutboundConnection
from wherry.outbound.security import AuthenticationError, ClientSecurity
from wherry.protocol.codec import decode_response, encode_request

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
SCRAM_USERS = {"carol": "carol-scram-secret", "dave": "dave-scram-secret"}


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("sasl-tls"))


@pytest.fixture(scope="module")
def sasl_broker(
    tmp_path_factory: pytest.TempPathFactory, tls: TlsMaterial
) -> Iterator[BrokerProcess]:
    """Listeners: SASL_PLAINTEXT, SASL_SSL and PLAINTEXT (the inter-broker one)."""
    b = BrokerProcess(
        tmp_path_factory.mktemp("sasl-broker"),
        listeners="SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        overrides=[
            *tls.broker_overrides(),
            "security.inter.broker.protocol=PLAINTEXT",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}",
            "group.initial.rebalance.delay.ms=0",
        ],
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.addresses[2]})
        upserts = [
            UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 4096), pw.encode())
            for user, pw in SCRAM_USERS.items()
            for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
        ]
        for f in admin.alter_user_scram_credentials(upserts).values():
            f.result(30)
        yield b
    finally:
        b.stop()


def _auth(kind: str, tls: TlsMaterial) -> ClientAuth:
    protocol, mechanism = kind.split("/")
    user, pw = (
        ("alice", "alice-secret") if mechanism == "PLAIN" else ("carol", SCRAM_USERS["carol"])
    )
    ca = tls.ca_pem if protocol == "SASL_SSL" else None
    return ClientAuth(protocol, ca=ca, mechanism=mechanism, username=user, password=pw)


KINDS = [
    "SASL_PLAINTEXT/PLAIN",
    "SASL_PLAINTEXT/SCRAM-SHA-512",
    "SASL_SSL/PLAIN",
    "SASL_SSL/SCRAM-SHA-256",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
def test_clients_produce_and_consume(
    sasl_broker: BrokerProcess, tls: TlsMaterial, kind: str, client: str
) -> None:
    address = sasl_broker.addresses[0 if kind.startswith("SASL_PLAINTEXT") else 1]
    auth = _auth(kind, tls)
    topic = f"sasl-{client}-{kind.replace('/', '-').lower()}"
    create_topic(address, auth, topic)
    got = ROUNDTRIPS[client](address, auth, topic, 10)
    assert len(got) == 10 and len(set(got)) == 10


def _login(address: str, mechanism: str, user: str, password: str) -> str | None:
    """Log in with wherry's own client; None on success, else the broker's message."""
    host, port = address.rsplit(":", 1)

    async def go() -> str | None:
        conn = OutboundConnection(
            host,
            int(port),
            connect_timeout_s=10,
            request_timeout_s=10,
            security=ClientSecurity("SASL_PLAINTEXT", None, mechanism, user, password),
        )
        try:
            await conn.connect()
        except AuthenticationError as e:
            return str(e).split(": ", 1)[1]
        finally:
            await conn.close()
        return None

    return asyncio.run(go())


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_and_unknown_user_look_the_same(
    sasl_broker: BrokerProcess, mechanism: str
) -> None:
    address = sasl_broker.addresses[0]
    user, good = (
        ("alice", "alice-secret") if mechanism == "PLAIN" else ("dave", SCRAM_USERS["dave"])
    )
    assert _login(address, mechanism, user, good) is None
    wrong = _login(address, mechanism, user, "not-the-password")
    unknown = _login(address, mechanism, "mallory", "not-the-password")
    assert wrong is not None and unknown is not None
    assert wrong == unknown  # one error message for both (SASL_AUTHENTICATION_FAILED)
    # One timing class: interleaved attempts, medians within a small factor of each other.
    times: dict[str, list[float]] = {"wrong": [], "unknown": []}
    for _ in range(12):
        for kind, name in (("wrong", user), ("unknown", "mallory")):
            started = time.perf_counter()
            assert _login(address, mechanism, name, "not-the-password") == wrong
            times[kind].append(time.perf_counter() - started)
    a, b = statistics.median(times["wrong"]), statistics.median(times["unknown"])
    assert max(a, b) / min(a, b) < 3.0, times


def _frame(api_key: int, version: int, correlation_id: int, body: dict[str, object]) -> bytes:
    return encode_request(api_key, version, correlation_id, body, client_id="fuzz")


def _read_frame(s: socket.socket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""
    try:
        head = s.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return None
        (size,) = struct.unpack(">i", head)
        body = s.recv(size, socket.MSG_WAITALL)
        return body if len(body) == size else None
    except (ConnectionResetError, TimeoutError):
        return None


def _random_frame(rng: random.Random, corr: int) -> bytes:
    junk = rng.randbytes(rng.randrange(0, 300))
    choice = rng.randrange(6)
    if choice == 0:  # a handshake naming a random (maybe real) mechanism
        mech = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", junk.hex()[:20]])
        return _frame(17, rng.choice([0, 1]), corr, {"mechanism": mech})
    if choice == 1:  # authenticate with random bytes
        return _frame(36, rng.choice([0, 1, 2]), corr, {"auth_bytes": junk})
    if choice == 2:  # PLAIN-shaped tokens with random fields
        token = b"\0".join(rng.randbytes(rng.randrange(0, 12)) for _ in range(rng.randrange(1, 5)))
        return _frame(36, 2, corr, {"auth_bytes": token})
    if choice == 3:  # SCRAM-shaped messages with random attributes
        token = f"n,,n={junk.hex()[:8]},r={junk.hex()[8:20]}".encode()
        if rng.random() < 0.5:
            token = f"c=biws,r={junk.hex()},p={junk.hex()[:16]}".encode()
        return _frame(36, 2, corr, {"auth_bytes": token})
    if choice == 4:  # a raw frame of random bytes (size prefix kept sane)
        return struct.pack(">i", len(junk)) + junk
    return _frame(3, rng.choice([0, 1, 9]), corr, {"topics": None})  # a request before auth


def test_random_sasl_frames_never_crash_or_authenticate(sasl_broker: BrokerProcess) -> None:
    rng = random.Random(1313)
    host, port = sasl_broker.addresses[0].rsplit(":", 1)
    sent = 0
    authenticated = 0
    while sent < 1000:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.settimeout(2)
            for corr in range(rng.randrange(1, 8)):
                try:
                    s.sendall(_random_frame(rng, corr))
                except OSError:
                    break
                sent += 1
            # Whatever happened, a Metadata request must not be answered with metadata.
            try:
                s.sendall(_frame(3, 1, 999, {"topics": None}))
            except OSError:
                continue
            while True:
                raw = _read_frame(s)
                if raw is None:
                    break
                if struct.unpack(">i", raw[:4])[0] == 999:
                    decode_response(3, 1, raw, expect_correlation_id=999)
                    authenticated += 1
                    break
    assert authenticated == 0
    # The broker is alive and well: a real client still logs in and works.
    assert _login(sasl_broker.addresses[0], "PLAIN", "alice", "alice-secret") is None


def test_requests_before_authentication_close_the_connection(sasl_broker: BrokerProcess) -> None:
    host, port = sasl_broker.addresses[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.settimeout(5)
        s.sendall(_frame(18, 0, 1, {}))  # ApiVersions is allowed
        assert _read_frame(s) is not None
        s.sendall(_frame(3, 1, 2, {"topics": None}))  # Metadata is not
        assert _read_frame(s) is None
    assert "during SASL handshake" in sasl_broker.log_text()


def test_sasl_requests_on_a_plaintext_listener_get_illegal_sasl_state(
    sasl_broker: BrokerProcess,
) -> None:
    host, port = sasl_broker.addresses[2].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.settimeout(5)
        s.sendall(_frame(17, 1, 1, {"mechanism": "PLAIN"}))
        raw = _read_frame(s)
        assert raw is not None
        _, body = decode_response(17, 1, raw, expect_correlation_id=1)
        assert body.error_code == 34  # ILLEGAL_SASL_STATE
