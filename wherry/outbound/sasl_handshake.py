"""The client side of Kafka's SASL exchange on a fresh connection: SaslHandshake v1 naming
the mechanism, then SaslAuthenticate v2 rounds until the mechanism is complete (PLAIN: one;
SCRAM: two, the server's signature checked). Any refusal raises AuthenticationError, and the
caller drops the connection."""

from __future__ import annotations

from typing import Protocol

from kio.schema.errors import ErrorCode

from wherry.outbound.security import AuthenticationError, ClientSecurity
from wherry.protocol.codec import ResponseDecodeError, decode_response, encode_request
from wherry.security.sasl_client import client_for
from wherry.security.sasl_mechanism import SaslClientError

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
_HANDSHAKE_VERSION = 1
_AUTHENTICATE_VERSION = 2
_MAX_ROUNDS = 8


class _Transport(Protocol):
    host: str
    port: int

    async def request(self, frame: bytes) -> bytes | memoryview: ...


async def authenticate(
    conn: _Transport, security: ClientSecurity, *, client_id: str = "wherry-broker"
) -> None:
    mechanism = security.sasl_mechanism
    assert mechanism is not None
    peer = f"{conn.host}:{conn.port}"
    correlation_id = 0

    async def call(api_key: int, version: int, body: dict[str, object]) -> object:
        nonlocal correlation_id
        correlation_id += 1
        frame = encode_request(api_key, version, correlation_id, body, client_id=client_id)
        try:
            _, response = decode_response(
                api_key, version, await conn.request(frame), expect_correlation_id=correlation_id
            )
        except ResponseDecodeError as e:
            raise AuthenticationError(f"SASL exchange with {peer}: {e}") from e
        return response

    handshake = await call(SASL_HANDSHAKE_KEY, _HANDSHAKE_VERSION, {"mechanism": mechanism})
    code = getattr(handshake, "error_code", None)
    if code != ErrorCode.none:
        enabled = ", ".join(getattr(handshake, "mechanisms", ()) or ())
        raise AuthenticationError(
            f"{peer} refused SASL mechanism {mechanism} (error {code}; "
            f"enabled there: {enabled or 'none'})"
        )
    client = client_for(mechanism, security.username, security.password)
    token: bytes | None = client.initial_response()
    for _ in range(_MAX_ROUNDS):
        if token is None:
            return
        answer = await call(SASL_AUTHENTICATE_KEY, _AUTHENTICATE_VERSION, {"auth_bytes": token})
        code = getattr(answer, "error_code", None)
        if code != ErrorCode.none:
            raise AuthenticationError(
                f"{peer} refused our SASL {mechanism} credentials for "
                f"{security.username!r}: {getattr(answer, 'error_message', None) or code}"
            )
        try:
            token = client.evaluate(bytes(getattr(answer, "auth_bytes", b"")))
        except (SaslClientError, ValueError) as e:
            raise AuthenticationError(f"SASL {mechanism} with {peer}: {e}") from e
        if client.complete:
            return
    raise AuthenticationError(f"SASL {mechanism} with {peer} did not complete")
