"""SASL before anything else on SASL_PLAINTEXT / SASL_SSL listeners (Kafka's
SaslServerAuthenticator in front of KafkaApis).

Until a connection has authenticated, it may send ApiVersions, SaslHandshake and
SaslAuthenticate only; anything else closes it with a log line, as Kafka does. After a
SaslHandshake v0 the client sends raw SASL tokens without Kafka headers (kafka-python's
old path), which go straight to the authenticator. A failed authentication is answered,
then the connection closes. On other listeners, and once authenticated, SaslHandshake and
SaslAuthenticate go to their handlers, which answer ILLEGAL_SASL_STATE as Kafka does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from wherry.protocol.primitives import INT32 as _SIZE
from wherry.server.network import CloseAfterResponse, CloseConnection, ConnectionInfo

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.security.scram_store import ScramCredentialCache
    from wherry.server.listener_security import BrokerSecurity
    from wherry.server.sasl_authenticator import SaslAuthenticator

SASL_HANDSHAKE_KEY = 17
API_VERSIONS_KEY = 18
SASL_AUTHENTICATE_KEY = 36
SASL_KEYS = (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY)
_ATTR = "sasl"


class SaslGate:
    def __init__(
        self, security: BrokerSecurity, scram: Callable[[], ScramCredentialCache]
    ) -> None:
        """`scram` gives the SCRAM credentials when a SASL listener first needs them."""
        self.security = security
        self.scram = scram

    def authenticator(self, conn: ConnectionInfo) -> SaslAuthenticator | None:
        """The connection's authenticator on a SASL listener (made on its first frame)."""
        found = conn.attrs.get(_ATTR)
        if found is not None:
            return cast("SaslAuthenticator", found)
        listener = self.security.listeners.get(conn.listener)
        if listener is None or not listener.uses_sasl:
            return None
        # The SASL mechanisms are imported with the first connection to a SASL listener.
        from wherry.server.sasl_authenticator import SaslAuthenticator

        made = SaslAuthenticator(
            listener=conn.listener,
            enabled_mechanisms=listener.sasl_mechanisms,
            plain_users=listener.plain_users,
            scram=self.scram(),
        )
        conn.attrs[_ATTR] = made
        return made

    def raw_token(self, conn: ConnectionInfo, sasl: SaslAuthenticator, frame: memoryview) -> bytes:
        from wherry.server.sasl_authenticator import SaslStateError

        try:
            reply, close = sasl.on_raw_token(bytes(frame))
        except SaslStateError as e:
            raise CloseConnection(f"SASL authentication failed: {e}") from e
        out = _SIZE.pack(len(reply)) + reply
        self._after(conn, sasl)
        if close:
            raise CloseAfterResponse("SASL authentication failed", out)
        return out

    @staticmethod
    def in_exchange(sasl: SaslAuthenticator | None, req: Request) -> bool:
        """Is this request part of the connection's SASL exchange (the gate answers it)?"""
        return sasl is not None and not sasl.complete and req.api_key in SASL_KEYS

    def sasl_request(self, conn: ConnectionInfo, sasl: SaslAuthenticator, req: Request) -> bytes:
        """The answer to a SaslHandshake or SaslAuthenticate of the exchange."""
        from wherry.server.sasl_authenticator import SaslStateError

        try:
            body, close = sasl.on_request(req)
        except SaslStateError as e:
            raise CloseConnection(str(e)) from e
        out = _encode(req, body)
        self._after(conn, sasl)
        if close:
            from kio.schema.errors import ErrorCode  # a failed login's: not imported by a start

            raise CloseAfterResponse(
                f"SASL {'handshake' if req.api_key == SASL_HANDSHAKE_KEY else 'authentication'}"
                f" failed: {body.get('error_message') or ErrorCode(body['error_code']).name}",
                out,
            )
        return out

    @staticmethod
    def check_authenticated(sasl: SaslAuthenticator | None, req: Request) -> None:
        """Refuse (close) anything but ApiVersions before authentication."""
        if sasl is None:
            return
        from wherry.server.sasl_authenticator import SaslStateError

        try:
            sasl.check_allowed(req.api_key)
        except SaslStateError as e:
            raise CloseConnection(str(e)) from e

    @staticmethod
    def _after(conn: ConnectionInfo, sasl: SaslAuthenticator) -> None:
        if sasl.complete and sasl.principal is not None:
            conn.principal = sasl.principal


def _encode(req: Request, body: Any) -> bytes:
    from wherry.protocol.codec import encode_response  # imported after the bind (Broker.start)

    return encode_response(req.api_key, req.api_version, req.correlation_id, body)
