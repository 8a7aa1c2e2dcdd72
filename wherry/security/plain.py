"""SASL/PLAIN on the server (RFC 4616, Kafka's PlainSaslServer): `authzid NUL user NUL pass`
checked against the users of the listener's JAAS config (`user_<name>="<password>"`).

An unknown user and a wrong password get the same message, and the same work: the password is
compared (through fixed-length digests, in constant time) against a dummy for an unknown user.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

from wherry.security.sasl_mechanism import SaslAuthenticationError

PLAIN = "PLAIN"
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"
_DUMMY_PASSWORD = secrets.token_bytes(32)  # what an unknown user's password is compared with


def _digest(password: bytes) -> bytes:
    return hashlib.sha256(password).digest()


class PlainServer:
    """One PLAIN exchange: a single client token, an empty reply on success."""

    mechanism = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._complete = False
        self._failed = False
        self._authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str | None:
        return self._authorization_id

    def evaluate(self, token: bytes) -> bytes:
        if self._complete or self._failed:
            self._failed = True
            raise SaslAuthenticationError("Authentication failed: PLAIN exchange already done")
        self._failed = True  # until proven otherwise
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from e
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}"
            )
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        known = expected is not None
        expected_bytes = expected.encode("utf-8") if expected is not None else _DUMMY_PASSWORD
        matches = hmac.compare_digest(_digest(password.encode("utf-8")), _digest(expected_bytes))
        if not (matches and known):
            raise SaslAuthenticationError(INVALID_CREDENTIALS)
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self._failed = False
        self._complete = True
        self._authorization_id = username
        return b""
