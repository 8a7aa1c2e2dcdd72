"""SCRAM-SHA-256/512: RFC 7677's test vector, Kafka's credential strings, the server's checks
and every failure path (unknown user and wrong password alike)."""

from __future__ import annotations

import base64

import pytest

from wherry.security.sasl_client import ScramClient
from wherry.security.sasl_mechanism import SaslAuthenticationError, SaslClientError
from wherry.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramServer,
    escape_username,
    failure_message,
    fake_credential,
    format_credential,
    generate_credential,
    mechanism_by_code,
    mechanism_by_name,
    parse_credential,
    unescape_username,
)

# RFC 7677 §3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> ScramCredential:
    return generate_credential(SCRAM_SHA_256, "pencil", salt=RFC_SALT, iterations=4096)


def test_rfc7677_client() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=lambda: RFC_CLIENT_NONCE)
    assert client.initial_response() == RFC_CLIENT_FIRST
    assert client.evaluate(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.evaluate(RFC_SERVER_FINAL) is None
    assert client.complete


def test_rfc7677_server() -> None:
    server = ScramServer(SCRAM_SHA_256, {"user": rfc_credential()}.get,
                         nonce=lambda: RFC_SERVER_NONCE)
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.authorization_id == "user"


def test_client_refuses_a_bad_server_signature() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=lambda: RFC_CLIENT_NONCE)
    client.initial_response()
    client.evaluate(RFC_SERVER_FIRST)
    with pytest.raises(SaslClientError, match="server signature"):
        client.evaluate(b"v=" + base64.b64encode(bytes(32)))
    assert not client.complete


@pytest.mark.parametrize("challenge", [
    b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",   # nonce not extending ours
    b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",  # no server part
    b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1000",  # too few iterations
    b"r=rOprNGfwEbeRWgbNEkqOxyz,s=!!!,i=4096",
    b"\xff\xfe",
    b"garbage",
])
def test_client_refuses_bad_server_first(challenge: bytes) -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=lambda: RFC_CLIENT_NONCE)
    client.initial_response()
    with pytest.raises(SaslClientError):
        client.evaluate(challenge)


def test_credential_string_round_trip() -> None:
    cred = rfc_credential()
    text = format_credential(cred)
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=")
    assert text.endswith(",iterations=4096")
    assert parse_credential(text) == cred
    for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
        c = generate_credential(mech, "secret", iterations=8192)
        assert len(c.stored_key) == len(c.server_key) == mech.digest_size
        assert parse_credential(format_credential(c)) == c


@pytest.mark.parametrize("text", [
    "", "salt=AAAA", "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=x",
    "salt=%%%,stored_key=AAAA,server_key=AAAA,iterations=4096", "nonsense",
])
def test_bad_credential_strings(text: str) -> None:
    with pytest.raises(ValueError, match="invalid SCRAM credential"):
        parse_credential(text)


def test_mechanism_codes() -> None:
    assert mechanism_by_code(1) is SCRAM_SHA_256 and mechanism_by_code(2) is SCRAM_SHA_512
    assert mechanism_by_code(0) is None and mechanism_by_code(3) is None
    assert mechanism_by_name("SCRAM-SHA-512") is SCRAM_SHA_512
    assert mechanism_by_name("SCRAM-SHA-1") is None


def test_username_escaping() -> None:
    assert escape_username("a,b=c") == "a=2Cb=3Dc"
    assert unescape_username("a=2Cb=3Dc") == "a,b=c"
    for bad in ("a=", "a=2", "a=41"):
        with pytest.raises(ValueError, match="Invalid username"):
            unescape_username(bad)


def test_fake_credentials_are_stable_per_user() -> None:
    assert fake_credential(SCRAM_SHA_256, "x") == fake_credential(SCRAM_SHA_256, "x")
    assert fake_credential(SCRAM_SHA_256, "x") != fake_credential(SCRAM_SHA_256, "y")
    assert len(fake_credential(SCRAM_SHA_512, "x").stored_key) == 64


# --------------------------------------------------------------------------------------------
# Client against server


def exchange(mech: str, creds: dict[str, ScramCredential], username: str, password: str
             ) -> tuple[list[str], str | None]:
    """Run a client against a server: the steps taken and the failure message (None: ok)."""
    server = ScramServer(mechanism_by_name(mech), creds.get)  # type: ignore[arg-type]
    client = ScramClient(mech, username, password)
    steps: list[str] = []
    token: bytes | None = client.initial_response()
    while token is not None:
        try:
            challenge = server.evaluate(token)
        except SaslAuthenticationError as e:
            steps.append("fail")
            return steps, e.message
        steps.append("server")
        token = client.evaluate(challenge)
    assert server.complete and client.complete
    assert server.authorization_id == username
    return steps, None


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_exchange_and_failures_look_alike(mech: str) -> None:
    m = mechanism_by_name(mech)
    assert m is not None
    creds = {"alice": generate_credential(m, "alice-secret"),
             "a,b=c": generate_credential(m, "odd", iterations=8192)}
    assert exchange(mech, creds, "alice", "alice-secret") == (["server", "server"], None)
    assert exchange(mech, creds, "a,b=c", "odd") == (["server", "server"], None)
    wrong = exchange(mech, creds, "alice", "nope")
    unknown = exchange(mech, creds, "mallory", "nope")
    assert wrong == unknown == (["server", "fail"], failure_message(m))
    assert failure_message(m) == ("Authentication failed during authentication due to invalid "
                                  f"credentials with SASL mechanism {mech}")


def test_unknown_user_first_answer_is_stable() -> None:
    """Repeated attempts for one unknown user get the same salt and iterations."""
    def salt_of() -> bytes:
        server = ScramServer(SCRAM_SHA_256, lambda _user: None)
        return server.evaluate(b"n,,n=ghost,r=abc").split(b",")[1]
    assert salt_of() == salt_of()


def started(creds: dict[str, ScramCredential] | None = None) -> tuple[ScramServer, bytes]:
    server = ScramServer(SCRAM_SHA_256, (creds or {"user": rfc_credential()}).get,
                         nonce=lambda: RFC_SERVER_NONCE)
    return server, server.evaluate(RFC_CLIENT_FIRST)


@pytest.mark.parametrize("final", [
    RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=dHzc"),               # tampered proof
    RFC_CLIENT_FINAL.replace(b"r=rOpr", b"r=xOpr"),               # tampered nonce
    RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),               # other channel binding
    RFC_CLIENT_FINAL.split(b",p=")[0],                            # no proof
    RFC_CLIENT_FINAL.split(b",p=")[0] + b",p=AAAA",               # short proof
    RFC_CLIENT_FINAL.split(b",p=")[0] + b",p=%%%%",               # not base64
    b"\xff\x00garbage", b"",
])
def test_server_refuses_tampered_final(final: bytes) -> None:
    server, _ = started()
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate(final)
    assert e.value.message == failure_message(SCRAM_SHA_256)
    assert not server.complete
    with pytest.raises(SaslAuthenticationError):  # and it stays failed
        server.evaluate(RFC_CLIENT_FINAL)


@pytest.mark.parametrize("first", [
    b"y,,n=user,r=abc",           # channel binding flags other than n
    b"p=tls-unique,,n=user,r=abc",
    b"n,,m=ext,n=user,r=abc",     # reserved mandatory extension
    b"n,,n=,r=abc",               # empty user
    b"n,,n=us=er,r=abc",          # bad escape
    b"n,,n=user,r=",              # empty nonce
    b"n,,n=user,r=a b",           # nonce not printable
    b"n,a=other,n=user,r=abc",    # authzid differs from the user
    b"n,,n=user,r=abc,tokenauth=true",  # delegation tokens: not supported
    b"n,,n=user,r=abc,foo=bar",   # unknown extension
    b"\xff\xfe\xfd", b"", b"n,,",
])
def test_server_refuses_bad_first(first: bytes) -> None:
    server = ScramServer(SCRAM_SHA_256, {"user": rfc_credential()}.get)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(first)
    assert not server.complete


def test_authzid_equal_to_user_is_accepted() -> None:
    server = ScramServer(SCRAM_SHA_256, {"user": rfc_credential()}.get,
                         nonce=lambda: RFC_SERVER_NONCE)
    first = server.evaluate(b"n,a=user,n=user,r=" + RFC_CLIENT_NONCE.encode())
    assert first == RFC_SERVER_FIRST
    # The channel binding must be the gs2 header actually sent, "n,a=user,".
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(RFC_CLIENT_FINAL)


def test_stored_credential_below_minimum_iterations_fails() -> None:
    weak = generate_credential(SCRAM_SHA_256, "pencil", salt=RFC_SALT, iterations=1024)
    server = ScramServer(SCRAM_SHA_256, {"user": weak}.get)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(RFC_CLIENT_FIRST)
