"""The cluster side of `wherry reassign` and `wherry elect`: their admin calls.

confluent-kafka's AdminClient serves metadata, DescribeCluster, IncrementalAlterConfigs (the
throttles), ListOffsets and ElectLeaders; librdkafka has no partition-reassignment API, so
AlterPartitionReassignments and ListPartitionReassignments go through kafka-python's
KafkaAdminClient (opened on first use, closed with the service).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
    ResourceType,
)

from wherry.cli.common import AdminService, CommandError, load_properties_file
from wherry.cli.reassign_json import TP

BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LOG_DIR_THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"
TOPIC_THROTTLES = ("leader.replication.throttled.replicas",
                   "follower.replication.throttled.replicas")

# kafka-python's names for the client properties a --command-config file may hold.
_KAFKA_PYTHON_CONFIGS = frozenset({
    "security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
    "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_check_hostname",
    "client_id", "request_timeout_ms", "bootstrap_timeout_ms", "sasl_kerberos_service_name",
})
_CONFIG_ALIASES = {"sasl.username": "sasl_plain_username",
                   "sasl.password": "sasl_plain_password",
                   "ssl.ca.location": "ssl_cafile",
                   "ssl.certificate.location": "ssl_certfile",
                   "ssl.key.location": "ssl_keyfile"}

# Error code -> Kafka's exception class name, for the errors these tools meet.
_EXCEPTION_NAMES: dict[int, str] = {
    KafkaError.ELECTION_NOT_NEEDED: "ElectionNotNeededException",
    KafkaError.PREFERRED_LEADER_NOT_AVAILABLE: "PreferredLeaderNotAvailableException",
    KafkaError.ELIGIBLE_LEADERS_NOT_AVAILABLE: "EligibleLeadersNotAvailableException",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "UnknownTopicOrPartitionException",
    KafkaError.INVALID_REQUEST: "InvalidRequestException",
    KafkaError.NOT_CONTROLLER: "NotControllerException",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    KafkaError.REQUEST_TIMED_OUT: "TimeoutException",
    KafkaError._TIMED_OUT: "TimeoutException",
}


def kafka_exception_string(code: int, message: str) -> str:
    """Java's Throwable.toString() of the exception Kafka raises for `code`."""
    name = _EXCEPTION_NAMES.get(code)
    return f"org.apache.kafka.common.errors.{name}: {message}" if name else message


@dataclass(frozen=True, slots=True)
class PartitionView:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int


@dataclass(frozen=True, slots=True)
class Ongoing:
    """An ongoing reassignment as ListPartitionReassignments reports it."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass
class ReassignService(AdminService):
    """The admin calls of `wherry reassign` and `wherry elect`."""

    CLIENT_ID = "reassign-partitions-tool"

    command_config: Path | None = None
    _kp: Any = field(default=None, repr=False)

    @classmethod
    def open(cls, bootstrap_server: str, command_config: Path | None, timeout_ms: int
             ) -> ReassignService:
        svc = cls.connect(bootstrap_server, command_config, timeout_ms)
        assert isinstance(svc, ReassignService)
        svc.command_config = command_config
        return svc

    def close(self) -> None:
        if self._kp is not None:
            self._kp.close()
            self._kp = None

    # ---------------------------------------------------------------------- cluster and topics

    def brokers(self) -> dict[int, str | None]:
        """Live broker id → rack."""
        md = self.metadata("describeCluster")
        racks: dict[int, str | None] = {}
        for b in md.brokers.values():
            racks[int(b.id)] = None
        try:
            desc = self._wait(self.admin.describe_cluster(request_timeout=self.timeout_s),
                              "describeCluster")
            racks = {int(n.id): (n.rack or None) for n in desc.nodes}
        except KafkaException:
            pass  # metadata's brokers, without racks
        return racks

    def partitions(self, topics: Collection[str] | None = None) -> dict[TP, PartitionView]:
        """Replicas, ISR and leader of every partition (of `topics`, None: all)."""
        md = self.metadata("describeTopics")
        out: dict[TP, PartitionView] = {}
        for name, t in md.topics.items():
            if t.error is not None or (topics is not None and name not in topics):
                continue
            for p in t.partitions.values():
                out[(str(name), int(p.id))] = PartitionView(
                    tuple(int(r) for r in p.replicas), tuple(int(r) for r in p.isrs),
                    int(p.leader))
        return out

    def log_end_offsets(self, tps: Collection[TP]) -> dict[TP, int]:
        if not tps:
            return {}
        futs = self.admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest()
                                        for t, p in tps}, request_timeout=self.timeout_s)
        out: dict[TP, int] = {}
        for tp, fut in futs.items():
            try:
                out[(str(tp.topic), int(tp.partition))] = int(self._wait(fut, "listOffsets").offset)
            except KafkaException:
                continue
        return out

    # ------------------------------------------------------------------------- reassignments

    def _kafka_python(self) -> Any:
        if self._kp is None:
            from kafka.admin import KafkaAdminClient
            from kafka.errors import KafkaError as KPError

            conf: dict[str, Any] = {}
            for key, value in load_properties_file(self.command_config).items():
                name = _CONFIG_ALIASES.get(key, key.replace(".", "_"))
                if name in _KAFKA_PYTHON_CONFIGS:
                    conf[name] = int(value) if name.endswith("_ms") else value
            conf.setdefault("client_id", self.CLIENT_ID)
            conf.setdefault("request_timeout_ms", self.timeout_ms)
            conf.setdefault("bootstrap_timeout_ms", self.timeout_ms)
            try:
                self._kp = KafkaAdminClient(bootstrap_servers=self.bootstrap_server.split(","),
                                            **conf)
            except KPError as e:
                raise self._timed_out("listPartitionReassignments", str(e)) from e
        return self._kp

    def _kp_call(self, call: str, fn: str, *args: Any, **kwargs: Any) -> Any:
        from kafka.errors import KafkaError as KPError
        from kafka.errors import KafkaTimeoutError

        try:
            return getattr(self._kafka_python(), fn)(*args, timeout_ms=self.timeout_ms, **kwargs)
        except KafkaTimeoutError as e:
            raise self._timed_out(call, str(e)) from e
        except KPError as e:
            raise CommandError(f"{call} failed: {_kp_error_text(e)}") from e

    def list_reassignments(self, tps: Collection[TP] | None = None) -> dict[TP, Ongoing]:
        from kafka import TopicPartition as KPTopicPartition

        arg = None if tps is None else [KPTopicPartition(t, p) for t, p in sorted(tps)]
        result = self._kp_call("listPartitionReassignments", "list_partition_reassignments",
                               arg)
        return {(str(tp.topic), int(tp.partition)): Ongoing(
                    tuple(r["replicas"]), tuple(r["adding_replicas"]),
                    tuple(r["removing_replicas"]))
                for tp, r in result.items()}

    def alter_reassignments(self, targets: Mapping[TP, Sequence[int] | None]
                            ) -> dict[TP, str | None]:
        """AlterPartitionReassignments (None: cancel); partition → error text or None."""
        from kafka import TopicPartition as KPTopicPartition

        request = {KPTopicPartition(t, p): (None if r is None else list(r))
                   for (t, p), r in sorted(targets.items())}
        result = self._kp_call("alterPartitionReassignments", "alter_partition_reassignments",
                               request)
        out: dict[TP, str | None] = {}
        for tp in targets:
            err = result.get(KPTopicPartition(*tp), None)
            out[tp] = None if err is None else _kp_error_text(err)
        return out

    # ----------------------------------------------------------------------------- throttles

    def _alter_configs(self, resources: list[ConfigResource]) -> None:
        """IncrementalAlterConfigs: topics in one call, each broker in a call of its own
        (librdkafka sends a broker's configs to that broker and allows one per call)."""
        topics = [r for r in resources if r.restype != ResourceType.BROKER]
        calls = [[r] for r in resources if r.restype == ResourceType.BROKER]
        for batch in ([topics] if topics else []) + calls:
            futs = self.admin.incremental_alter_configs(batch, request_timeout=self.timeout_s)
            for fut in futs.values():
                self._wait(fut, "incrementalAlterConfigs")

    def set_topic_throttles(self, leader: Mapping[str, str], follower: Mapping[str, str]
                            ) -> None:
        resources = []
        for topic in sorted(set(leader) | set(follower)):
            entries = [ConfigEntry(name, values[topic],
                                   incremental_operation=AlterConfigOpType.SET)
                       for name, values in zip(TOPIC_THROTTLES, (leader, follower), strict=True)
                       if topic in values]
            resources.append(ConfigResource(ResourceType.TOPIC, topic,
                                            incremental_configs=entries))
        self._alter_configs(resources)

    def set_broker_throttles(self, brokers: Collection[int], rate: int) -> None:
        self._alter_configs([
            ConfigResource(ResourceType.BROKER, str(b), incremental_configs=[
                ConfigEntry(name, str(rate), incremental_operation=AlterConfigOpType.SET)
                for name in BROKER_THROTTLES])
            for b in sorted(brokers)])

    def set_log_dir_throttle(self, brokers: Collection[int], rate: int) -> None:
        """The copy rate of moves between the brokers' log dirs (Kafka's
        modifyLogDirThrottle)."""
        self._alter_configs([
            ConfigResource(ResourceType.BROKER, str(b), incremental_configs=[
                ConfigEntry(LOG_DIR_THROTTLE, str(rate),
                            incremental_operation=AlterConfigOpType.SET)])
            for b in sorted(brokers)])

    def clear_broker_throttles(self, brokers: Collection[int]) -> None:
        """The replication throttles and the log-dir copy throttle (Kafka's
        clearBrokerLevelThrottles)."""
        self._alter_configs([
            ConfigResource(ResourceType.BROKER, str(b), incremental_configs=[
                ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
                for name in (*BROKER_THROTTLES, LOG_DIR_THROTTLE)])
            for b in sorted(brokers)])

    def clear_topic_throttles(self, topics: Collection[str]) -> None:
        self._alter_configs([
            ConfigResource(ResourceType.TOPIC, t, incremental_configs=[
                ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
                for name in TOPIC_THROTTLES])
            for t in sorted(topics)])

    # ------------------------------------------------------------------------------ election

    def elect_leaders(self, unclean: bool, tps: Collection[TP] | None
                      ) -> dict[TP, tuple[int, str] | None]:
        """ElectLeaders; partition → None (elected) or (error code, Kafka's error string)."""
        kind = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
        arg = None if tps is None else [TopicPartition(t, p) for t, p in sorted(tps)]
        # confluent-kafka 2.16.1 elect_leaders fails with any timeout keyword (a C argument-
        # parsing bug: "function takes at most 4 arguments" / SystemError); _wait bounds it.
        fut = self.admin.elect_leaders(kind, arg)
        result = self._wait(fut, "electLeaders")
        out: dict[TP, tuple[int, str] | None] = {}
        for tp, err in result.items():
            key = (str(tp.topic), int(tp.partition))
            if err is None:
                out[key] = None
            else:
                # confluent-kafka gives a KafkaError, or a KafkaException wrapping one.
                kerr = (
                    err
                    if isinstance(err, KafkaError)
                    else err.args[0]
                    if getattr(err, "args", None) and isinstance(err.args[0], KafkaError)
                    else None
                )
                code = int(kerr.code()) if kerr is not None else -1
                text = str(kerr.str()) if kerr is not None else str(err)
                out[key] = (code, kafka_exception_string(code, text))
        return out


def _kp_error_text(err: Any) -> str:
    """kafka-python's error (class or instance) as a message: Kafka's description of the error
    code, plus the exception's own detail when it has one."""
    description = str(getattr(err, "description", "") or "")
    if isinstance(err, BaseException):
        text = str(err)
        if not description:
            return text or type(err).__name__
        _, _, detail = text.partition(": ")
        return f"{description} ({detail})" if detail else description
    return description or str(err)
