"""Which broker config keys wherry knows, and Kafka's warning for the others.

A key is known when something reads it: `BrokerConfig.from_props`, the topic-config broker
synonyms of `log/config.py` (`log.retention.hours`, `compression.type`, ...), the replica
fetchers (`replica.fetch.*`), the security settings (`listener_security.py`, `tls.py`,
`security/sasl_config.py`, `security/jaas.py`, `security/acl_authorizer.py`, with their
per-listener `listener.name.<listener>.` forms), the HTTP listener (`http.listeners`), or it
is one of the Kafka settings wherry accepts and ignores on purpose (`IGNORED_KEYS`). Every
other key is reported at start in one warning, in Kafka's words (AbstractConfig.logUnused):
`These configurations '[log.retention.hour]' were supplied but are not used yet.`; the
broker still starts.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping

from wherry.log.config import (
    SERVER_CONFIG_SYNONYMS,
    broker_message_format_warning,
    message_format_ignored_warning,
)
from wherry.server.connection_limits import BROKER_KEYS as CONNECTION_LIMIT_KEYS
from wherry.server.connection_limits import PER_LISTENER_KEYS as CONNECTION_LISTENER_KEYS
from wherry.share.broker_keys import SHARE_BROKER_KEYS

__all__ = [
    "IGNORED_KEYS", "KNOWN_KEYS", "is_known", "unknown_keys", "unused_warning", "warn_unused",
]

# Read by BrokerConfig.from_props (wherry/server/config.py).
_BROKER_KEYS = frozenset({
    "broker.id", "node.id", "listeners", "advertised.listeners", "log.dirs", "log.dir",
    "metadata.log.dir",
    "num.partitions", "default.replication.factor", "auto.create.topics.enable",
    "delete.topic.enable", "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds", "leader.imbalance.per.broker.percentage",
    "socket.request.max.bytes", "log.retention.check.interval.ms",
    "log.flush.scheduler.interval.ms", "log.cleaner.enable", "log.cleaner.backoff.ms",
    "log.cleaner.dedupe.buffer.size", "log.cleaner.threads",
    "log.flush.offset.checkpoint.interval.ms", "log.flush.start.offset.checkpoint.interval.ms",
    "replica.high.watermark.checkpoint.interval.ms",
    "replica.lag.time.max.ms", "producer.id.expiration.ms",
    "replica.alter.log.dirs.io.max.bytes.per.second", "replication.quota.window.num",
    "replication.quota.window.size.seconds", "quota.window.num", "quota.window.size.seconds",
    "cluster.id", "broker.rack", "replica.selector.class", "zookeeper.connect",
    "controlled.shutdown.enable", "controlled.shutdown.max.retries",
    "controlled.shutdown.retry.backoff.ms", "zookeeper.session.timeout.ms",
    "zookeeper.connection.timeout.ms", "controller.socket.timeout.ms",
    "offsets.topic.num.partitions", "offsets.topic.replication.factor",
    "offsets.topic.segment.bytes", "offsets.retention.minutes",
    "offsets.retention.check.interval.ms", "offsets.commit.timeout.ms",
    "offsets.load.buffer.size", "offset.metadata.max.bytes", "group.min.session.timeout.ms",
    "group.max.session.timeout.ms", "group.initial.rebalance.delay.ms", "group.max.size",
    "group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
    "group.consumer.assignors", "group.consumer.migration.policy", "group.consumer.max.size",
    "transactional.id.expiration.ms", "transaction.max.timeout.ms",
    "transaction.state.log.num.partitions", "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr", "transaction.state.log.segment.bytes",
    "transaction.state.log.load.buffer.size",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
    "transaction.version", "transaction.partition.verification.enable",
})

# Read by the replica fetchers (replication/fetcher.py FetcherConfig).
FETCHER_KEYS = (
    "replica.fetch.wait.max.ms", "replica.fetch.min.bytes", "replica.fetch.max.bytes",
    "replica.fetch.response.max.bytes", "replica.fetch.backoff.ms", "replica.socket.timeout.ms",
    # KIP-227 fetch sessions (replication/fetch_session.py), read by the broker
    "max.incremental.fetch.session.cache.slots", "min.incremental.fetch.session.eviction.ms",
)

# TLS settings (server/tls.py); each may also be given per listener.
SSL_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.endpoint.identification.algorithm",
    # whether a key store swapped at run time may change its certificate's subject / names
    "ssl.allow.dn.changes", "ssl.allow.san.changes",
)

# Listener, SASL and authorization settings (listener_security.py, security/).
_SECURITY_KEYS = frozenset({
    "listener.security.protocol.map", "inter.broker.listener.name",
    "security.inter.broker.protocol", "sasl.enabled.mechanisms",
    "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config",
    "authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found",
    # ZooKeeper ACLs on the nodes the broker creates (coordination/zk_acl.py).
    "zookeeper.set.acl", "zookeeper.digest.username", "zookeeper.digest.password",
    # the key dynamic password configs are stored under (broker_configs.py)
    "password.encoder.secret",
    *SSL_KEYS,
})

# The metrics / web console HTTP listener (`http.listeners`, e.g. http://127.0.0.1:9644).
_HTTP_KEYS = frozenset({"http.listeners"})

IGNORED_KEYS = frozenset({
    # Kafka settings wherry accepts and ignores on purpose: thread pools, socket buffers and
    # request queues have no counterpart in one asyncio event loop per broker, and the rest
    # (versions of the inter-broker protocol and message format) describe machinery wherry
    # does not have or has only one version of. They
    # appear in Kafka's shipped config/server.properties, so that file works as it is.
    "num.network.threads",
    "num.io.threads",
    "num.replica.fetchers",
    "num.recovery.threads.per.data.dir",
    "background.threads",
    "queued.max.requests",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "replica.socket.receive.buffer.bytes",
    "inter.broker.protocol.version",
    "broker.id.generation.enable",
})

KNOWN_KEYS: frozenset[str] = frozenset(
    _BROKER_KEYS
    | set(FETCHER_KEYS)
    | _SECURITY_KEYS
    | _HTTP_KEYS
    | IGNORED_KEYS
    | SHARE_BROKER_KEYS  # share groups (share/broker_keys.py)
    | CONNECTION_LIMIT_KEYS  # connection and request-memory limits (connection_limits.py)
    | {name for names in SERVER_CONFIG_SYNONYMS.values() for name in names}
)

# `listener.name.<listener>.<key>`: per-listener TLS and SASL settings, connection limits
# (`max.connections`, `max.connection.creation.rate`), and each SASL mechanism's JAAS setting
# (`listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config`).
# (Compiled when a key is not among KNOWN_KEYS: most starts have none.)
@functools.cache
def _per_listener() -> re.Pattern[str]:
    return re.compile(
        r"listener\.name\.[a-z0-9_-]+\.(?:"
        + "|".join(re.escape(k) for k in (
            *SSL_KEYS, "sasl.enabled.mechanisms", *CONNECTION_LISTENER_KEYS))
        + r"|[a-z0-9-]+\.sasl\.jaas\.config)"
    )


def is_known(key: str) -> bool:
    return key in KNOWN_KEYS or _per_listener().fullmatch(key) is not None


def unknown_keys(props: Iterable[str] | Mapping[str, str]) -> list[str]:
    """The keys wherry does not read, sorted."""
    return sorted(k for k in props if not is_known(k))


def unused_warning(keys: Iterable[str]) -> str:
    """Kafka's AbstractConfig.logUnused line for these keys."""
    return f"These configurations '[{', '.join(keys)}]' were supplied but are not used yet."


def warn_unused(props: Mapping[str, str], logger: logging.Logger) -> list[str]:
    """Log the one warning for the unknown keys of `props` (none: nothing); returns them."""
    unknown = unknown_keys(props)
    if unknown:
        logger.warning("%s", unused_warning(unknown))
    # Kafka 3.x's warning for the deprecated message format of a pre-0.11 broker (the value is
    # accepted and ignored: records are always written in format v2).
    version = props.get("log.message.format.version") if isinstance(props, Mapping) else None
    if version is not None and message_format_ignored_warning(version):
        logger.warning("%s", broker_message_format_warning(version))
    return unknown
