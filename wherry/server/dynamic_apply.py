"""Dynamic broker configs applied to a running broker (Kafka's reconfigurables).

Applied at once, at start and at every change of ``/config/brokers/<id>`` or ``<default>``:
the replication throttles (`broker_configs.py`), the log defaults (`config_changes.py`), the
log cleaner's threads, back-off and dedupe buffer (`cleaner_threads.py`), the connection limits
(`max.connections`, `max.connections.per.ip`, `max.connections.per.ip.overrides`,
`max.connection.creation.rate`, also per listener), the copy rate of replicas moving between
log dirs, `producer.id.expiration.ms` of every log, and each TLS listener's key and trust
stores (KIP-226: a client connecting after the change is served with the new certificate;
open connections keep theirs). The other dynamic keys are stored and described only.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from wherry.server import tls
from wherry.server.connection_gate import resolve_overrides
from wherry.server.connection_limits import ConnectionLimits, LimitConfigError, limits_from_props
from wherry.server.listener_security import protocol_map

if TYPE_CHECKING:
    from wherry.log.cleaner import LogCleaner
    from wherry.log.manager import LogManager
    from wherry.replication.log_dir_mover import LogDirMover
    from wherry.runtime.clock import Clock
    from wherry.runtime.scheduler import Scheduler
    from wherry.server.broker_configs import DynamicBrokerConfig
    from wherry.server.config import BrokerConfig
    from wherry.server.listener_security import BrokerSecurity
    from wherry.server.network import NetworkServer

log = logging.getLogger(__name__)

__all__ = ["Reconfigurable", "apply_dynamic", "tls_problem"]

_TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_STORE_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
)
_ALIAS = "kafka"  # the alias Kafka gives a PEM key store's entry
IO_RATE_KEY = "replica.alter.log.dirs.io.max.bytes.per.second"
PRODUCER_EXPIRATION_KEY = "producer.id.expiration.ms"


class Reconfigurable(Protocol):
    """What of a broker the dynamic configs reach."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def dynamic_config(self) -> DynamicBrokerConfig: ...
    @property
    def network(self) -> NetworkServer: ...
    @property
    def security(self) -> BrokerSecurity: ...
    @property
    def scheduler(self) -> Scheduler: ...
    @property
    def log_cleaner(self) -> LogCleaner | None: ...
    @property
    def log_dir_mover(self) -> LogDirMover: ...
    @property
    def log_manager(self) -> LogManager: ...
    @property
    def clock(self) -> Clock: ...


def _store_settings(props: Mapping[str, str], listener: str) -> tuple[str | None, ...]:
    return tuple(tls.listener_value(props, listener, k) for k in _STORE_KEYS)


def _tls_listeners(props: Mapping[str, str]) -> list[str]:
    try:
        protocols = protocol_map(props)
    except ValueError:
        return []
    return [name for name, protocol in protocols.items() if protocol in _TLS_PROTOCOLS]


def tls_problem(old: Mapping[str, str], new: Mapping[str, str]) -> str | None:
    """Kafka's SslFactory check of an alter: a TLS listener whose stores change must load
    them (None: fine)."""
    for listener in _tls_listeners(new):
        if _store_settings(old, listener) == _store_settings(new, listener):
            continue
        try:
            tls.server_context(new, listener)
            problem = _certificate_change_problem(old, new, listener)
        except (tls.TlsConfigError, ssl.SSLError, OSError) as e:
            problem = str(e)
        if problem is not None:
            return (
                "Validation of dynamic config update of SSLFactory failed: "
                f"org.apache.kafka.common.config.ConfigException: {problem}"
            )
    return None


def _allowed(props: Mapping[str, str], listener: str, key: str) -> bool:
    return (tls.listener_value(props, listener, key) or "false").strip().lower() == "true"


def _certificate_change_problem(
    old: Mapping[str, str], new: Mapping[str, str], listener: str
) -> str | None:
    """Kafka's rule for a new key store: the same subject and at least the same subject
    alternative names as the certificate it replaces, unless `ssl.allow.dn.changes` /
    `ssl.allow.san.changes` say otherwise."""
    from cryptography import x509

    before = tls.key_store_certificate(old, listener)
    after = tls.key_store_certificate(new, listener)
    if before is None:
        return None if after is None else (
            "Cannot add SSL keystore to an existing listener for which no keystore was "
            "configured."
        )
    if after is None:
        return (
            "Cannot remove the SSL keystore from an existing listener for which a keystore "
            "was configured."
        )
    dn_before, dn_after = before.subject.rfc4514_string(), after.subject.rfc4514_string()
    dn_fixed = not _allowed(new, listener, "ssl.allow.dn.changes")
    if dn_fixed and dn_before.lower() != dn_after.lower():
        return (
            f"Keystore DistinguishedName does not match:  existing={{alias={_ALIAS}, "
            f"DN={dn_before}}}, new={{alias={_ALIAS}, DN={dn_after}}}"
        )

    def names(cert: x509.Certificate) -> set[str]:
        try:
            ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        except x509.ExtensionNotFound:
            return set()
        return {str(n.value) for n in ext.value}

    san_before, san_after = names(before), names(after)
    if not _allowed(new, listener, "ssl.allow.san.changes") and not san_before <= san_after:
        return (
            f"Keystore SubjectAltNames do not match:  existing={{alias={_ALIAS}, "
            f"SAN={sorted(san_before)}}}, new={{alias={_ALIAS}, SAN={sorted(san_after)}}}"
        )
    return None


def _reload_stores(broker: Reconfigurable, props: Mapping[str, str]) -> None:
    for name, ls in broker.security.listeners.items():
        ctx = ls.ssl_context
        if ctx is None:
            continue
        try:
            tls.reload_stores(ctx, props, name)
        except (tls.TlsConfigError, ssl.SSLError, OSError) as e:
            log.error("Failed to reload the TLS stores of listener %s: %s", name, e)


def _apply_limits(broker: Reconfigurable, limits: ConnectionLimits) -> None:
    network = broker.network
    if network.limits == limits:
        return
    network.limits = network.gate.limits = network.quotas.limits = limits
    network.quotas.overrides = resolve_overrides(limits)
    log.info(
        "%s connection limits: max.connections=%d, max.connections.per.ip=%d, "
        "max.connection.creation.rate=%d",
        broker.dynamic_config.log_prefix,
        limits.max_connections,
        limits.max_connections_per_ip,
        limits.max_connection_creation_rate,
    )


async def apply_dynamic(broker: Reconfigurable, *, stores: bool = True) -> None:
    """Apply the dynamic configs in force (`broker.dynamic_config`, just loaded);
    `stores`: reload the listeners' TLS stores too (their files may have changed even when
    their settings did not)."""
    from wherry.server import cleaner_threads

    props = broker.dynamic_config.effective(broker.config.raw)
    try:
        _apply_limits(
            broker, limits_from_props(props, broker.config.socket_request_max_bytes)
        )
    except LimitConfigError as e:
        log.error("Dynamic connection limits not applied: %s", e)
    if hasattr(broker, "scheduler"):  # not before the broker's background tasks start
        await cleaner_threads.reconfigure(
            broker.scheduler, broker.log_cleaner, props, broker.clock.now_ms
        )
    if IO_RATE_KEY in props:
        try:
            broker.log_dir_mover.set_rate(int(props[IO_RATE_KEY]))
        except ValueError:
            log.error("Ignoring %s=%s", IO_RATE_KEY, props[IO_RATE_KEY])
    _apply_producer_expiration(broker.log_manager, props)
    if stores:
        _reload_stores(broker, props)


def _apply_producer_expiration(lm: LogManager, props: Mapping[str, str]) -> None:
    """`producer.id.expiration.ms` for every log, present and future (Kafka's shared
    producer state config)."""
    try:
        expiration = int(props.get(PRODUCER_EXPIRATION_KEY, "86400000"))
    except ValueError:
        log.error("Ignoring %s=%s", PRODUCER_EXPIRATION_KEY, props[PRODUCER_EXPIRATION_KEY])
        return
    if expiration == lm.producer_id_expiration_ms:
        return
    lm.producer_id_expiration_ms = expiration
    for lg in lm.all_logs():
        lg.producer_state.producer_id_expiration_ms = expiration
    log.info("Reconfigured %s to %d", PRODUCER_EXPIRATION_KEY, expiration)
