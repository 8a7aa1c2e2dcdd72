"""The per-connection SASL authenticator (Kafka's SaslServerAuthenticator), driven with
decoded requests as the broker drives it: Kafka's state rules, every client against every
mechanism, and random frames that must never crash it nor authenticate."""

from __future__ import annotations

import random
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from wherry.protocol.codec import Request, encode_response
from wherry.security.principal import user
from wherry.security.sasl_client import PlainClient, SaslClientMechanism, ScramClient
from wherry.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, generate_credential
from wherry.security.scram_store import ScramCredentialCache
from wherry.server.sasl_authenticator import (
    AFTER_AUTHENTICATION,
    SaslAuthenticator,
    SaslStateError,
    non_sasl_response,
)

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_USERS = {"alice": "alice-secret", "admin": "admin-secret"}


def scram_cache() -> ScramCredentialCache:
    cache = ScramCredentialCache()
    cache.update_user("alice", {
        "SCRAM-SHA-256": _fmt(generate_credential(SCRAM_SHA_256, "alice-secret")),
        "SCRAM-SHA-512": _fmt(generate_credential(SCRAM_SHA_512, "alice-secret", iterations=8192)),
    })
    return cache


def _fmt(cred: Any) -> str:
    from wherry.security.scram import format_credential
    return format_credential(cred)


CACHE = scram_cache()


def authenticator(mechanisms: tuple[str, ...] = MECHANISMS) -> SaslAuthenticator:
    return SaslAuthenticator(listener="SASL_PLAINTEXT", enabled_mechanisms=mechanisms,
                             plain_users=PLAIN_USERS, scram=CACHE)


def request(api_key: int, version: int, **fields: Any) -> Request:
    body = load_request_schema(api_key, version)(**fields)
    return Request(api_key, version, 7, "test", body, 0)


def handshake(mechanism: str, version: int = 1) -> Request:
    return request(17, version, mechanism=mechanism)


def authenticate(token: bytes, version: int = 2) -> Request:
    return request(36, version, auth_bytes=token)


def step(auth: SaslAuthenticator, req: Request) -> tuple[dict[str, Any], bool]:
    body, close = auth.on_request(req)
    encode_response(req.api_key, req.api_version, req.correlation_id, body)  # encodable
    return dict(body), close


def client(mechanism: str, username: str, password: str) -> SaslClientMechanism:
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    return ScramClient(mechanism, username, password)


def run_exchange(mechanism: str, username: str, password: str, *, auth_version: int = 2
                 ) -> tuple[SaslAuthenticator, list[int], str | None]:
    auth = authenticator()
    body, close = step(auth, handshake(mechanism))
    assert body["error_code"] == ErrorCode.none and not close
    assert tuple(body["mechanisms"]) == MECHANISMS
    c = client(mechanism, username, password)
    token: bytes | None = c.initial_response()
    codes: list[int] = []
    while token is not None:
        body, close = step(auth, authenticate(token, auth_version))
        codes.append(int(body["error_code"]))
        if body["error_code"] != ErrorCode.none:
            assert close and not auth.complete and auth.principal is None
            return auth, codes, body["error_message"]
        assert not close
        token = c.evaluate(body["auth_bytes"])
    assert c.complete
    return auth, codes, None


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("auth_version", [0, 1, 2])
def test_every_client_authenticates(mechanism: str, auth_version: int) -> None:
    auth, codes, error = run_exchange(mechanism, "alice", "alice-secret",
                                      auth_version=auth_version)
    assert error is None and auth.complete and auth.principal == user("alice")
    assert str(auth.principal) == "User:alice"
    assert codes == ([0] if mechanism == "PLAIN" else [0, 0])
    # After authentication: ILLEGAL_SASL_STATE, the connection stays (KafkaApis' answer).
    body, close = step(auth, handshake(mechanism))
    assert body["error_code"] == ErrorCode.illegal_sasl_state and not close
    body, close = step(auth, authenticate(b"x"))
    assert (body["error_code"], body["error_message"], close) == (
        ErrorCode.illegal_sasl_state, AFTER_AUTHENTICATION, False)
    auth.check_allowed(3)  # any API now


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_and_unknown_user_look_alike(mechanism: str) -> None:
    _, wrong_codes, wrong = run_exchange(mechanism, "alice", "not-it")
    _, unknown_codes, unknown = run_exchange(mechanism, "mallory", "not-it")
    assert wrong == unknown and wrong is not None
    assert wrong_codes == unknown_codes
    assert wrong_codes[-1] == ErrorCode.sasl_authentication_failed
    if mechanism == "PLAIN":
        assert wrong == "Authentication failed: Invalid username or password"
    else:
        assert wrong == ("Authentication failed during authentication due to invalid "
                         f"credentials with SASL mechanism {mechanism}")
        assert len(wrong_codes) == 2  # failed at the client's final message, not the first


def test_unsupported_mechanism() -> None:
    auth = authenticator(("SCRAM-SHA-512",))
    body, close = step(auth, handshake("PLAIN"))
    assert body["error_code"] == ErrorCode.unsupported_sasl_mechanism and close
    assert tuple(body["mechanisms"]) == ("SCRAM-SHA-512",)
    with pytest.raises(SaslStateError):
        auth.on_request(authenticate(b"\0alice\0alice-secret"))
    assert not auth.complete


def test_authenticate_before_handshake_and_second_handshake() -> None:
    auth = authenticator()
    body, close = step(auth, authenticate(b"\0alice\0alice-secret"))
    assert body["error_code"] == ErrorCode.illegal_sasl_state and close
    assert not auth.complete
    auth = authenticator()
    step(auth, handshake("PLAIN"))
    body, close = step(auth, handshake("PLAIN"))
    assert body["error_code"] == ErrorCode.illegal_sasl_state and close
    assert not auth.complete


def test_other_apis_before_authentication() -> None:
    auth = authenticator()
    auth.check_allowed(18)  # ApiVersions, answered by the broker
    with pytest.raises(SaslStateError,
                       match="Unexpected Kafka request of type METADATA during SASL handshake"):
        auth.check_allowed(3)
    with pytest.raises(SaslStateError):
        auth.on_request(request(3, 12, topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_handshake_v0_raw_tokens(mechanism: str) -> None:
    auth = authenticator()
    body, close = step(auth, handshake(mechanism, 0))
    assert body["error_code"] == ErrorCode.none and auth.raw_token_mode
    c = client(mechanism, "alice", "alice-secret")
    token: bytes | None = c.initial_response()
    while token is not None:
        reply, close = auth.on_raw_token(token)
        assert not close
        token = c.evaluate(reply)
    assert auth.complete and not auth.raw_token_mode and auth.principal == user("alice")
    # A failed raw exchange closes the connection without an answer.
    auth = authenticator()
    step(auth, handshake(mechanism, 0))
    with pytest.raises(SaslStateError):
        bad = client(mechanism, "alice", "wrong")
        t: bytes | None = bad.initial_response()
        while t is not None:
            t = bad.evaluate(auth.on_raw_token(t)[0])
    assert not auth.complete
    with pytest.raises(SaslStateError):
        auth.on_raw_token(b"again")


def test_raw_token_without_v0_handshake() -> None:
    auth = authenticator()
    with pytest.raises(SaslStateError):
        auth.on_raw_token(b"\0alice\0alice-secret")
    step(auth, handshake("PLAIN", 1))
    with pytest.raises(SaslStateError):
        auth.on_raw_token(b"\0alice\0alice-secret")


def test_non_sasl_listener_answers() -> None:
    for req in (handshake("PLAIN", 0), handshake("PLAIN", 1), authenticate(b"", 0),
                authenticate(b"", 2)):
        body = non_sasl_response(req)
        assert body["error_code"] == ErrorCode.illegal_sasl_state
        encode_response(req.api_key, req.api_version, 1, body)


def test_unsupported_mechanism_in_config() -> None:
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslAuthenticator(listener="X", enabled_mechanisms=("GSSAPI",), plain_users={},
                          scram=CACHE)


# --------------------------------------------------------------------------------------------
# Random frames


def _random_token(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.4:
        return rng.randbytes(rng.randrange(0, 64))
    if kind < 0.6:
        return b"\0".join(rng.choice([b"alice", b"", b"mallory", rng.randbytes(4)])
                          for _ in range(rng.randrange(1, 5)))
    pieces = [b"n,,", b"n=alice", b"r=", b",", b"c=biws", b"p=", b"=2C", b"=3D", b"\xff",
              b"v=", b"s=", b"i=4096", b"tokenauth=true", b"a=alice", b"y,,"]
    return b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 10)))


def test_random_frames_never_crash_nor_authenticate() -> None:
    rng = random.Random(20240613)
    mechanisms = [*MECHANISMS, "GSSAPI", "", "plain", "SCRAM-SHA-1", "\0"]
    for _ in range(1000):
        auth = authenticator(tuple(rng.sample(MECHANISMS, rng.randrange(1, 4))))
        for _ in range(rng.randrange(1, 8)):
            choice = rng.random()
            try:
                if auth.raw_token_mode and choice < 0.7:
                    reply, close = auth.on_raw_token(_random_token(rng))
                    assert isinstance(reply, bytes) and not close
                elif choice < 0.35:
                    step(auth, handshake(rng.choice(mechanisms), rng.choice([0, 1])))
                elif choice < 0.9:
                    step(auth, authenticate(_random_token(rng), rng.choice([0, 1, 2])))
                else:
                    auth.check_allowed(rng.choice([0, 1, 3, 18, 19, 50, 51]))
            except SaslStateError:
                pass
            assert not auth.complete and auth.principal is None
