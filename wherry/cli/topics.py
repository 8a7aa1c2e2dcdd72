"""`wherry topics`: a kafka-topics.sh look-alike speaking the Kafka protocol (confluent-kafka).

Subcommands: create, list, describe, alter, delete. Every subcommand takes
`--bootstrap-server HOST:PORT` and `--command-config FILE` (client properties), plus the wherry
extra `--timeout-ms` (overall per-call timeout, default 15 s). Failures print
`Error while executing topic command : <message>` to stderr and exit with status 1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from wherry.cli.common import (
    AdminService,
    CommandError,
    admin_options,
    exits_on_error,
    kafka_error_code,
    parse_kv,
)
from wherry.common.internal_topics import INTERNAL_TOPICS

MAX_REPLICATION_FACTOR = 32767


# --------------------------------------------------------------------------------------------
# Click plumbing


_handle_errors = exits_on_error("Error while executing topic command : ")
_common_options = admin_options("Overall timeout of each request to the cluster (wherry extra).")


class TopicService(AdminService):
    """The admin calls of `wherry topics`."""

    CLIENT_ID = "wherry-topics"

    @property
    def operation_timeout_s(self) -> float:
        """What the broker may spend (e.g. waiting for a new topic's leaders): less than the
        request timeout, so that the broker's own timeout error reaches us first."""
        return max(0.0, self.timeout_s * 0.8)

    def topic_names(self, include: str | None, exclude_internal: bool) -> list[str]:
        md = self.metadata()
        return filter_topics(sorted(md.topics), include, exclude_internal)

    def create(self, topic: NewTopic) -> None:
        futs = self.admin.create_topics([topic], request_timeout=self.timeout_s,
                                        operation_timeout=self.operation_timeout_s)
        for fut in futs.values():
            self._wait(fut, "createTopics")

    def delete(self, topics: Sequence[str]) -> None:
        futs = self.admin.delete_topics(list(topics), request_timeout=self.timeout_s,
                                        operation_timeout=self.operation_timeout_s)
        for fut in futs.values():
            self._wait(fut, "deleteTopics")

    def describe_topics(self, topics: Sequence[str]) -> dict[str, Any]:
        futs = self.admin.describe_topics(TopicCollection(list(topics)),
                                          request_timeout=self.timeout_s)
        return {name: self._wait(fut, "describeTopics") for name, fut in futs.items()}

    def topic_configs(self, topics: Sequence[str]) -> dict[str, dict[str, ConfigEntry]]:
        if not topics:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        futs = self.admin.describe_configs(resources, request_timeout=self.timeout_s)
        return {res.name: self._wait(fut, "describeConfigs") for res, fut in futs.items()}

    def create_partitions(self, new: NewPartitions) -> None:
        futs = self.admin.create_partitions([new], request_timeout=self.timeout_s,
                                            operation_timeout=self.operation_timeout_s)
        for fut in futs.values():
            self._wait(fut, "createPartitions")

    def alter_configs(self, topic: str, entries: list[ConfigEntry]) -> None:
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        futs = self.admin.incremental_alter_configs([res], request_timeout=self.timeout_s)
        for fut in futs.values():
            self._wait(fut, "incrementalAlterConfigs")


def filter_topics(names: Iterable[str], include: str | None, exclude_internal: bool
                  ) -> list[str]:
    """Kafka's IncludeList semantics: `--topic` is a regex (`,` means `|`), matched fully."""
    result = [n for n in names if not (exclude_internal and n in INTERNAL_TOPICS)]
    if include is None:
        return result
    pattern = include.strip().replace(",", "|").replace(" ", "")
    pattern = re.sub(r"^[\"']+", "", pattern)
    pattern = re.sub(r"[\"']+$", "", pattern)
    try:
        regex = re.compile(pattern)
    except re.error:
        return [n for n in result if n == include]
    return [n for n in result if regex.fullmatch(n)]


def _ensure_found(found: Sequence[str], requested: str | None, if_exists: bool) -> None:
    if requested and not found and not if_exists:
        raise CommandError(f"Topic '{requested}' does not exist as expected")


def parse_replica_assignment(text: str) -> list[list[int]]:
    """`0:1,1:2` → [[0, 1], [1, 2]] (partition-major, colon-separated broker ids)."""
    assignment: list[list[int]] = []
    for i, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError as e:
            raise CommandError(f"Invalid replica assignment {text!r}: {part!r} is not "
                               f"a colon-separated list of broker ids") from e
        dupes = sorted({b for b in brokers if brokers.count(b) > 1})
        if dupes:
            raise CommandError("Partition replica lists may not contain duplicate entries: "
                               + ",".join(map(str, dupes)))
        if assignment and len(brokers) != len(assignment[0]):
            raise CommandError(f"Partition {i} has different replication factor: {brokers}")
        assignment.append(brokers)
    return assignment


# --------------------------------------------------------------------------------------------
# Commands


@click.group()
def topics() -> None:
    """Create, delete, describe, or change a topic (like kafka-topics.sh)."""


@topics.command()
@_common_options
@click.option("--topic", required=True, help="The topic to create.")
@click.option("--partitions", type=int, help="Number of partitions (broker default if unset).")
@click.option("--replication-factor", type=int,
              help="Replication factor (broker default if unset).")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="A topic configuration override (repeatable).")
@click.option("--replica-assignment", metavar="B0:B1,B0:B1,...",
              help="Manual assignment: partitions comma-separated, replicas colon-separated.")
@click.option("--if-not-exists", is_flag=True, help="Do nothing if the topic already exists.")
@_handle_errors
def create(
    bootstrap_server: str, command_config: Path | None, timeout_ms: int, topic: str,
    partitions: int | None, replication_factor: int | None, configs: tuple[str, ...],
    replica_assignment: str | None, if_not_exists: bool,
) -> None:
    """Create a topic."""
    if replication_factor is not None and not 1 <= replication_factor <= MAX_REPLICATION_FACTOR:
        raise CommandError(
            f"The replication factor must be between 1 and {MAX_REPLICATION_FACTOR} inclusive")
    if partitions is not None and partitions < 1:
        raise CommandError("The partitions must be greater than 0")
    config = parse_kv(configs, "topic config")
    if replica_assignment is not None:
        if partitions is not None or replication_factor is not None:
            raise CommandError("Option --replica-assignment can't be used with "
                               "--partitions or --replication-factor")
        assignment = parse_replica_assignment(replica_assignment)
        new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment,
                       config=config)
    else:
        new = NewTopic(topic, num_partitions=partitions if partitions is not None else -1,
                       replication_factor=(replication_factor
                                           if replication_factor is not None else -1),
                       config=config)
    if "." in topic and "_" in topic:
        click.echo("WARNING: Due to limitations in metric names, topics with a period ('.') or "
                   "underscore ('_') could collide. To avoid issues it is best to use either, "
                   "but not both.")
    svc = TopicService.connect(bootstrap_server, command_config, timeout_ms)
    try:
        svc.create(new)
    except KafkaException as e:
        if if_not_exists and kafka_error_code(e) == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise
    click.echo(f"Created topic {topic}.")


@topics.command(name="list")
@_common_options
@click.option("--topic", help="Only topics matching this regular expression.")
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics.")
@_handle_errors
def list_(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
          topic: str | None, exclude_internal: bool) -> None:
    """List topics, one per line, sorted."""
    svc = TopicService.connect(bootstrap_server, command_config, timeout_ms)
    for name in svc.topic_names(topic, exclude_internal):
        click.echo(name)


@dataclass(frozen=True, slots=True)
class PartitionView:
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    def line(self, topic: str) -> str:
        leader = "none" if self.leader is None else str(self.leader)
        return (f"\tTopic: {topic}\tPartition: {self.partition}\tLeader: {leader}"
                f"\tReplicas: {','.join(map(str, self.replicas))}"
                f"\tIsr: {','.join(map(str, self.isr))}")


@dataclass(frozen=True, slots=True)
class DescribeFilter:
    under_replicated: bool = False
    unavailable: bool = False
    under_min_isr: bool = False
    at_min_isr: bool = False

    @property
    def any(self) -> bool:
        return self.under_replicated or self.unavailable or self.under_min_isr or self.at_min_isr

    def matches(self, p: PartitionView, live_brokers: frozenset[int], min_isr: int | None
                ) -> bool:
        if not self.any:
            return True
        if self.under_replicated and len(p.isr) < len(p.replicas):
            return True
        if self.unavailable and (p.leader is None or p.leader not in live_brokers):
            return True
        if self.under_min_isr and min_isr is not None and (
                p.leader is None or len(p.isr) < min_isr):
            return True
        return self.at_min_isr and min_isr is not None and len(p.isr) == min_isr


def _partition_views(desc: Any) -> list[PartitionView]:
    views = []
    for info in desc.partitions:
        leader = info.leader.id if info.leader is not None and info.leader.id >= 0 else None
        views.append(PartitionView(
            partition=int(info.id),
            leader=leader,
            replicas=tuple(int(n.id) for n in info.replicas),
            isr=tuple(int(n.id) for n in info.isr),
        ))
    return sorted(views, key=lambda v: v.partition)


def _source_of(entry: ConfigEntry) -> int:
    src: Any = entry.source
    return int(src.value) if isinstance(src, ConfigSource) else int(src)


def _topic_header(name: str, topic_id: Any, parts: Sequence[PartitionView],
                  configs: Mapping[str, ConfigEntry]) -> str:
    overrides = ",".join(
        f"{e.name}={e.value}" for _, e in sorted(configs.items())
        if _source_of(e) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    )
    # Kafka prints topic ids in URL-safe base64; confluent-kafka's str() uses the standard one.
    tid = str(topic_id).replace("+", "-").replace("/", "_") if topic_id is not None else ""
    head = f"Topic: {name}"
    if tid and tid != "AAAAAAAAAAAAAAAAAAAAAA":
        head += f"\tTopicId: {tid}"
    rf = len(parts[0].replicas) if parts else 0
    return f"{head}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: {overrides}"


@topics.command()
@_common_options
@click.option("--topic", help="Topic(s) to describe (regular expression); default all.")
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics.")
@click.option("--if-exists", is_flag=True, help="Do not fail if the topic does not exist.")
@click.option("--under-replicated-partitions", is_flag=True,
              help="Only partitions whose ISR is smaller than the replica set.")
@click.option("--unavailable-partitions", is_flag=True,
              help="Only partitions whose leader is not available.")
@click.option("--under-min-isr-partitions", is_flag=True,
              help="Only partitions whose ISR is smaller than min.insync.replicas.")
@click.option("--at-min-isr-partitions", is_flag=True,
              help="Only partitions whose ISR size equals min.insync.replicas.")
@_handle_errors
def describe(
    bootstrap_server: str, command_config: Path | None, timeout_ms: int, topic: str | None,
    exclude_internal: bool, if_exists: bool, under_replicated_partitions: bool,
    unavailable_partitions: bool, under_min_isr_partitions: bool, at_min_isr_partitions: bool,
) -> None:
    """Describe topics and their partitions (Kafka's output format)."""
    flt = DescribeFilter(under_replicated_partitions, unavailable_partitions,
                         under_min_isr_partitions, at_min_isr_partitions)
    svc = TopicService.connect(bootstrap_server, command_config, timeout_ms)
    md = svc.metadata()
    live = frozenset(int(b) for b in md.brokers)
    names = filter_topics(sorted(md.topics), topic, exclude_internal)
    _ensure_found(names, topic, if_exists)
    if not names:
        return
    descs = svc.describe_topics(names)
    configs = svc.topic_configs(names)
    for name in names:
        desc = descs[name]
        parts = _partition_views(desc)
        cfg = configs.get(name, {})
        min_isr_entry = cfg.get("min.insync.replicas")
        min_isr = None
        if min_isr_entry is not None and min_isr_entry.value is not None:
            try:
                min_isr = int(min_isr_entry.value)
            except ValueError:
                min_isr = None
        if not flt.any:
            click.echo(_topic_header(name, getattr(desc, "topic_id", None), parts, cfg))
        for p in parts:
            if flt.matches(p, live, min_isr):
                click.echo(p.line(name))


@topics.command()
@_common_options
@click.option("--topic", required=True, help="The topic to alter (regular expression).")
@click.option("--partitions", type=int, help="New (larger) number of partitions.")
@click.option("--replica-assignment", metavar="B0:B1,B0:B1,...",
              help="Assignment of all partitions; only the new ones are used.")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="Set a topic config (repeatable).")
@click.option("--delete-config", "delete_configs", multiple=True, metavar="KEY",
              help="Remove a topic config override (repeatable).")
@click.option("--if-exists", is_flag=True, help="Do not fail if the topic does not exist.")
@_handle_errors
def alter(
    bootstrap_server: str, command_config: Path | None, timeout_ms: int, topic: str,
    partitions: int | None, replica_assignment: str | None, configs: tuple[str, ...],
    delete_configs: tuple[str, ...], if_exists: bool,
) -> None:
    """Add partitions to a topic and/or change its configs."""
    if partitions is None and not configs and not delete_configs:
        raise CommandError("At least one of --partitions, --config or --delete-config "
                           "is required with alter")
    if replica_assignment is not None and partitions is None:
        raise CommandError("Option --replica-assignment requires --partitions with alter")
    if partitions is not None and partitions < 1:
        raise CommandError("The partitions must be greater than 0")
    to_set = parse_kv(configs, "topic config")
    assignment = (parse_replica_assignment(replica_assignment)
                  if replica_assignment is not None else None)
    svc = TopicService.connect(bootstrap_server, command_config, timeout_ms)
    names = svc.topic_names(topic, exclude_internal=False)
    _ensure_found(names, topic, if_exists)
    for name in names:
        if partitions is not None:
            if assignment is not None:
                current = len(svc.describe_topics([name])[name].partitions)
                new = NewPartitions(name, partitions, replica_assignment=assignment[current:])
            else:
                new = NewPartitions(name, partitions)
            svc.create_partitions(new)
        if to_set or delete_configs:
            entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                       for k, v in to_set.items()]
            entries += [ConfigEntry(k.strip(), None, incremental_operation=AlterConfigOpType.DELETE)
                        for k in delete_configs]
            svc.alter_configs(name, entries)
            click.echo(f"Completed updating config for topic {name}.")


@topics.command()
@_common_options
@click.option("--topic", required=True, help="The topic to delete (regular expression).")
@click.option("--if-exists", is_flag=True, help="Do not fail if the topic does not exist.")
@_handle_errors
def delete(bootstrap_server: str, command_config: Path | None, timeout_ms: int, topic: str,
           if_exists: bool) -> None:
    """Delete a topic."""
    svc = TopicService.connect(bootstrap_server, command_config, timeout_ms)
    names = svc.topic_names(topic, exclude_internal=False)
    _ensure_found(names, topic, if_exists)
    if not names:
        return
    svc.delete(names)
    for name in names:
        click.echo(f"Deleted topic {name}.")
