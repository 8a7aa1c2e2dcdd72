"""What every server-side SASL mechanism is (Kafka's javax.security.sasl.SaslServer as the
broker uses it) and how it fails."""

from __future__ import annotations

from typing import Protocol


class SaslAuthenticationError(Exception):
    """Authentication failed; `message` is what the client is told (SaslAuthenticate's
    error_message). It never says whether the user exists."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SaslClientError(Exception):
    """A client-side mechanism got a challenge it cannot accept (a server that failed to prove
    it knows the credential, a malformed message, a server error)."""


class SaslServerMechanism(Protocol):
    """One authentication exchange on one connection."""

    @property
    def mechanism(self) -> str: ...

    @property
    def complete(self) -> bool:
        """True once the client is authenticated."""
        ...

    @property
    def authorization_id(self) -> str | None:
        """The authenticated user name, once complete."""
        ...

    def evaluate(self, token: bytes) -> bytes:
        """The reply to the client's next token (possibly empty); raises
        SaslAuthenticationError when authentication fails, after which every call fails."""
        ...
