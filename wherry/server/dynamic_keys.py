"""Kafka's dynamic broker configs: the keys `AlterConfigs` / `IncrementalAlterConfigs` may set
on a BROKER resource, with their types, defaults and value checks (Kafka 3.9's
DynamicBrokerConfig set), and the rules of where each may be set.

The set is the union of the TLS key-store settings (only per listener, as
`listener.name.<listener>.<key>`), the listener settings (listeners, TLS, SASL and Kerberos
login settings, `max.connections*`, `num.network.threads`), the log cleaner's, the broker's
log defaults (every topic config's broker synonym but the message format version), the
thread-pool sizes, `metric.reporters`, the socket server's connection limits, the producer
state settings, the remote-log settings, and the replication throttles. Listener settings are
per broker, except `max.connections`, `max.connection.creation.rate` and `num.network.threads`,
which may also be set cluster-wide (the `<default>` entity). Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping

from wherry.common.record import frozen_record
from wherry.log.config import TOPIC_CONFIG_KEYS, ConfigType

__all__ = [
    "ALL_DYNAMIC",
    "CLUSTER_LEVEL_LISTENER_KEYS",
    "DYNAMIC_KEYS",
    "LISTENER_ONLY_KEYS",
    "PER_BROKER_KEYS",
    "QUOTA_KEYS",
    "THREAD_POOL_KEYS",
    "DynamicKey",
    "base_name",
    "broker_synonyms",
    "is_password",
    "is_per_broker",
    "key_of",
    "parse_value",
    "scala_set",
]

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
Check = Callable[[float], str | None]


def at_least(n: float) -> Check:
    return lambda v: f"Value must be at least {n}" if v < n else None


def between(lo: float, hi: float) -> Check:
    def check(v: float) -> str | None:
        if v < lo:
            return f"Value must be at least {lo}"
        if v > hi:
            return f"Value must be no more than {hi}"
        return None

    return check


@frozen_record(slots=True)
class DynamicKey:
    name: str
    type: ConfigType
    default: str | None  # as DescribeConfigs shows it; None: no default (null)
    check: Check | None = None
    choices: tuple[str, ...] = ()  # a STRING that must be one of these


T = ConfigType
_SSL_KEYSTORE = (
    # Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: set only per listener
    DynamicKey("ssl.keystore.type", T.STRING, "JKS"),
    DynamicKey("ssl.keystore.location", T.STRING, None),
    DynamicKey("ssl.keystore.password", T.PASSWORD, None),
    DynamicKey("ssl.key.password", T.PASSWORD, None),
    DynamicKey("ssl.truststore.type", T.STRING, "JKS"),
    DynamicKey("ssl.truststore.location", T.STRING, None),
    DynamicKey("ssl.truststore.password", T.PASSWORD, None),
    DynamicKey("ssl.keystore.certificate.chain", T.PASSWORD, None),
    DynamicKey("ssl.keystore.key", T.PASSWORD, None),
    DynamicKey("ssl.truststore.certificates", T.PASSWORD, None),
)
_LISTENER = (
    # Kafka's DynamicListenerConfig.ReconfigurableConfigs (the key-store ones are above)
    DynamicKey("advertised.listeners", T.STRING, None),
    DynamicKey("listeners", T.STRING, "PLAINTEXT://:9092"),
    DynamicKey(
        "listener.security.protocol.map",
        T.STRING,
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
    ),
    DynamicKey(
        "principal.builder.class",
        T.CLASS,
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
    ),
    DynamicKey("ssl.protocol", T.STRING, "TLSv1.3"),
    DynamicKey("ssl.provider", T.STRING, None),
    DynamicKey("ssl.cipher.suites", T.LIST, ""),
    DynamicKey("ssl.enabled.protocols", T.LIST, "TLSv1.2,TLSv1.3"),
    DynamicKey("ssl.keymanager.algorithm", T.STRING, "SunX509"),
    DynamicKey("ssl.trustmanager.algorithm", T.STRING, "PKIX"),
    DynamicKey("ssl.endpoint.identification.algorithm", T.STRING, "https"),
    DynamicKey("ssl.secure.random.implementation", T.STRING, None),
    DynamicKey("ssl.client.auth", T.STRING, "none", choices=("required", "requested", "none")),
    DynamicKey("ssl.engine.factory.class", T.CLASS, None),
    DynamicKey("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI"),
    DynamicKey("sasl.jaas.config", T.PASSWORD, None),
    DynamicKey("sasl.enabled.mechanisms", T.LIST, "GSSAPI"),
    DynamicKey("sasl.kerberos.service.name", T.STRING, None),
    DynamicKey("sasl.kerberos.kinit.cmd", T.STRING, "/usr/bin/kinit"),
    DynamicKey("sasl.kerberos.ticket.renew.window.factor", T.DOUBLE, "0.8"),
    DynamicKey("sasl.kerberos.ticket.renew.jitter", T.DOUBLE, "0.05"),
    DynamicKey("sasl.kerberos.min.time.before.relogin", T.LONG, "60000"),
    DynamicKey("sasl.kerberos.principal.to.local.rules", T.LIST, "DEFAULT"),
    DynamicKey("sasl.login.refresh.window.factor", T.DOUBLE, "0.8", between(0.5, 1.0)),
    DynamicKey("sasl.login.refresh.window.jitter", T.DOUBLE, "0.05", between(0.0, 0.25)),
    DynamicKey("sasl.login.refresh.min.period.seconds", T.SHORT, "60", between(0, 900)),
    DynamicKey("sasl.login.refresh.buffer.seconds", T.SHORT, "300", between(0, 3600)),
    DynamicKey("max.connections", T.INT, str(INT_MAX), at_least(0)),
    DynamicKey("max.connection.creation.rate", T.INT, str(INT_MAX), at_least(0)),
    DynamicKey("num.network.threads", T.INT, "3", at_least(1)),
)
_CLEANER = (
    DynamicKey("log.cleaner.threads", T.INT, "1", at_least(0)),
    DynamicKey("log.cleaner.dedupe.buffer.size", T.LONG, str(128 * 1024 * 1024)),
    DynamicKey("log.cleaner.io.buffer.load.factor", T.DOUBLE, "0.9"),
    DynamicKey("log.cleaner.io.buffer.size", T.INT, str(512 * 1024), at_least(0)),
    DynamicKey("log.cleaner.io.max.bytes.per.second", T.DOUBLE, "1.7976931348623157E308"),
    DynamicKey("log.cleaner.backoff.ms", T.LONG, "15000", at_least(0)),
)
_THREAD_POOLS = (
    DynamicKey("num.io.threads", T.INT, "8", at_least(1)),
    DynamicKey("num.replica.fetchers", T.INT, "1"),
    DynamicKey("num.recovery.threads.per.data.dir", T.INT, "1", at_least(1)),
    DynamicKey("background.threads", T.INT, "10", at_least(1)),
)
_OTHERS = (
    DynamicKey("metric.reporters", T.LIST, ""),
    # the socket server's (max.connections and the creation rate are listener settings)
    DynamicKey("max.connections.per.ip", T.INT, str(INT_MAX), at_least(0)),
    DynamicKey("max.connections.per.ip.overrides", T.STRING, ""),
    # the producer state's
    DynamicKey("producer.id.expiration.ms", T.INT, "86400000", at_least(1)),
    DynamicKey("transaction.partition.verification.enable", T.BOOLEAN, "true"),
    # the remote log's
    DynamicKey(
        "remote.log.index.file.cache.total.size.bytes", T.LONG, str(1024**3), at_least(1)
    ),
    DynamicKey("remote.fetch.max.wait.ms", T.INT, "500", at_least(1)),
    DynamicKey("remote.log.manager.copy.max.bytes.per.second", T.LONG, str(LONG_MAX), at_least(1)),
    DynamicKey(
        "remote.log.manager.fetch.max.bytes.per.second", T.LONG, str(LONG_MAX), at_least(1)
    ),
    # the replication throttles (Kafka's broker quota configs)
    DynamicKey("leader.replication.throttled.rate", T.LONG, str(LONG_MAX), at_least(0)),
    DynamicKey("follower.replication.throttled.rate", T.LONG, str(LONG_MAX), at_least(0)),
    DynamicKey(
        "replica.alter.log.dirs.io.max.bytes.per.second", T.LONG, str(LONG_MAX), at_least(0)
    ),
)
# Broker log defaults Kafka has and wherry's topic configs do not (stored and described)
_LOG_EXTRA = (
    DynamicKey("compression.gzip.level", T.INT, "-1"),
    DynamicKey("compression.lz4.level", T.INT, "9", between(1, 17)),
    DynamicKey("compression.zstd.level", T.INT, "3", between(-131072, 22)),
    DynamicKey("log.local.retention.ms", T.LONG, "-2", at_least(-2)),
    DynamicKey("log.local.retention.bytes", T.LONG, "-2", at_least(-2)),
)
_NOT_DYNAMIC_LOG_KEYS = frozenset({"log.message.format.version"})
# The broker name of each topic config (Kafka's ServerTopicConfigSynonyms, first synonym).
LOG_KEYS: Mapping[str, str] = {
    key.server_name: key.name
    for key in TOPIC_CONFIG_KEYS.values()
    if key.server_name and key.server_name not in _NOT_DYNAMIC_LOG_KEYS
}

DYNAMIC_KEYS: Mapping[str, DynamicKey] = {
    k.name: k
    for k in (*_SSL_KEYSTORE, *_LISTENER, *_CLEANER, *_THREAD_POOLS, *_OTHERS, *_LOG_EXTRA)
}
"""Every dynamic key but the log defaults of wherry's topic configs, by name."""

ALL_DYNAMIC: frozenset[str] = frozenset(DYNAMIC_KEYS) | frozenset(LOG_KEYS)
LISTENER_ONLY_KEYS = frozenset(k.name for k in _SSL_KEYSTORE)
CLUSTER_LEVEL_LISTENER_KEYS = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)
PER_BROKER_KEYS = (
    frozenset(k.name for k in (*_SSL_KEYSTORE, *_LISTENER)) - CLUSTER_LEVEL_LISTENER_KEYS
)
THREAD_POOL_KEYS = frozenset(k.name for k in _THREAD_POOLS)
# The replication throttles: Kafka's broker quota configs, no broker properties of its own
QUOTA_KEYS = frozenset({
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
})
CLEANER_KEYS = frozenset({*(k.name for k in _CLEANER), "message.max.bytes"})
_PASSWORDS = tuple(k.name for k in DYNAMIC_KEYS.values() if k.type == T.PASSWORD)

_LISTENER_PREFIX = re.compile(r"listener\.name\.[^.]*\.(.*)")
# Per-mechanism listener settings: `listener.name.<l>.<mechanism>.sasl.jaas.config`
_MECHANISM_KEYS = (
    "sasl.jaas.config",
    "sasl.login.callback.handler.class",
    "sasl.login.class",
    "sasl.server.callback.handler.class",
    "connections.max.reauth.ms",
)


def base_name(name: str) -> str | None:
    """`ssl.keystore.location` of `listener.name.ssl.ssl.keystore.location`; None when `name`
    has no listener prefix."""
    m = _LISTENER_PREFIX.fullmatch(name)
    return None if m is None else m.group(1)


def is_password(name: str) -> bool:
    """Kafka's isPasswordConfig: any name ending with a dynamic password key."""
    return name.endswith(_PASSWORDS)


def is_per_broker(name: str) -> bool:
    """A key Kafka refuses at the cluster-default level."""
    base = base_name(name)
    if base is not None:
        return base not in CLUSTER_LEVEL_LISTENER_KEYS
    return name in PER_BROKER_KEYS


def key_of(name: str) -> DynamicKey | None:
    """The dynamic key `name` is (a listener-prefixed name: its base key's, or the
    mechanism setting's)."""
    if name in DYNAMIC_KEYS:
        return DYNAMIC_KEYS[name]
    base = base_name(name)
    if base is None:
        return None
    if base in DYNAMIC_KEYS:
        return DYNAMIC_KEYS[base]
    mechanism = next((m for m in _MECHANISM_KEYS if base.endswith("." + m)), None)
    return DYNAMIC_KEYS.get(mechanism) if mechanism else None


def broker_synonyms(name: str) -> list[str]:
    """Kafka's brokerConfigSynonyms (listener overrides matched): the names that may set the
    same config, most specific first."""
    for group in (
        ("log.roll.ms", "log.roll.hours"),
        ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ):
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":
        return [name, "log.flush.scheduler.interval.ms"]
    base = base_name(name)
    if base is not None:
        mechanism = next((m for m in _MECHANISM_KEYS if base.endswith(m)), None)
        return [name, mechanism or base]
    return [name]


_INT_RE = re.compile(r"[+-]?[0-9]+")
_BOUNDS = {T.SHORT: (-(2**15), 2**15 - 1), T.INT: (-(2**31), INT_MAX), T.LONG: (-(2**63), LONG_MAX)}


def _invalid(name: str, value: str, message: str) -> ValueError:
    return ValueError(f"Invalid value {value} for configuration {name}: {message}")


def parse_value(name: str, key: DynamicKey, value: str) -> float | str | bool:
    """Kafka's ConfigDef.parse of one value (raises ValueError with Kafka's wording)."""
    text = value.strip()
    if key.type in _BOUNDS:
        lo, hi = _BOUNDS[key.type]
        if not _INT_RE.fullmatch(text) or not lo <= int(text) <= hi:
            raise _invalid(name, value, f"Not a number of type {key.type.name}")
        number: float = int(text)
    elif key.type == T.DOUBLE:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if math.isnan(number) and text.lower() != "nan":
            raise _invalid(name, value, "Not a number of type DOUBLE")
    elif key.type == T.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise _invalid(name, value, "Expected value to be either true or false")
        return text.lower() == "true"
    else:
        if key.choices and text not in key.choices:
            raise _invalid(name, value, f"String must be one of: {', '.join(key.choices)}")
        return text
    problem = key.check(number) if key.check is not None else None
    if problem is not None:
        raise _invalid(name, str(number), problem)  # the parsed value, as Kafka prints it
    return number


def scala_set(names: Iterable[str]) -> str:
    """A set of names as Kafka's messages print it (Scala's `Set(...)`, `HashSet(...)` when
    there are more than four)."""
    items = sorted(names)
    return f"{'HashSet' if len(items) > 4 else 'Set'}({', '.join(items)})"
