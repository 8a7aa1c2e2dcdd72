"""Broker configuration: Kafka's names, a `server.properties` file, overrides.

Precedence: defaults < properties file < `--override key=value` < friendly CLI flags.
Broker-level `log.*` settings are the defaults for the matching topic configs
(`log.segment.bytes` → `segment.bytes`, ...), as in Kafka (see `LogConfig.from_server_props`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wherry.coordination.zk_acl import ZkAclConfigError, ZkSecurity, zk_security_from_props
from wherry.log.config import ConfigError, LogConfig
from wherry.observability.service import HttpEndpoint, parse_http_listeners
from wherry.server.listener_security import SecurityConfigError, check_names


class BrokerConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


def parse_listeners(value: str) -> list[Endpoint]:
    """`PLAINTEXT://127.0.0.1:9092,OTHER://host:port` → endpoints."""
    out: list[Endpoint] = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        if "://" not in item:
            raise BrokerConfigError(f"listener {item!r} must look like PLAINTEXT://host:port")
        name, rest = item.split("://", 1)
        host, sep, port = rest.rpartition(":")
        if not sep or not port.isdigit():
            raise BrokerConfigError(f"listener {item!r} has no port")
        host = host.strip("[]")
        out.append(Endpoint(name.upper(), host or "127.0.0.1", int(port)))
    if not out:
        raise BrokerConfigError("no listeners configured")
    return out


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-style `.properties` content (`k=v` or `k:v`, `#`/`!` comments)."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"^((?:\\.|[^=:\s\\])+)\s*[=:\s]\s*(.*)$", line)
        if match is None:
            props[line] = ""
            continue
        key = re.sub(r"\\(.)", r"\1", match.group(1))
        props[key] = match.group(2)
    return props


def read_properties(path: Path) -> dict[str, str]:
    return parse_properties(path.read_text(encoding="utf-8"))


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise BrokerConfigError(f"expected true or false, got {v!r}")


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int = 0
    listeners: tuple[Endpoint, ...] = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    advertised_listeners: tuple[Endpoint, ...] | None = None
    log_dirs: tuple[Path, ...] = (Path("wherry-data"),)
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
    transactional_id_expiration_ms: int = 604_800_000
    producer_id_expiration_ms: int = 86_400_000
    cluster_id: str | None = None
    rack: str | None = None
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
    # Auto leader rebalance (SPEC H10; Kafka's names and defaults).
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    # Controlled shutdown (SPEC H11, Kafka's names and defaults): leaderships moved away by
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
    # Topic-config defaults derived from broker `log.*` settings.
    log_defaults: LogConfig = field(default_factory=LogConfig)
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
        """Where broker-level state (the embedded metadata store, meta.properties) lives."""
        return self.log_dirs[0]

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> BrokerConfig:
        kw: dict[str, Any] = {}
        p = dict(props)

        def take(key: str, conv: Any, name: str | None = None) -> None:
            """Convert ``key`` if given into the attribute ``name`` (by default the key with
            underscores for dots)."""
            name = name or key.replace(".", "_")
            if key in p:
                try:
                    kw[name] = conv(p[key])
                except (ValueError, BrokerConfigError) as e:
                    raise BrokerConfigError(f"invalid value {p[key]!r} for {key}: {e}") from e

        take("broker.id", int)
        take("node.id", int, "broker_id")
        take("listeners", lambda v: tuple(parse_listeners(v)))
        take("advertised.listeners", lambda v: tuple(parse_listeners(v)))
        take("http.listeners", parse_http_listeners)
        take("log.dirs", lambda v: tuple(Path(x.strip()) for x in v.split(",") if x.strip()))
        if "log.dirs" not in p:
            take("log.dir", lambda v: (Path(v.strip()),), "log_dirs")
        take("num.partitions", int)
        take("default.replication.factor", int)
        take("auto.create.topics.enable", _bool)
        take("delete.topic.enable", _bool)
        take("auto.leader.rebalance.enable", _bool)
        take("leader.imbalance.check.interval.seconds", int)
        take("leader.imbalance.per.broker.percentage", int)
        take("socket.request.max.bytes", int)
        take("log.retention.check.interval.ms", int)
        take("log.flush.scheduler.interval.ms", int)
        take("log.cleaner.enable", _bool)
        for key in (
            "log.cleaner.backoff.ms",
            "log.cleaner.dedupe.buffer.size",
            "log.cleaner.threads",
            "log.flush.offset.checkpoint.interval.ms",
            "replica.high.watermark.checkpoint.interval.ms",
            "replica.lag.time.max.ms",
            "producer.id.expiration.ms",
            "replication.quota.window.num",
            "replication.quota.window.size.seconds",
        ):
            take(key, int)
        take("cluster.id", str)
        take("broker.rack", str, "rack")
        take("zookeeper.connect", lambda v: v.strip() or None)
        take("controlled.shutdown.enable", _bool)
        take("controlled.shutdown.max.retries", int)
        take("controlled.shutdown.retry.backoff.ms", int)
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
        ):
            take(key, int)
        for key, minimum in (
            ("offsets_topic_num_partitions", 1),
            ("offsets_topic_replication_factor", 1),
            ("offsets_topic_segment_bytes", 1),
            ("offsets_retention_minutes", 1),
            ("offsets_retention_check_interval_ms", 1),
            ("offsets_commit_timeout_ms", 1),
            ("offsets_load_buffer_size", 1),
            ("group_initial_rebalance_delay_ms", 0),
            ("group_max_size", 1),
            ("log_cleaner_backoff_ms", 1),
            ("log_cleaner_dedupe_buffer_size", 1),
            ("log_cleaner_threads", 0),
            ("zookeeper_session_timeout_ms", 1),
            ("zookeeper_connection_timeout_ms", 1),
            ("controller_socket_timeout_ms", 1),
            ("leader_imbalance_check_interval_seconds", 1),
            ("leader_imbalance_per_broker_percentage", 0),
            ("controlled_shutdown_max_retries", 0),
            ("controlled_shutdown_retry_backoff_ms", 0),
            ("replication_quota_window_num", 1),
            ("replication_quota_window_size_seconds", 1),
        ):
            if kw.get(key, minimum) < minimum:
                raise BrokerConfigError(f"{key.replace('_', '.')} must be at least {minimum}")
        if kw.get("num_partitions", 1) < 1:
            raise BrokerConfigError("num.partitions must be at least 1")
        if kw.get("socket_request_max_bytes", 1) < 1:
            raise BrokerConfigError("socket.request.max.bytes must be positive")

        try:
            kw["log_defaults"] = LogConfig.from_server_props(p)
        except ConfigError as e:
            raise BrokerConfigError(str(e)) from e
        kw["raw"] = p
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
        cfg = cls(**kw)
        if cfg.default_replication_factor < 1:
            raise BrokerConfigError("default.replication.factor must be at least 1")
        return cfg


QUICKSTART_DEFAULTS: Mapping[str, str] = {
    # Kafka's code default is 3 ("internal topic creation will fail until the cluster size
    # meets this replication factor requirement"); the config/server.properties Kafka ships
    # sets 1 so that a single broker works. Without a properties file, wherry runs with those
    # shipped settings.
    "offsets.topic.replication.factor": "1",
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
    """Kafka cluster ids are 16 random bytes in URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
