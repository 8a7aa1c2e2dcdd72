"""Client-side SASL mechanisms, for the connections a broker opens to other brokers
(`security.inter.broker.protocol` SASL_*): PLAIN and SCRAM-SHA-256/512.

A client gives its `initial_response()`, then `evaluate(challenge)` for each server token
until `complete`; `evaluate` returns the next token to send, or None when there is nothing
more to send. The SCRAM client checks the server's signature: a server that does not know the
credential fails the exchange (SaslClientError).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Callable
from typing import Protocol

from wherry.security.plain import PLAIN
from wherry.security.sasl_mechanism import SaslClientError
from wherry.security.scram import (
    ScramExchange,
    ScramMechanism,
    client_proof,
    escape_username,
    mechanism_by_name,
    random_nonce,
    salted_password,
    server_key,
    server_signature,
)

_SERVER_FIRST = re.compile(r"r=(?P<nonce>[^,]+),s=(?P<salt>[^,]+),i=(?P<iterations>[0-9]+)"
                           r"(?:,[^,]*)*")
_SERVER_FINAL = re.compile(r"(?:v=(?P<verifier>[^,]+)|e=(?P<error>[^,]*))(?:,[^,]*)*")
MAX_ITERATIONS = 16384  # Kafka's maximum; a server asking more is refused


class SaslClientMechanism(Protocol):
    @property
    def mechanism(self) -> str: ...

    @property
    def complete(self) -> bool: ...

    def initial_response(self) -> bytes: ...

    def evaluate(self, challenge: bytes) -> bytes | None: ...


class PlainClient:
    """PLAIN: one token, `\\0user\\0password`; done once the server accepts it."""

    mechanism = PLAIN

    def __init__(self, username: str, password: str) -> None:
        self._username = username
        self._password = password
        self._sent = False
        self._complete = False

    @property
    def complete(self) -> bool:
        return self._complete

    def initial_response(self) -> bytes:
        if self._sent:
            raise SaslClientError("PLAIN initial response already sent")
        self._sent = True
        return f"\0{self._username}\0{self._password}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if not self._sent or self._complete:
            raise SaslClientError("Unexpected PLAIN challenge")
        if challenge:
            raise SaslClientError("Unexpected non-empty PLAIN challenge")
        self._complete = True
        return None


class ScramClient(ScramExchange):
    """SCRAM-SHA-256/512 (RFC 5802), without channel binding (gs2 header `n,,`)."""

    def __init__(self, mechanism: str, username: str, password: str, *,
                 nonce: Callable[[], str] = random_nonce) -> None:
        mech = mechanism_by_name(mechanism)
        if mech is None:
            raise ValueError(f"Unsupported SCRAM mechanism {mechanism}")
        self._mech: ScramMechanism = mech
        self._username = username
        self._password = password
        self._nonce = nonce
        self._state = "initial"  # initial → first_sent → final_sent → complete | failed
        self._client_first_bare = ""
        self._client_nonce = ""
        self._expected_signature = b""

    def initial_response(self) -> bytes:
        if self._state != "initial":
            raise SaslClientError("SCRAM initial response already sent")
        self._client_nonce = self._nonce()
        self._client_first_bare = f"n={escape_username(self._username)},r={self._client_nonce}"
        self._state = "first_sent"
        return ("n,," + self._client_first_bare).encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes | None:
        state, self._state = self._state, "failed"
        try:
            if state == "first_sent":
                reply: bytes | None = self._server_first(challenge)
                self._state = "final_sent"
            elif state == "final_sent":
                self._server_final(challenge)
                reply = None
                self._state = "complete"
            else:
                raise SaslClientError(f"Unexpected SCRAM challenge in state {state}")
        except SaslClientError:
            raise
        except (UnicodeDecodeError, binascii.Error, ValueError) as e:
            raise SaslClientError(f"Invalid SCRAM server message: {e}") from e
        return reply

    def _server_first(self, challenge: bytes) -> bytes:
        text = challenge.decode("utf-8")
        m = _SERVER_FIRST.fullmatch(text)
        if m is None:
            raise SaslClientError(f"Invalid SCRAM server first message: {text!r}")
        nonce = m["nonce"]
        if not nonce.startswith(self._client_nonce) or len(nonce) == len(self._client_nonce):
            raise SaslClientError("Invalid server nonce: does not start with the client nonce")
        iterations = int(m["iterations"])
        if not self._mech.min_iterations <= iterations <= MAX_ITERATIONS:
            raise SaslClientError(f"Requested iterations {iterations} out of range")
        salt = base64.b64decode(m["salt"], validate=True)
        salted = salted_password(self._mech, self._password, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        proof = client_proof(self._mech, salted, auth_message)
        self._expected_signature = server_signature(
            self._mech, server_key(self._mech, salted), auth_message
        )
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode()

    def _server_final(self, challenge: bytes) -> None:
        text = challenge.decode("utf-8")
        m = _SERVER_FINAL.fullmatch(text)
        if m is None:
            raise SaslClientError(f"Invalid SCRAM server final message: {text!r}")
        if m["error"] is not None:
            raise SaslClientError(f"SCRAM authentication failed: {m['error']}")
        verifier = base64.b64decode(m["verifier"], validate=True)
        if not hmac.compare_digest(verifier, self._expected_signature):
            raise SaslClientError("Invalid server signature in SCRAM server final message")


def client_for(mechanism: str, username: str, password: str) -> SaslClientMechanism:
    """The client of a mechanism name (`sasl.mechanism.inter.broker.protocol`)."""
    if mechanism == PLAIN:
        return PlainClient(username, password)
    if mechanism_by_name(mechanism) is not None:
        return ScramClient(mechanism, username, password)
    raise ValueError(f"Unsupported SASL mechanism {mechanism}")
