"""JAAS config strings, a listener's SASL settings, and SASL/PLAIN on both sides."""

from __future__ import annotations

import pytest

from wherry.security.jaas import (
    JaasEntry,
    client_credentials,
    listener_jaas,
    parse_jaas_config,
    parse_jaas_entries,
    plain_users,
)
from wherry.security.plain import INVALID_CREDENTIALS, PlainServer
from wherry.security.sasl_client import PlainClient
from wherry.security.sasl_config import listener_sasl
from wherry.security.sasl_mechanism import SaslAuthenticationError, SaslClientError

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" '
              'user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="admin" password="admin-secret";')


def test_parse_plain_and_scram() -> None:
    entry = parse_jaas_config(PLAIN_JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert plain_users(entry) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert client_credentials(entry) == ("admin", "admin-secret")
    scram = parse_jaas_config(SCRAM_JAAS)
    assert scram.options == {"username": "admin", "password": "admin-secret"}
    assert plain_users(scram) == {}


def test_quoting_escapes_flags_and_comments() -> None:
    text = ('  x.y.Module   OPTIONAL  /* c */ a=bare b="with \\"quote\\" and \\\\ ; = ,"\n'
            '  c = "line\\nbreak" // trailing comment\n ;')
    entry = parse_jaas_config(text)
    assert entry == JaasEntry("x.y.Module", "optional",
                              {"a": "bare", "b": 'with "quote" and \\ ; = ,',
                               "c": "line\nbreak"})
    two = parse_jaas_entries("a.B required; c.D sufficient k=v;")
    assert [e.flag for e in two] == ["required", "sufficient"]


@pytest.mark.parametrize(("text", "message"), [
    ("", "contains 0 login modules"),
    ("a.B required; c.D required;", "contains 2 login modules"),
    ("a.B", "control flag not specified"),
    ("a.B mandatory;", "invalid login module control flag"),
    ("a.B required k=v", "not terminated by ';'"),
    ('a.B required k="unterminated;', "unterminated quoted value"),
    ("a.B required k;", "has no '=' and value"),
    ("a.B required k=;", "has no value"),
    ("a.B required =v;", "expected an option name"),
    ('"a.B" required;', "expected a login module class"),
    ("a.B required k=v; #", "unexpected character"),
    ("a.B required /* open", "unterminated comment"),
])
def test_malformed(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_jaas_config(text)


def test_listener_lookup_prefers_listener_and_mechanism() -> None:
    props = {
        "sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    entry = listener_jaas(props, "SASL_PLAINTEXT", "PLAIN")
    assert entry is not None and "user_alice" in entry.options
    other = listener_jaas(props, "SASL_PLAINTEXT", "SCRAM-SHA-256")
    assert other is not None and other.login_module.endswith("ScramLoginModule")
    fallback = listener_jaas(props, "INTERNAL", "PLAIN")
    assert fallback is not None and fallback.login_module.endswith("ScramLoginModule")
    assert listener_jaas({}, "X", "PLAIN") is None


def test_listener_sasl_settings() -> None:
    props = {"sasl.enabled.mechanisms": "PLAIN, SCRAM-SHA-512",
             "listener.name.external.plain.sasl.jaas.config": PLAIN_JAAS,
             "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    ext = listener_sasl(props, "EXTERNAL")
    assert ext.enabled_mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert ext.plain_users == {"admin": "admin-secret", "alice": "alice-secret"}
    assert listener_sasl(props, "INTERNAL").enabled_mechanisms == ("SCRAM-SHA-256",)
    with pytest.raises(ValueError, match=r"mechanisms.*unsupported.*GSSAPI"):
        listener_sasl({}, "EXTERNAL")  # Kafka's default, GSSAPI
    with pytest.raises(ValueError, match="no JAAS config"):
        listener_sasl({"sasl.enabled.mechanisms": "PLAIN"}, "EXTERNAL")


# --------------------------------------------------------------------------------------------
# PLAIN


USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def plain(token: bytes) -> tuple[bytes | None, str | None, str | None]:
    server = PlainServer(USERS)
    try:
        reply = server.evaluate(token)
    except SaslAuthenticationError as e:
        assert not server.complete and server.authorization_id is None
        return None, None, e.message
    assert server.complete
    return reply, server.authorization_id, None


def test_plain_client_against_server() -> None:
    client = PlainClient("alice", "alice-secret")
    server = PlainServer(USERS)
    reply = server.evaluate(client.initial_response())
    assert reply == b"" and server.complete and server.authorization_id == "alice"
    assert client.evaluate(reply) is None and client.complete
    with pytest.raises(SaslClientError):
        client.evaluate(b"")


def test_plain_accepts_authzid_equal_to_user() -> None:
    assert plain(b"alice\0alice\0alice-secret") == (b"", "alice", None)


@pytest.mark.parametrize(("token", "message"), [
    (b"\0alice\0wrong", INVALID_CREDENTIALS),
    (b"\0mallory\0alice-secret", INVALID_CREDENTIALS),
    (b"\0ALICE\0alice-secret", INVALID_CREDENTIALS),
    (b"admin\0alice\0alice-secret",
     "Authentication failed: Client requested an authorization id that is different from "
     "username"),
    (b"\0\0pw", "Authentication failed: username not specified"),
    (b"\0alice\0", "Authentication failed: password not specified"),
    (b"alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    (b"\0a\0b\0c", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    (b"\0alice\0\xff", "Invalid SASL/PLAIN response: not UTF-8"),
])
def test_plain_failures(token: bytes, message: str) -> None:
    assert plain(token) == (None, None, message)


def test_plain_is_single_use() -> None:
    server = PlainServer(USERS)
    server.evaluate(b"\0alice\0alice-secret")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(b"\0alice\0alice-secret")
