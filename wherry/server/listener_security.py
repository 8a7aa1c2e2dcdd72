"""Which security protocol each listener speaks and what it needs (Kafka's names).

`listener.security.protocol.map` names each listener's protocol (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL; by default a listener named after a protocol speaks it);
`inter.broker.listener.name` or `security.inter.broker.protocol` picks the listener brokers
use among themselves. TLS listeners need a key store (`server/tls.py`); SASL listeners need
`sasl.enabled.mechanisms` among PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, and PLAIN needs its
users in the listener's JAAS setting
(`listener.name.<l>.plain.sasl.jaas.config=... user_alice="..."`). For SASL between brokers,
`sasl.mechanism.inter.broker.protocol` and the `username`/`password` of that mechanism's
JAAS setting on the inter-broker listener. Anything missing or unknown refuses to start with
one line naming the key.

`check_names` runs when the config is read (no I/O); `broker_security` when the broker
starts (it reads key and trust stores).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Protocol

from wherry.common.record import frozen_record
from wherry.outbound.security import ClientSecurity
from wherry.protocol.security_protocols import SECURITY_PROTOCOL_IDS

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class SecurityConfigError(ValueError):
    """A security setting the broker cannot start with; the message names the key."""


class _Endpoint(Protocol):
    @property
    def listener(self) -> str: ...


def protocol_map(props: Mapping[str, str]) -> dict[str, str]:
    """`listener.security.protocol.map` (Kafka's default maps each protocol to itself)."""
    text = props.get("listener.security.protocol.map")
    if text is None:
        return {p: p for p in SECURITY_PROTOCOL_IDS}
    out: dict[str, str] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise SecurityConfigError(
                f"Invalid value {text} for configuration listener.security.protocol.map: "
                f"entry {item!r} is not LISTENER:PROTOCOL"
            )
        if protocol not in SECURITY_PROTOCOL_IDS:
            raise SecurityConfigError(
                f"Invalid value {text} for configuration listener.security.protocol.map: "
                f"unknown security protocol {protocol} (supported: "
                f"{', '.join(SECURITY_PROTOCOL_IDS)})"
            )
        if name in out:
            raise SecurityConfigError(f"listener.security.protocol.map names listener {name} twice")
        out[name] = protocol
    return out


def inter_broker_listener(props: Mapping[str, str], protocols: Mapping[str, str]) -> str:
    name = props.get("inter.broker.listener.name")
    protocol = props.get("security.inter.broker.protocol")
    if name is not None and protocol is not None:
        raise SecurityConfigError(
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should "
            "be set."
        )
    if name is not None:
        return name.strip().upper()
    protocol = (protocol or "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOL_IDS:
        raise SecurityConfigError(
            f"Invalid value {protocol} for configuration security.inter.broker.protocol: "
            f"supported are {', '.join(SECURITY_PROTOCOL_IDS)}"
        )
    return protocol


def check_names(
    props: Mapping[str, str],
    listeners: Sequence[_Endpoint],
    advertised: Sequence[_Endpoint],
    *,
    single_listener_default: bool = True,
) -> str:
    """Kafka's start-up checks of listener names; returns the inter-broker listener.

    With one listener and no inter-broker setting, that listener is the inter-broker one
    (`single_listener_default`): `wherry server --listeners SSL://...` works alone, where
    Kafka would ask for security.inter.broker.protocol=SSL.
    """
    protocols = protocol_map(props)
    seen: set[str] = set()
    for ep in listeners:
        if ep.listener in seen:
            raise SecurityConfigError(
                f"Each listener must have a different name, listeners: {props.get('listeners', '')}"
            )
        seen.add(ep.listener)
        if ep.listener not in protocols:
            raise SecurityConfigError(
                f"No security protocol defined for listener {ep.listener}: add it to "
                "listener.security.protocol.map (e.g. "
                f"listener.security.protocol.map={ep.listener}:SASL_SSL)"
            )
    for ep in advertised:
        if ep.listener not in seen:
            raise SecurityConfigError(
                f"advertised.listeners listener name {ep.listener} is not in listeners"
            )
    explicit = "inter.broker.listener.name" in props or "security.inter.broker.protocol" in props
    if not explicit and single_listener_default and len(advertised) == 1:
        return advertised[0].listener
    name = inter_broker_listener(props, protocols)
    if name not in {ep.listener for ep in advertised}:
        raise SecurityConfigError(
            "inter.broker.listener.name must be a listener name defined in "
            f"advertised.listeners. The valid options based on currently configured listeners "
            f"are {','.join(ep.listener for ep in advertised)} (got {name})"
        )
    return name


@frozen_record
class ListenerSecurity:
    """What one listener needs to accept a connection."""

    name: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, str] = field(default_factory=dict)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @property
    def protocol_id(self) -> int:
        return SECURITY_PROTOCOL_IDS[self.protocol]


@frozen_record
class BrokerSecurity:
    listeners: Mapping[str, ListenerSecurity]
    inter_broker_listener: str
    inter_broker_client: ClientSecurity

    def protocol_of(self, listener: str) -> str:
        found = self.listeners.get(listener)
        return found.protocol if found is not None else "PLAINTEXT"


def _jaas_key(listener: str, mechanism: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"


def _listener(props: Mapping[str, str], name: str, protocol: str) -> ListenerSecurity:
    ctx = None
    if protocol in TLS_PROTOCOLS:
        from wherry.server.tls import TlsConfigError, server_context  # TLS listeners only

        try:
            ctx = server_context(props, name)
        except TlsConfigError as e:
            raise SecurityConfigError(str(e)) from e
    if protocol not in SASL_PROTOCOLS:
        return ListenerSecurity(name, protocol, ctx)
    from wherry.security.sasl_config import listener_sasl  # SASL listeners only

    try:
        sasl = listener_sasl(props, name)
    except ValueError as e:
        raise SecurityConfigError(str(e)) from e
    return ListenerSecurity(name, protocol, ctx, sasl.enabled_mechanisms, sasl.plain_users)


def _client(props: Mapping[str, str], listener: ListenerSecurity) -> ClientSecurity:
    protocol = listener.protocol
    ctx = None
    if protocol in TLS_PROTOCOLS:
        from wherry.server.tls import TlsConfigError, client_context

        try:
            ctx = client_context(props, listener.name)
        except TlsConfigError as e:
            raise SecurityConfigError(str(e)) from e
    if protocol not in SASL_PROTOCOLS:
        return ClientSecurity(protocol, ctx)
    mechanism = props.get("sasl.mechanism.inter.broker.protocol", "GSSAPI").strip().upper()
    if mechanism not in listener.sasl_mechanisms:
        raise SecurityConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism} must be one of the mechanisms "
            f"enabled on the inter-broker listener {listener.name}: "
            f"{', '.join(listener.sasl_mechanisms)}"
        )
    key = _jaas_key(listener.name, mechanism)
    from wherry.security.jaas import client_credentials, listener_jaas

    try:
        entry = listener_jaas(props, listener.name, mechanism)
        if entry is None:
            raise ValueError("not set")
        username, password = client_credentials(entry)
    except ValueError as e:
        raise SecurityConfigError(
            f"{key} needs username and password for the broker's own connections to other "
            f"brokers over {listener.name} ({e})"
        ) from e
    return ClientSecurity(protocol, ctx, mechanism, username, password)


def broker_security(
    props: Mapping[str, str],
    listeners: Sequence[_Endpoint],
    advertised: Sequence[_Endpoint],
) -> BrokerSecurity:
    """Everything the listeners and the broker's own connections need; reads key stores.
    Raises SecurityConfigError (TLS problems included) with a line naming the key."""
    ib = check_names(props, listeners, advertised)
    protocols = protocol_map(props)
    built = {ep.listener: _listener(props, ep.listener, protocols[ep.listener]) for ep in listeners}
    client = _client(props, built[ib])
    return BrokerSecurity(built, ib, client)

