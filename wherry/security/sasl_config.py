"""A listener's SASL settings from broker properties, as Kafka reads them.

* `sasl.enabled.mechanisms` (comma-separated; a listener may override it with
  `listener.name.<listener>.sasl.enabled.mechanisms`). wherry serves PLAIN, SCRAM-SHA-256 and
  SCRAM-SHA-512; any other mechanism (Kafka's default GSSAPI, OAUTHBEARER) is refused.
* PLAIN's users: the `user_<name>` options of the mechanism's JAAS config
  (`listener.name.<listener>.plain.sasl.jaas.config`, else `sasl.jaas.config`).
* SCRAM's credentials live in the metadata store (`scram_store`), not in JAAS.
* The credentials a broker logs in with to other brokers (`server/listener_security.py`):
  `username` / `password` of the JAAS config of `sasl.mechanism.inter.broker.protocol` on the
  inter-broker listener.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from wherry.security.jaas import listener_jaas, plain_users
from wherry.security.plain import PLAIN
from wherry.security.scram import MECHANISMS

SUPPORTED_MECHANISMS: tuple[str, ...] = (PLAIN, *MECHANISMS)


@dataclass(frozen=True, slots=True)
class ListenerSasl:
    """What a SASL listener's authenticators need."""

    listener: str
    enabled_mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict)


def _mechanism_list(text: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in text.split(",") if m.strip())


def enabled_mechanisms(props: Mapping[str, str], listener: str) -> tuple[str, ...]:
    """The mechanisms a listener enables; ValueError naming the key for any other than
    PLAIN and SCRAM (including Kafka's default GSSAPI when the key is unset)."""
    key = f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
    if key not in props:
        key = "sasl.enabled.mechanisms"
    text = props.get(key, "GSSAPI")
    mechanisms = tuple(m.upper() for m in _mechanism_list(text))
    if not mechanisms:
        raise ValueError(f"{key} is empty: no SASL mechanism is enabled for listener {listener}")
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported:
        unset = "" if key in props else " (unset: Kafka's default is GSSAPI)"
        raise ValueError(
            f"{key}={text}{unset}: unsupported SASL mechanism(s) {', '.join(unsupported)} for "
            f"listener {listener}; supported: {', '.join(SUPPORTED_MECHANISMS)}"
        )
    return mechanisms


def listener_sasl(props: Mapping[str, str], listener: str) -> ListenerSasl:
    """The SASL settings of `listener`; ValueError for an unsupported mechanism, a malformed
    JAAS config or PLAIN enabled without a JAAS config."""
    mechanisms = enabled_mechanisms(props, listener)
    users: dict[str, str] = {}
    if PLAIN in mechanisms:
        entry = listener_jaas(props, listener, PLAIN)
        if entry is None:
            raise ValueError(
                f"SASL mechanism PLAIN is enabled on listener {listener} but no JAAS config "
                f"was found (listener.name.{listener.lower()}.plain.sasl.jaas.config or "
                "sasl.jaas.config)"
            )
        users = plain_users(entry)
    return ListenerSasl(listener, mechanisms, users)
