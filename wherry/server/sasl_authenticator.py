"""The server side of SASL on one connection (Kafka's SaslServerAuthenticator), I/O-free.

The broker creates one `SaslAuthenticator` per connection accepted on a SASL_PLAINTEXT or
SASL_SSL listener and, until `complete`:

* answers ApiVersions itself (always allowed);
* hands SaslHandshake (17) and SaslAuthenticate (36) requests to `on_request`, sends the
  response mapping it returns (encoded for the request's version) and closes the connection
  after sending when told to;
* after a SaslHandshake v0, reads the next frames as raw SASL tokens (no Kafka header,
  `raw_token_mode`) and hands them to `on_raw_token`, sending its reply as a size-prefixed
  frame;
* closes the connection on `SaslStateError` (any other API before authentication, a request
  out of order, a failed raw-token exchange), with a log line.

Once `complete`, `principal` is `User:<name>`; later SaslHandshake / SaslAuthenticate requests
get ILLEGAL_SASL_STATE (no re-authentication, KIP-368), as Kafka's KafkaApis answers them.
`non_sasl_response` is that answer, also what a PLAINTEXT or SSL listener gives them.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from wherry.protocol.codec import Request
from wherry.security.plain import PLAIN, PlainServer
from wherry.security.principal import KafkaPrincipal, user
from wherry.security.sasl_config import SUPPORTED_MECHANISMS
from wherry.security.sasl_mechanism import SaslAuthenticationError, SaslServerMechanism
from wherry.security.scram import ScramServer, mechanism_by_name
from wherry.security.scram_store import ScramCredentialCache

log = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY = 17
API_VERSIONS_KEY = 18
SASL_AUTHENTICATE_KEY = 36
AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"

SaslStep = tuple[Mapping[str, Any], bool]
"""A response body (a version-neutral mapping) and whether to close after sending it."""


class SaslStateError(Exception):
    """The connection must be closed without a response: a request that has no place in the
    SASL exchange at this point (Kafka's InvalidRequestException / IllegalSaslStateException),
    or a failed exchange in raw-token mode."""


class _State(enum.Enum):
    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


def _api_name(api_key: int) -> str:
    name = api_key_map.get(api_key)
    return name.upper() if isinstance(name, str) else str(api_key)


def non_sasl_response(req: Request) -> Mapping[str, Any]:
    """ILLEGAL_SASL_STATE for SaslHandshake / SaslAuthenticate where no SASL exchange is
    expected: on a PLAINTEXT/SSL listener, or after authentication (Kafka's KafkaApis)."""
    if req.api_key == SASL_HANDSHAKE_KEY:
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()}
    if req.api_key == SASL_AUTHENTICATE_KEY:
        return {"error_code": ErrorCode.illegal_sasl_state,
                "error_message": AFTER_AUTHENTICATION, "auth_bytes": b""}
    raise ValueError(f"API key {req.api_key} is not a SASL request")


class SaslAuthenticator:
    def __init__(
        self,
        *,
        listener: str,
        enabled_mechanisms: Sequence[str],
        plain_users: Mapping[str, str],
        scram: ScramCredentialCache,
    ) -> None:
        unsupported = [m for m in enabled_mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported:
            raise ValueError(f"Unsupported SASL mechanism(s) {unsupported} on {listener}")
        self.listener = listener
        self.enabled_mechanisms: tuple[str, ...] = tuple(enabled_mechanisms)
        self._plain_users = plain_users
        self._scram = scram
        self._state = _State.HANDSHAKE
        self._server: SaslServerMechanism | None = None
        self.mechanism: str | None = None
        self.complete = False
        self.principal: KafkaPrincipal | None = None
        self.raw_token_mode = False

    # --- what the broker asks ----------------------------------------------------------------
    def check_allowed(self, api_key: int) -> None:
        """Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate may be
        sent; SaslStateError for anything else (the broker closes the connection)."""
        if self.complete or api_key in (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY,
                                        SASL_AUTHENTICATE_KEY):
            return
        raise SaslStateError(
            f"Unexpected Kafka request of type {_api_name(api_key)} during SASL handshake."
        )

    def on_request(self, req: Request) -> SaslStep:
        """The answer to a SaslHandshake or SaslAuthenticate request."""
        self.check_allowed(req.api_key)
        if self._state is _State.FAILED:
            raise SaslStateError("SASL request on a connection whose authentication failed")
        if self.raw_token_mode:
            raise SaslStateError(
                f"Unexpected Kafka request of type {_api_name(req.api_key)}: raw SASL tokens "
                "expected after SaslHandshake v0"
            )
        if req.api_key == SASL_HANDSHAKE_KEY:
            return self._handshake(req)
        if req.api_key == SASL_AUTHENTICATE_KEY:
            return self._authenticate(req)
        raise SaslStateError(f"{_api_name(req.api_key)} is not a SASL request")

    def on_raw_token(self, token: bytes) -> tuple[bytes, bool]:
        """The reply token to a raw SASL token (after SaslHandshake v0), to send size-prefixed;
        a failed exchange raises SaslStateError (Kafka closes without an answer)."""
        if not self.raw_token_mode or self._state is not _State.AUTHENTICATE:
            raise SaslStateError(f"Unexpected raw SASL token in state {self._state.value}")
        try:
            reply = self._evaluate(bytes(token))
        except SaslAuthenticationError as e:
            raise SaslStateError(f"SASL authentication failed: {e.message}") from e
        return reply, False

    # --- steps ---------------------------------------------------------------------------------
    def _handshake(self, req: Request) -> SaslStep:
        if self._state is _State.COMPLETE:
            return non_sasl_response(req), False
        if self._state is not _State.HANDSHAKE:
            self._state = _State.FAILED
            return {"error_code": ErrorCode.illegal_sasl_state,
                    "mechanisms": self.enabled_mechanisms}, True
        mechanism = str(getattr(req.body, "mechanism", ""))
        if mechanism not in self.enabled_mechanisms:
            log.debug("SASL mechanism %r requested on %s is not enabled", mechanism, self.listener)
            self._state = _State.FAILED
            return {"error_code": ErrorCode.unsupported_sasl_mechanism,
                    "mechanisms": self.enabled_mechanisms}, True
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self._state = _State.AUTHENTICATE
        self.raw_token_mode = req.api_version == 0
        return {"error_code": ErrorCode.none, "mechanisms": self.enabled_mechanisms}, False

    def _authenticate(self, req: Request) -> SaslStep:
        if self._state is _State.COMPLETE:
            return non_sasl_response(req), False
        if self._state is not _State.AUTHENTICATE:
            self._state = _State.FAILED
            return {"error_code": ErrorCode.illegal_sasl_state,
                    "error_message": "Unexpected SaslAuthenticate request before SaslHandshake",
                    "auth_bytes": b""}, True
        token = bytes(getattr(req.body, "auth_bytes", b"") or b"")
        try:
            reply = self._evaluate(token)
        except SaslAuthenticationError as e:
            return {"error_code": ErrorCode.sasl_authentication_failed,
                    "error_message": e.message, "auth_bytes": b""}, True
        return {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": reply,
                "session_lifetime": 0}, False

    def _evaluate(self, token: bytes) -> bytes:
        server = self._server
        assert server is not None
        try:
            reply = server.evaluate(token)
        except SaslAuthenticationError:
            self._state = _State.FAILED
            raise
        except Exception as e:  # a mechanism bug must not crash the connection handler
            self._state = _State.FAILED
            log.exception("SASL %s server failed on %s", self.mechanism, self.listener)
            raise SaslAuthenticationError(
                f"Authentication failed during authentication due to invalid credentials with "
                f"SASL mechanism {self.mechanism}"
            ) from e
        if server.complete:
            name = server.authorization_id
            assert name is not None
            self._state = _State.COMPLETE
            self.complete = True
            self.principal = user(name)
            self.raw_token_mode = False
        return reply

    def _new_server(self, mechanism: str) -> SaslServerMechanism:
        if mechanism == PLAIN:
            return PlainServer(self._plain_users)
        scram = mechanism_by_name(mechanism)
        assert scram is not None  # enabled mechanisms are checked in __init__
        return ScramServer(scram, self._scram.lookup(mechanism))
