"""The connector's options, parsed and checked once, with errors that name the option.

Option names and meanings follow Spark's own Kafka source and sink (``kafka.bootstrap.servers``,
``subscribe`` / ``subscribePattern`` / ``assign``, ``startingOffsets``, ...). Spark hands a data
source its options as a case-insensitive mapping of strings; `Options` keeps them as a plain
``dict`` with lower-case keys so that readers stay picklable. Pure: no Spark, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

EARLIEST = -2
"""In an offsets JSON, ``-2`` means the earliest offset (as in Spark's Kafka source)."""
LATEST = -1
"""In an offsets JSON, ``-1`` means the latest offset."""

DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_METADATA_TIMEOUT_MS = 30_000


class OptionError(ValueError):
    """An option is missing, malformed or contradicts another one. The message names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"wherry source/sink option '{option}': {message}")
        self.option = option


# --------------------------------------------------------------------------------------------
# Offset specifications
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EarliestSpec:
    pass


@dataclass(frozen=True, slots=True)
class LatestSpec:
    pass


@dataclass(frozen=True, slots=True)
class OffsetsSpec:
    """Explicit offsets per topic-partition (``-2`` earliest, ``-1`` latest)."""

    offsets: dict[str, dict[int, int]]


@dataclass(frozen=True, slots=True)
class TimestampSpec:
    """Offsets of the first record at or after a timestamp: one for all partitions
    (``timestamp``) or per topic-partition (``by_partition``)."""

    timestamp: int | None = None
    by_partition: dict[str, dict[int, int]] | None = None


OffsetSpec = EarliestSpec | LatestSpec | OffsetsSpec | TimestampSpec


def _parse_partition_map(option: str, raw: str) -> dict[str, dict[int, int]]:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise OptionError(option, f"not valid JSON ({e.msg} at column {e.colno}): {raw!r}") from e
    expected = 'a JSON object like {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    if not isinstance(data, dict):
        raise OptionError(option, f"expected {expected}, got {raw!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise OptionError(option, f"topic {topic!r}: expected {expected}, got {raw!r}")
        out[topic] = {}
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise OptionError(
                    option, f"topic {topic!r}: {p!r} is not a partition number"
                ) from None
            if partition < 0:
                raise OptionError(option, f"topic {topic!r}: negative partition {partition}")
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(
                    option, f"{topic}-{partition}: {value!r} is not an integer offset/timestamp"
                )
            out[topic][partition] = value
    return out


def _parse_offsets(option: str, raw: str, *, allow: tuple[str, ...]) -> OffsetSpec:
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        if word not in allow:
            raise OptionError(option, f"'{word}' is not allowed here (use one of {allow})")
        return EarliestSpec() if word == "earliest" else LatestSpec()
    spec = _parse_partition_map(option, raw)
    for topic, parts in spec.items():
        for p, off in parts.items():
            if off == EARLIEST and "earliest" not in allow:
                raise OptionError(option, f"{topic}-{p}: -2 (earliest) is not allowed here")
            if off == LATEST and "latest" not in allow:
                raise OptionError(option, f"{topic}-{p}: -1 (latest) is not allowed here")
            if off < EARLIEST:
                raise OptionError(option, f"{topic}-{p}: invalid offset {off}")
    return OffsetsSpec(spec)


def _parse_timestamp(option: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(option, f"expected a timestamp in milliseconds, got {raw!r}") from None
    if value < 0:
        raise OptionError(option, f"timestamp must not be negative, got {value}")
    return value


# --------------------------------------------------------------------------------------------
# Parsed options
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscription:
    kind: Literal["assign", "subscribe", "subscribePattern"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        if self.kind == "subscribe":
            return topic in self.topics
        return any(t == topic for t, _ in self.assigned)


def _bool(option: str, raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in ("true", "false"):
        return word == "true"
    raise OptionError(option, f"expected true or false, got {raw!r}")


def _positive_int(option: str, raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(option, f"expected a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(option, f"expected a positive integer, got {value}")
    return value


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` options with the prefix removed, for the Kafka client (librdkafka)."""
    return {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}


def normalize(options: Mapping[str, Any]) -> dict[str, str]:
    """Spark's case-insensitive options as a plain dict with lower-case keys."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def _bootstrap(opts: Mapping[str, str]) -> str:
    servers = opts.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise OptionError(
            "kafka.bootstrap.servers", "required (a comma-separated list of host:port)"
        )
    return servers


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Options of the batch and streaming source."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    max_offsets_per_trigger: int | None
    starting_by_timestamp_strategy: Literal["error", "latest"]
    poll_timeout_ms: int
    metadata_timeout_ms: int
    kafka: dict[str, str]

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, streaming: bool) -> SourceOptions:
        opts = normalize(raw)
        bootstrap = _bootstrap(opts)
        subscription = _parse_subscription(opts)
        starting = _starting(opts, streaming)
        ending: OffsetSpec = LatestSpec()
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if streaming and name in opts:
                raise OptionError(_CANON[name], "only for batch queries (spark.read)")
        if "endingtimestamp" in opts:
            ending = TimestampSpec(
                timestamp=_parse_timestamp("endingTimestamp", opts["endingtimestamp"])
            )
        elif "endingoffsetsbytimestamp" in opts:
            ending = TimestampSpec(
                by_partition=_parse_partition_map(
                    "endingOffsetsByTimestamp", opts["endingoffsetsbytimestamp"]
                )
            )
        elif "endingoffsets" in opts:
            ending = _parse_offsets("endingOffsets", opts["endingoffsets"], allow=("latest",))
        if subscription.kind == "assign":
            assigned = set(subscription.assigned)
            for option, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
                if isinstance(spec, OffsetsSpec):
                    named = {(t, p) for t, ps in spec.offsets.items() for p in ps}
                    extra = named - assigned
                    if extra:
                        raise OptionError(
                            option,
                            f"names partitions not in 'assign': {_fmt(sorted(extra))}",
                        )
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError(
                "startingOffsetsByTimestampStrategy", f"expected error or latest, got {strategy!r}"
            )
        max_per_trigger = _positive_int("maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger"))
        if max_per_trigger is not None and not streaming:
            raise OptionError("maxOffsetsPerTrigger", "only for streaming queries")
        return cls(
            bootstrap_servers=bootstrap,
            subscription=subscription,
            starting=starting,
            ending=ending,
            fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss"), True),
            include_headers=_bool("includeHeaders", opts.get("includeheaders"), False),
            min_partitions=_positive_int("minPartitions", opts.get("minpartitions")),
            max_offsets_per_trigger=max_per_trigger,
            starting_by_timestamp_strategy="latest" if strategy == "latest" else "error",
            poll_timeout_ms=_positive_int(
                "kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms")
            )
            or DEFAULT_POLL_TIMEOUT_MS,
            metadata_timeout_ms=_positive_int("metadataTimeoutMs", opts.get("metadatatimeoutms"))
            or DEFAULT_METADATA_TIMEOUT_MS,
            kafka=kafka_params(opts),
        )


_CANON = {
    "endingoffsets": "endingOffsets",
    "endingtimestamp": "endingTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
}


def _fmt(tps: list[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def _starting(opts: Mapping[str, str], streaming: bool) -> OffsetSpec:
    # Precedence as in Spark: startingTimestamp, then startingOffsetsByTimestamp, then
    # startingOffsets.
    if "startingtimestamp" in opts:
        return TimestampSpec(
            timestamp=_parse_timestamp("startingTimestamp", opts["startingtimestamp"])
        )
    if "startingoffsetsbytimestamp" in opts:
        return TimestampSpec(
            by_partition=_parse_partition_map(
                "startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"]
            )
        )
    if "startingoffsets" in opts:
        allow = ("earliest", "latest") if streaming else ("earliest",)
        return _parse_offsets("startingOffsets", opts["startingoffsets"], allow=allow)
    return LatestSpec() if streaming else EarliestSpec()


def _parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("assign", "subscribe", "subscribepattern") if k in opts]
    if len(given) != 1:
        raise OptionError(
            "subscribe",
            "exactly one of 'assign', 'subscribe' or 'subscribePattern' must be set"
            + (f" (got {len(given)})" if given else ""),
        )
    kind = given[0]
    raw = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("subscribe", "no topic given")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        if not raw.strip():
            raise OptionError("subscribePattern", "empty pattern")
        try:
            re.compile(raw)
        except re.error as e:
            raise OptionError("subscribePattern", f"invalid regular expression: {e}") from e
        return Subscription("subscribePattern", pattern=raw)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise OptionError("assign", f"not valid JSON ({e.msg} at column {e.colno}): {raw!r}") from e
    if not isinstance(data, dict) or not data:
        raise OptionError("assign", f'expected a JSON object like {{"topicA":[0,1]}}, got {raw!r}')
    assigned: list[tuple[str, int]] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise OptionError("assign", f"topic {topic!r}: expected a list of partition numbers")
        assigned.extend((topic, p) for p in parts)
    return Subscription("assign", assigned=tuple(sorted(set(assigned))))


# --------------------------------------------------------------------------------------------
# Sink options
# --------------------------------------------------------------------------------------------


DEFAULT_STATE_TOPIC = "wherry-spark-sink-state"
"""Where the exactly-once sink keeps, per query and task, the next batch id to write (as a
consumer-group offset committed inside each task's transaction; the topic holds no records)."""


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    kafka: dict[str, str]
    flush_timeout_ms: int
    exactly_once: bool = False
    state_topic: str = DEFAULT_STATE_TOPIC

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> SinkOptions:
        opts = normalize(raw)
        bootstrap = _bootstrap(opts)
        topic = opts.get("topic")
        if topic is not None and not topic.strip():
            raise OptionError("topic", "empty topic name")
        if "kafka.transactional.id" in opts:
            raise OptionError(
                "kafka.transactional.id",
                "the sink chooses its transactional ids itself; set 'exactlyOnce' to 'true' "
                "for transactional writes",
            )
        exactly_once = _bool("exactlyOnce", opts.get("exactlyonce"), False)
        state_topic = opts.get("exactlyoncestatetopic", DEFAULT_STATE_TOPIC).strip()
        if not state_topic:
            raise OptionError("exactlyOnceStateTopic", "empty topic name")
        protocol = opts.get("kafka.security.protocol", "plaintext").strip().lower()
        if exactly_once and protocol != "plaintext":
            raise OptionError(
                "exactlyOnce",
                f"the exactly-once sink commits over PLAINTEXT connections only, not {protocol}",
            )
        if opts.get("kafka.enable.idempotence", "true").strip().lower() == "false":
            raise OptionError(
                "kafka.enable.idempotence",
                "the sink always uses an idempotent producer (retries must not duplicate)",
            )
        return cls(
            bootstrap_servers=bootstrap,
            topic=topic.strip() if topic else None,
            kafka=kafka_params(opts),
            flush_timeout_ms=_positive_int("flushTimeoutMs", opts.get("flushtimeoutms"))
            or DEFAULT_POLL_TIMEOUT_MS,
            exactly_once=exactly_once,
            state_topic=state_topic,
        )
