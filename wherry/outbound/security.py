"""How a broker's outbound connections secure themselves (the inter-broker listener's
security protocol): TLS with a client context, then, for SASL_PLAINTEXT / SASL_SSL, a SASL
exchange (SaslHandshake v1 + SaslAuthenticate v2) before the connection carries requests."""

from __future__ import annotations

import ssl

from wherry.common.record import frozen_record


@frozen_record(slots=True)
class ClientSecurity:
    """The security of connections to other brokers. `ssl_context` is set for SSL and
    SASL_SSL; `sasl_mechanism` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with its username and
    password for SASL_PLAINTEXT and SASL_SSL."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = ""

    def __repr__(self) -> str:  # never print the password
        return (
            f"ClientSecurity(protocol={self.protocol!r}, tls={self.ssl_context is not None}, "
            f"sasl_mechanism={self.sasl_mechanism!r}, username={self.username!r})"
        )


PLAINTEXT = ClientSecurity()


class AuthenticationError(ConnectionError):
    """The peer refused our SASL credentials, or the exchange broke its rules."""
