"""`wherry get-offsets`: a kafka-get-offsets.sh look-alike (Kafka's GetOffsetShell).

For the partitions the filters pick, one line `topic:partition:offset`, in Kafka's order (by
the text `topic-partition`): the log end offset by default (`--time -1` or `latest`), the log
start offset (`-2`, `earliest`), the offset of the record with the largest timestamp (`-3`,
`max-timestamp`), or the first offset whose timestamp is at or after a time in ms. A partition
with no such offset (a time after every record) gets no line; one whose answer is an error
gets a "Skip getting offsets ..." line on stderr. Filters: `--topic REGEX` with `--partitions
0,1`, or `--topic-partitions` patterns (`orders:0,events:1-3,:0`, a range's upper end
excluded); internal topics are included unless `--exclude-internal-topics`. Errors are
`Error: ...` on stderr with exit status 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import click
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from wherry.cli.common import (
    AdminService,
    CommandError,
    admin_options,
    exits_on_error,
    kafka_error_message,
)
from wherry.cli.topics import filter_topics
from wherry.common.internal_topics import INTERNAL_TOPICS

__all__ = ["PartitionFilter", "get_offsets", "offset_spec", "partition_filters"]

# Kafka's TOPIC_PARTITION_PATTERN: an optional topic regex, then a partition, a range
# `lower-upper` (upper excluded), `lower-` or `-upper`
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
_INT_MAX = 2**31 - 1
_NAMED_TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}

_handle_errors = exits_on_error("Error: ")


@dataclass(frozen=True, slots=True)
class PartitionFilter:
    """Topics whose name `topics` picks (Kafka's IncludeList), partitions in [lower, upper) or
    in `ids` (empty: any)."""

    topics: str
    lower: int = 0
    upper: int = _INT_MAX
    ids: frozenset[int] = frozenset()

    def picks(self, topic: str, partition: int) -> bool:
        if not filter_topics([topic], self.topics, exclude_internal=False):
            return False
        if self.ids:
            return partition in self.ids
        return self.lower <= partition < self.upper


def offset_spec(time: str) -> OffsetSpec:
    """`--time`: latest / earliest / max-timestamp (or -1 / -2 / -3), or a time in ms."""
    value = _NAMED_TIMES.get(time)
    if value is None:
        try:
            value = int(time)
        except ValueError:
            raise CommandError(
                f"Malformed time argument {time}. Please use -1 or latest / -2 or earliest / "
                "-3 or max-timestamp, or a specified long format timestamp") from None
    if value == -1:
        return OffsetSpec.latest()
    if value == -2:
        return OffsetSpec.earliest()
    if value == -3:
        return OffsetSpec.max_timestamp()
    return OffsetSpec.for_timestamp(value)


def partition_filters(topic: str | None, partitions: str | None,
                      topic_partitions: str | None) -> list[PartitionFilter]:
    """The filters of `--topic` and `--partitions`, or of `--topic-partitions`."""
    if topic_partitions is not None:
        if topic is not None or partitions is not None:
            raise CommandError("--topic-partitions cannot be used with --topic or --partitions")
        return [_rule(spec) for spec in topic_partitions.split(",")]
    ids: frozenset[int] = frozenset()
    if partitions:
        try:
            ids = frozenset(int(p) for p in partitions.split(","))
        except ValueError:
            raise CommandError("--partitions expects a comma separated list of numeric "
                               f"partition ids, but received: {partitions}") from None
    return [PartitionFilter(topic if topic is not None else ".*", ids=ids)]


def _rule(spec: str) -> PartitionFilter:
    m = _RULE.fullmatch(spec)
    if m is None:
        raise CommandError(f"Invalid rule specification: {spec}")
    topic, one, lower, upper = (g or None for g in m.groups())
    if one is not None:
        return PartitionFilter(topic or ".*", ids=frozenset({int(one)}))
    return PartitionFilter(topic or ".*", int(lower or 0), int(upper) if upper else _INT_MAX)


def picked(partitions: Mapping[str, Iterable[int]], filters: Sequence[PartitionFilter],
           exclude_internal: bool) -> list[tuple[str, int]]:
    """The (topic, partition) pairs any filter picks, in Kafka's order (`topic-partition`)."""
    out = [(t, p) for t, ps in partitions.items()
           if not (exclude_internal and t in INTERNAL_TOPICS)
           for p in ps if any(f.picks(t, p) for f in filters)]
    return sorted(out, key=lambda tp: f"{tp[0]}-{tp[1]}")


class OffsetsService(AdminService):
    CLIENT_ID = "GetOffsetShell"

    def partitions(self) -> dict[str, list[int]]:
        md = self.metadata("listTopics")
        return {name: sorted(int(p) for p in t.partitions)
                for name, t in md.topics.items() if t.error is None}

    def offsets(self, tps: Sequence[tuple[str, int]], spec: OffsetSpec,
                skipped: Callable[[str, int, str], None]) -> dict[tuple[str, int], int]:
        """Each partition's offset for `spec`; one the broker answers with an error goes to
        `skipped`, one with no offset (-1) is left out."""
        futs = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in tps},
                                       request_timeout=self.timeout_s)
        out: dict[tuple[str, int], int] = {}
        for tp, fut in futs.items():
            key = (str(tp.topic), int(tp.partition))
            try:
                offset = int(self._wait(fut, "listOffsets").offset)
            except KafkaException as e:
                skipped(*key, kafka_error_message(e))
                continue
            if offset != -1:
                out[key] = offset
        return out


@click.command("get-offsets")
@admin_options("Timeout of each request to the cluster, in ms (wherry extra).")
@click.option("--topic", metavar="REGEX",
              help="Topics to get the offsets of (a regular expression; default: all).")
@click.option("--partitions", metavar="0,1,2",
              help="Partition ids to get the offsets of (default: all).")
@click.option("--topic-partitions", metavar="PATTERNS",
              help="Comma-separated topic:partition patterns, e.g. orders:0,events:1-3,logs,:0 "
                   "(a range's upper end is excluded; instead of --topic and --partitions).")
@click.option("--time", "time_", default="latest", show_default=True,
              metavar="-1|latest|-2|earliest|-3|max-timestamp|MS",
              help="Which offset: the log end, the log start, the record with the largest "
                   "timestamp, or the first record at or after a time in ms.")
@click.option("--exclude-internal-topics", is_flag=True, help="Leave out internal topics.")
@_handle_errors
def get_offsets(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
                topic: str | None, partitions: str | None, topic_partitions: str | None,
                time_: str, exclude_internal_topics: bool) -> None:
    """Print topic partitions' offsets (like kafka-get-offsets.sh)."""
    filters = partition_filters(topic, partitions, topic_partitions)
    spec = offset_spec(time_)
    svc = OffsetsService.connect(bootstrap_server, command_config, timeout_ms)
    tps = picked(svc.partitions(), filters, exclude_internal_topics)
    if not tps:
        raise CommandError("Could not match any topic-partitions with the specified filters")

    def skipped(t: str, p: int, why: str) -> None:
        click.echo(f"Skip getting offsets for topic-partition {t}-{p} due to error: {why}",
                   err=True)

    offsets = svc.offsets(tps, spec, skipped)
    for t, p in tps:
        if (t, p) in offsets:
            click.echo(f"{t}:{p}:{offsets[(t, p)]}")
