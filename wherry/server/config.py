"""Broker configuration: Kafka's names, a `server.properties` file, overrides.

Precedence: defaults < properties file < `--override key=value` < friendly CLI flags.
Broker-level `log.*` settings are the defaults for the matching topic configs
(`log.segment.bytes` → `segment.bytes`, ...), as in Kafka (see `LogConfig.from_server_props`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wherry.common import java_properties
from wherry.common.record import frozen_record
from wherry.log.config import ConfigError, ConfigType, LogConfig
from wherry.observability.endpoints import HttpEndpoint, parse_http_listeners
from wherry.server.config_keys import FETCHER_KEYS
from wherry.server.connection_limits import ConnectionLimits, LimitConfigError, limits_from_props
from wherry.server.listener_security import SecurityConfigError, check_names

if TYPE_CHECKING:
    from wherry.coordination.zk_acl import ZkSecurity

# The ZooKeeper security settings (`coordination.zk_acl`, imported only when one is given).
ZK_SECURITY_KEYS = ("zookeeper.set.acl", "zookeeper.digest.username", "zookeeper.digest.password")


class BrokerConfigError(ValueError):
    """A setting the broker cannot start with; the message is one line naming the key, in
    Kafka's ConfigException wording where a value is wrong:
    `Invalid value V for configuration K: M`."""


MAX_PORT = 65_535
INT_RANGE = (-(2**31), 2**31 - 1)
NONROUTABLE_HOSTS = ("0.0.0.0", "::")


LONG_RANGE = (-(2**63), 2**63 - 1)


def _number(v: str, kind: str, bounds: tuple[int, int]) -> int:
    text = v.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not bounds[0] <= int(text) <= bounds[1]:
        raise BrokerConfigError(f"Not a number of type {kind}")
    return int(text)


def _int(v: str) -> int:
    """An INT setting (Kafka's ConfigDef.Type.INT)."""
    return _number(v, "INT", INT_RANGE)


def _long(v: str) -> int:
    """A LONG setting: Kafka's durations in ms and most sizes."""
    return _number(v, "LONG", LONG_RANGE)


def _is_long(key: str) -> bool:
    """Whether a numeric broker setting is a LONG in Kafka (durations in ms and most sizes)."""
    return key.endswith((".ms", ".bytes")) and key != "socket.request.max.bytes"


def _int_or_long(key: str) -> Any:
    return _long if _is_long(key) else _int


def number_type(key: str) -> ConfigType:
    """The DescribeConfigs type of a numeric broker setting: LONG or INT."""
    return ConfigType.LONG if _is_long(key) else ConfigType.INT


@frozen_record(slots=True)
class Endpoint:
    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


def parse_listeners(value: str) -> list[Endpoint]:
    """`PLAINTEXT://127.0.0.1:9092,OTHER://host:port` → endpoints (ports 0-65535; 0: chosen
    by the OS)."""
    out: list[Endpoint] = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        if "://" not in item:
            raise BrokerConfigError(f"listener {item} must look like PLAINTEXT://host:port")
        name, rest = item.split("://", 1)
        host, sep, port = rest.rpartition(":")
        if not sep or not port.isdigit():
            raise BrokerConfigError(f"listener {item} has no port")
        if int(port) > MAX_PORT:
            raise BrokerConfigError(f"port {int(port)} of listener {item} is out of range "
                                    f"(0-{MAX_PORT})")
        host = host.strip("[]")
        out.append(Endpoint(name.upper(), host or "127.0.0.1", int(port)))
    if not out:
        raise BrokerConfigError("no listeners configured")
    return out


def parse_properties(text: str) -> dict[str, str]:
    """Parse `.properties` text as Java does (`common/java_properties.py`), each value trimmed
    as Kafka's ConfigDef trims the values it parses."""
    try:
        return {k: v.strip() for k, v in java_properties.parse_properties(text).items()}
    except java_properties.PropertiesError as e:
        raise BrokerConfigError(str(e)) from None


def read_properties(path: Path) -> dict[str, str]:
    """A `.properties` file read as Java reads it (Latin-1, `\\uXXXX` escapes). A file that
    cannot be read raises BrokerConfigError naming the path and why."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        why = "does not exist" if isinstance(e, FileNotFoundError) else (
            "is a directory" if isinstance(e, IsADirectoryError) else
            f"cannot be read: {e.strerror or e}")
        raise BrokerConfigError(f"properties file {path} {why}") from None
    try:
        return parse_properties(data.decode("latin-1"))
    except BrokerConfigError as e:
        raise BrokerConfigError(f"properties file {path}: {e}") from None


def _replica_selector_class(value: str) -> str | None:
    """`replica.selector.class`: one of the selectors wherry has (ValueError otherwise)."""
    from wherry.replication.replica_selector import replica_selector

    return value.strip() if replica_selector(value) is not None else None


def invalid(key: str, value: object, message: str) -> BrokerConfigError:
    """Kafka's ConfigException wording: `Invalid value V for configuration K: M`."""
    return BrokerConfigError(f"Invalid value {str(value).strip()} for configuration {key}: "
                             f"{message}")


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise BrokerConfigError("Expected value to be either true or false")


@frozen_record
class BrokerConfig:
    """The broker's static configuration, Kafka's keys as fields (`from_props`); `raw` keeps
    every setting as given. (A `frozen_record`: a dataclass's methods for its 70-odd fields
    took milliseconds of every start to compile.)"""

    broker_id: int = 0
    listeners: tuple[Endpoint, ...] = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    advertised_listeners: tuple[Endpoint, ...] | None = None
    log_dirs: tuple[Path, ...] = (Path("wherry-data"),)
    metadata_log_dir: Path | None = None
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    socket_request_max_bytes: int = 104_857_600
    log_retention_check_interval_ms: int = 300_000
    # Log cleaner (compaction); log.cleaner.threads is accepted and ignored (one cleaner).
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_dedupe_buffer_size: int = 134_217_728
    log_cleaner_threads: int = 1
    log_flush_scheduler_interval_ms: int = 1000
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    log_flush_start_offset_checkpoint_interval_ms: int = 60_000
    replica_lag_time_max_ms: int = 30_000
    # KIP-73 replication quotas: the rate's samples and their length (Kafka's names/defaults).
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    quota_window_num: int = 11  # client quotas' sampled windows
    quota_window_size_seconds: int = 1
    # Transaction coordinator (Kafka's names and code defaults; see QUICKSTART_DEFAULTS).
    transactional_id_expiration_ms: int = 604_800_000
    transaction_max_timeout_ms: int = 900_000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104_857_600
    transaction_state_log_load_buffer_size: int = 5_242_880
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # The cluster's `transaction.version` feature level (Kafka sets it with its features
    # tool; a new Kafka 4 cluster finalizes 2: transactions v2, KIP-890), and KIP-890's check
    # that an older client's transactional batch belongs to an ongoing transaction.
    transaction_version: int = 2
    transaction_partition_verification_enable: bool = True
    producer_id_expiration_ms: int = 86_400_000
    cluster_id: str | None = None
    rack: str | None = None
    # KIP-392: the rule that sends consumers to another replica (None: always the leader).
    replica_selector_class: str | None = None
    # Coordination: the embedded store unless zookeeper.connect is set (Kafka's names and
    # defaults; zookeeper.connection.timeout.ms defaults to the session timeout).
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 18_000
    zookeeper_connection_timeout_ms: int | None = None
    # zookeeper.set.acl (Kafka's) with the broker's ZooKeeper identity,
    # zookeeper.digest.username/password (wherry's; see coordination/zk_acl.py).
    zookeeper_security: ZkSecurity | None = None
    # The controller's connections to brokers (Kafka's controller.socket.timeout.ms).
    controller_socket_timeout_ms: int = 30_000
    # Auto leader rebalance (Kafka's names and defaults).
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    # Controlled shutdown (Kafka's names and defaults): leaderships moved away by
    # the controller before the broker stops; max.retries is the number of attempts.
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5_000
    # Group coordinator (Kafka's names and code defaults; see QUICKSTART_DEFAULTS).
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104_857_600
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5_000
    offsets_load_buffer_size: int = 5_242_880
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2_147_483_647
    # KIP-848 consumer groups (Kafka 4's group.consumer.* names and defaults)
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    group_consumer_migration_policy: str = "bidirectional"
    group_consumer_max_size: int = 2_147_483_647
    # Topic-config defaults derived from broker `log.*` settings.
    log_defaults: LogConfig = field(default_factory=LogConfig)
    # Connection and request-memory limits (connections.max.idle.ms, max.connections*,
    # max.connection.creation.rate, queued.max.request.bytes: server/connection_limits.py)
    connection_limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    # Every setting as given (file + overrides), for DescribeConfigs.
    raw: Mapping[str, str] = field(default_factory=dict)

    # The HTTP listener(s) for /metrics, /healthz, /readyz and the console (`http.listeners`,
    # e.g. http://127.0.0.1:9644); none by default (`wherry server` sets one).
    http_listeners: tuple[HttpEndpoint, ...] = ()

    # The listener brokers reach each other on (inter.broker.listener.name /
    # security.inter.broker.protocol; the only listener when there is one).
    inter_broker_listener: str = "PLAINTEXT"

    @property
    def advertised(self) -> tuple[Endpoint, ...]:
        return self.advertised_listeners or self.listeners

    @property
    def zookeeper_connection_timeout(self) -> int:
        """zookeeper.connection.timeout.ms in force (Kafka: the session timeout when unset)."""
        if self.zookeeper_connection_timeout_ms is None:
            return self.zookeeper_session_timeout_ms
        return self.zookeeper_connection_timeout_ms

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @property
    def data_dir(self) -> Path:
        """Where broker-level state (meta.properties, state-change.log) lives."""
        return self.log_dirs[0]

    @property
    def metadata_dir(self) -> Path:
        """Where the embedded metadata store lives (`<dir>/__meta/metadata.db`):
        `metadata.log.dir` (Kafka's name for the metadata log's dir), else the first log dir."""
        return self.metadata_log_dir or self.log_dirs[0]

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> BrokerConfig:
        kw: dict[str, Any] = {}
        p = dict(props)

        def take(key: str, conv: Any, name: str | None = None) -> None:
            """Convert ``key`` if given into the attribute ``name`` (by default the key with
            underscores for dots)."""
            name = name or key.replace(".", "_")
            if conv is _int:
                conv = _int_or_long(key)
            if key in p:
                try:
                    kw[name] = conv(p[key])
                except (ValueError, BrokerConfigError) as e:
                    raise invalid(key, p[key], str(e)) from e

        def at_least(key: str, minimum: int) -> None:
            name = key.replace(".", "_")
            if name in kw and kw[name] < minimum:
                raise invalid(key, p[key], f"Value must be at least {minimum}")

        take("broker.id", _int)
        at_least("broker.id", 0)
        take("node.id", _int, "broker_id")
        if "node.id" in p and kw["broker_id"] < 0:
            raise invalid("node.id", p["node.id"], "Value must be at least 0")
        take("listeners", lambda v: tuple(parse_listeners(v)))
        take("advertised.listeners", lambda v: tuple(parse_listeners(v)))
        take("http.listeners", parse_http_listeners)
        take("log.dirs", lambda v: tuple(Path(x.strip()) for x in v.split(",") if x.strip()))
        if "log.dirs" not in p:
            take("log.dir", lambda v: (Path(v.strip()),), "log_dirs")
        take("metadata.log.dir", lambda v: Path(v.strip()) if v.strip() else None)
        take("num.partitions", _int)
        take("default.replication.factor", _int)
        take("auto.create.topics.enable", _bool)
        take("delete.topic.enable", _bool)
        take("auto.leader.rebalance.enable", _bool)
        take("leader.imbalance.check.interval.seconds", _int)
        take("leader.imbalance.per.broker.percentage", _int)
        take("socket.request.max.bytes", _int)
        take("log.retention.check.interval.ms", _int)
        take("log.flush.scheduler.interval.ms", _int)
        take("log.cleaner.enable", _bool)
        for key in (
            "log.cleaner.backoff.ms",
            "log.cleaner.dedupe.buffer.size",
            "log.cleaner.threads",
            "log.flush.offset.checkpoint.interval.ms",
            "log.flush.start.offset.checkpoint.interval.ms",
            "replica.high.watermark.checkpoint.interval.ms",
            "replica.lag.time.max.ms",
            "producer.id.expiration.ms",
            "replication.quota.window.num",
            "replication.quota.window.size.seconds",
            "quota.window.num",
            "quota.window.size.seconds",
        ):
            take(key, _int)
        take("cluster.id", str)
        take_consumer_group_keys(p, take, at_least)
        take_transaction_keys(take)
        take("broker.rack", str, "rack")
        take("replica.selector.class", _replica_selector_class)
        take("zookeeper.connect", lambda v: v.strip() or None)
        take("controlled.shutdown.enable", _bool)
        take("controlled.shutdown.max.retries", _int)
        take("controlled.shutdown.retry.backoff.ms", _int)
        for key in (
            "zookeeper.session.timeout.ms",
            "zookeeper.connection.timeout.ms",
            "controller.socket.timeout.ms",
            "offsets.topic.num.partitions",
            "offsets.topic.replication.factor",
            "offsets.topic.segment.bytes",
            "offsets.retention.minutes",
            "offsets.retention.check.interval.ms",
            "offsets.commit.timeout.ms",
            "offsets.load.buffer.size",
            "offset.metadata.max.bytes",
            "group.min.session.timeout.ms",
            "group.max.session.timeout.ms",
            "group.initial.rebalance.delay.ms",
            "group.max.size",
            "transactional.id.expiration.ms",
            "transaction.max.timeout.ms",
            "transaction.state.log.num.partitions",
            "transaction.state.log.replication.factor",
            "transaction.state.log.min.isr",
            "transaction.state.log.segment.bytes",
            "transaction.state.log.load.buffer.size",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "transaction.remove.expired.transaction.cleanup.interval.ms",
        ):
            take(key, _int)
        for key, minimum in (
            ("offsets.topic.num.partitions", 1),
            ("offsets.topic.replication.factor", 1),
            ("offsets.topic.segment.bytes", 1),
            ("offsets.retention.minutes", 1),
            ("offsets.retention.check.interval.ms", 1),
            ("offsets.commit.timeout.ms", 1),
            ("offsets.load.buffer.size", 1),
            ("group.initial.rebalance.delay.ms", 0),
            ("group.max.size", 1),
            ("transactional.id.expiration.ms", 1),
            ("transaction.max.timeout.ms", 1),
            ("transaction.state.log.num.partitions", 1),
            ("transaction.state.log.replication.factor", 1),
            ("transaction.state.log.min.isr", 1),
            ("transaction.state.log.segment.bytes", 1),
            ("transaction.state.log.load.buffer.size", 1),
            ("transaction.abort.timed.out.transaction.cleanup.interval.ms", 1),
            ("transaction.remove.expired.transaction.cleanup.interval.ms", 1),
            ("log.cleaner.backoff.ms", 1),
            ("log.cleaner.dedupe.buffer.size", 1),
            ("log.cleaner.threads", 0),
            ("zookeeper.session.timeout.ms", 1),
            ("zookeeper.connection.timeout.ms", 1),
            ("controller.socket.timeout.ms", 1),
            ("leader.imbalance.check.interval.seconds", 1),
            ("leader.imbalance.per.broker.percentage", 0),
            ("controlled.shutdown.max.retries", 0),
            ("controlled.shutdown.retry.backoff.ms", 0),
            ("replication.quota.window.num", 1),
            ("replication.quota.window.size.seconds", 1),
            ("quota.window.num", 1),
            ("quota.window.size.seconds", 1),
            ("num.partitions", 1),
            ("default.replication.factor", 1),
            ("socket.request.max.bytes", 1),
            ("log.retention.check.interval.ms", 1),
            ("log.flush.scheduler.interval.ms", 1),
            ("log.flush.offset.checkpoint.interval.ms", 1),
            ("log.flush.start.offset.checkpoint.interval.ms", 1),
            ("replica.high.watermark.checkpoint.interval.ms", 1),
            ("replica.lag.time.max.ms", 1),
            ("producer.id.expiration.ms", 1),
            ("offset.metadata.max.bytes", 0),
            ("group.min.session.timeout.ms", 0),
            ("group.max.session.timeout.ms", 0),
        ):
            at_least(key, minimum)
        for key in FETCHER_KEYS:  # read by the replica fetchers (FetcherConfig)
            if key in p:
                try:
                    if _int(p[key]) < 0:  # all INT in Kafka
                        raise BrokerConfigError("Value must be at least 0")
                except BrokerConfigError as e:
                    raise invalid(key, p[key], str(e)) from e
        # Kafka's KafkaConfig requirement: a fetch's long poll fits in its request timeout.
        socket_ms = p.get("replica.socket.timeout.ms", "30000")
        if _int(socket_ms) < _int(p.get("replica.fetch.wait.max.ms", "500")):
            raise invalid("replica.socket.timeout.ms", socket_ms,
                          "replica.socket.timeout.ms should always be at least "
                          "replica.fetch.wait.max.ms to prevent unnecessary socket timeouts")

        try:
            kw["log_defaults"] = LogConfig.from_server_props(p)
        except ConfigError as e:
            raise BrokerConfigError(str(e)) from e
        kw["raw"] = p
        try:
            kw["connection_limits"] = limits_from_props(
                p, kw.get("socket_request_max_bytes", cls.socket_request_max_bytes)
            )
        except LimitConfigError as e:
            raise BrokerConfigError(str(e)) from e
        if any(key in p for key in ZK_SECURITY_KEYS):  # none given: no ZooKeeper security
            from wherry.coordination.zk_acl import ZkAclConfigError, zk_security_from_props

            try:
                kw["zookeeper_security"] = zk_security_from_props(p)
            except ZkAclConfigError as e:
                raise BrokerConfigError(str(e)) from e
        listeners = kw.get("listeners", cls.listeners)
        try:
            kw["inter_broker_listener"] = check_names(
                p, listeners, kw.get("advertised_listeners") or listeners
            )
        except SecurityConfigError as e:
            raise BrokerConfigError(str(e)) from e
        if p.get("authorizer.class.name", "").strip():
            from wherry.security.acl_authorizer import authorizer_from_config

            try:  # an unknown authorizer.class.name, a bad super.users (no I/O)
                authorizer_from_config(p)
            except ValueError as e:
                raise BrokerConfigError(str(e)) from e
        cfg = cls(**kw)
        for ep in cfg.advertised:
            if ep.host in NONROUTABLE_HOSTS:  # Kafka's KafkaConfig check
                key = "advertised.listeners" if cfg.advertised_listeners else "listeners"
                raise BrokerConfigError(
                    f"Invalid value {p.get(key, ep)} for configuration {key}: "
                    f"advertised.listeners cannot use the nonroutable meta-address {ep.host}. "
                    "Use a routable IP address (set advertised.listeners)."
                )
        return cfg


QUICKSTART_DEFAULTS: Mapping[str, str] = {
    # Kafka's code default is 3 ("internal topic creation will fail until the cluster size
    # meets this replication factor requirement"); the config/server.properties Kafka ships
    # sets 1 so that a single broker works. Without a properties file, wherry runs with those
    # shipped settings.
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


def load_config(
    properties_file: Path | None = None,
    overrides: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Settings from a properties file (or, without one, `QUICKSTART_DEFAULTS`) + overrides."""
    props: dict[str, str] = {}
    if properties_file is not None:
        props.update(read_properties(properties_file))
    else:
        props.update(QUICKSTART_DEFAULTS)
    if overrides:
        props.update(overrides)
    return BrokerConfig.from_props(props)


def new_cluster_id() -> str:
    """Kafka cluster ids are a random (version 4) UUID's 16 bytes in URL-safe base64 without
    padding. The bytes are made here rather than by `uuid.uuid4` (the same bits): the `uuid`
    module imports `platform`, which a start has no other use for before it answers."""
    import base64
    import os

    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}
_MIGRATION_POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")


def _assignors(value: str) -> tuple[str, ...]:
    names = tuple(
        _ASSIGNOR_CLASSES.get(n.strip(), n.strip()) for n in value.split(",") if n.strip()
    )
    unknown = [n for n in names if n not in ("uniform", "range")]
    if unknown or not names:
        raise ValueError(f"unknown assignors {unknown}; wherry has uniform and range")
    return names


def _migration_policy(value: str) -> str:
    v = value.strip().lower()
    if v not in _MIGRATION_POLICIES:
        choices = ", ".join(_MIGRATION_POLICIES).upper()
        raise ValueError(f"String must be one of (case insensitive): {choices}")
    return v


def take_consumer_group_keys(p: Mapping[str, str], take: Any, at_least: Any) -> None:
    """The `group.consumer.*` keys of KIP-848 consumer groups."""
    for key in (
        "group.consumer.session.timeout.ms",
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.max.size",
    ):
        take(key, _int)
        at_least(key, 1)
    take("group.consumer.assignors", _assignors)
    take("group.consumer.migration.policy", _migration_policy)


TRANSACTION_VERSIONS = (0, 2)  # the `transaction.version` feature levels this broker supports


def _transaction_version(value: str) -> int:
    level = int(value.strip())
    lo, hi = TRANSACTION_VERSIONS
    if not lo <= level <= hi:
        raise ValueError(f"Value must be between {lo} and {hi}")
    return level


def take_transaction_keys(take: Any) -> None:
    """The transaction version (KIP-890) and the partition verification switch."""
    take("transaction.version", _transaction_version)
    take("transaction.partition.verification.enable", _bool)
