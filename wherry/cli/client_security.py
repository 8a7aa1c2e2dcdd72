"""The security of a tool's own connections (tools that speak the protocol themselves, not
through a client library) from a `--command-config` file of Java client settings:
`security.protocol`, the `ssl.truststore.*` / `ssl.keystore.*` stores (PEM or PKCS12), and for
SASL `sasl.mechanism` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with the credentials of
`sasl.jaas.config` (or librdkafka's `sasl.username` / `sasl.password`)."""

from __future__ import annotations

from collections.abc import Mapping

from wherry.cli.common import CommandError
from wherry.outbound.security import ClientSecurity

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """A ClientSecurity from Java client properties; a setting it cannot use is a
    CommandError naming the key."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in _PROTOCOLS:
        raise CommandError(f"Invalid value {protocol} for configuration security.protocol: "
                           f"expected one of {', '.join(_PROTOCOLS)}")
    ctx = None
    if protocol.endswith("SSL"):
        from wherry.server.tls import TlsConfigError, client_context

        try:
            ctx = client_context(props, "client")
        except (TlsConfigError, OSError, ValueError) as e:
            raise CommandError(f"Invalid SSL settings: {e}") from e
    if not protocol.startswith("SASL"):
        return ClientSecurity(protocol, ctx)
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism not in _MECHANISMS:
        raise CommandError(f"sasl.mechanism={mechanism} is not supported here: expected one "
                           f"of {', '.join(_MECHANISMS)}")
    username, password = props.get("sasl.username"), props.get("sasl.password")
    if "sasl.jaas.config" in props:
        from wherry.security.jaas import client_credentials, parse_jaas_config

        try:
            username, password = client_credentials(parse_jaas_config(props["sasl.jaas.config"]))
        except ValueError as e:
            raise CommandError(f"Invalid value for configuration sasl.jaas.config: {e}") from e
    if username is None or password is None:
        raise CommandError(f"{protocol} needs sasl.jaas.config with username and password")
    return ClientSecurity(protocol, ctx, mechanism, username, password)
