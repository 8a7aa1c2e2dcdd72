"""Any SASL token, however malformed, fails the exchange with a SaslAuthenticationError (the
client's SASL_AUTHENTICATION_FAILED answer), never with another exception; and a token only
authenticates when it carries the right password."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from wherry.security.plain import PlainServer
from wherry.security.sasl_mechanism import SaslAuthenticationError
from wherry.security.scram import SCRAM_SHA_256, ScramServer, generate_credential

CREDENTIAL = generate_credential(SCRAM_SHA_256, "pencil", iterations=4096)

_PIECES = st.sampled_from(
    [b"n", b",", b"=", b"\0", b"n=user", b"r=", b"a=", b"c=biws", b"p=", b"s=", b"i=",
     b"user", b"pencil", b"\xff", b"=2C", b"=3D", b"m=", b"tokenauth=true", b"AAAA"]
)
TOKENS = st.one_of(
    st.binary(max_size=300),
    st.lists(_PIECES | st.binary(max_size=8), max_size=20).map(b"".join),
)


@settings(max_examples=400, deadline=None)
@given(TOKENS)
def test_plain_tokens(token: bytes) -> None:
    server = PlainServer({"user": "pencil"})
    try:
        reply = server.evaluate(token)
    except SaslAuthenticationError:
        assert not server.complete
        return
    assert reply == b"" and server.complete
    assert token.split(b"\0")[1:] == [b"user", b"pencil"]


@settings(max_examples=400, deadline=None)
@given(TOKENS, TOKENS)
def test_scram_tokens(first: bytes, final: bytes) -> None:
    server = ScramServer(SCRAM_SHA_256, {"user": CREDENTIAL}.get)
    try:
        server.evaluate(first)
    except SaslAuthenticationError:
        assert not server.complete
        return
    try:
        server.evaluate(final)
    except SaslAuthenticationError:
        assert not server.complete
        return
    raise AssertionError(f"a random client-final message authenticated: {final!r}")
