"""The ``wherry`` data source: Spark's Kafka source and sink, in Python.

Built on PySpark's Python Data Source API (``pyspark.sql.datasource``, PySpark >= 4.2 for
admission control and ``availableNow``). Every reader and writer object holds only parsed
options and offsets (plain values): Spark pickles them to its Python workers, and the Kafka
clients are opened inside ``partitions()`` / ``latestOffset()`` (planner) and ``read()`` /
``write()`` (executors).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from wherry.spark.options import (
    EARLIEST,
    LATEST,
    EarliestSpec,
    LatestSpec,
    OffsetSpec,
    OffsetsSpec,
    OptionError,
    SinkOptions,
    SourceOptions,
    TimestampSpec,
    normalize,
)
from wherry.spark.planning import (
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    from_json,
    ranges,
    rate_limit,
    to_json,
)
from wherry.spark.row_schema import BASE_SCHEMA_DDL, HEADERS_DDL

if TYPE_CHECKING:
    import pyarrow as pa

    from wherry.spark.kafka_access import ClusterView

# The Kafka side (`kafka_access`: confluent-kafka, pyarrow.compute) is imported where it is
# used, not here: Spark unpickles the readers and writers in Python processes that only plan
# (one for each micro-batch's read), where it would cost a few hundred ms each time.

log = logging.getLogger("wherry.spark")


class WherryDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("wherry")``."""

    @classmethod
    def name(cls) -> str:
        return "wherry"

    def schema(self) -> str:
        include = normalize(self.options).get("includeheaders", "false").strip().lower()
        return BASE_SCHEMA_DDL + (HEADERS_DDL if include == "true" else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise OptionError(
                "mode", "save mode 'overwrite' is not allowed for Kafka topics; use 'append'"
            )
        opts = SinkOptions.parse(self.options)
        if opts.exactly_once:
            raise OptionError(
                "exactlyOnce", "applies to streaming writes (writeStream) only; a batch write "
                "is at least once"
            )
        check_sink_schema(schema, opts)
        return BatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        opts = SinkOptions.parse(self.options)
        check_sink_schema(schema, opts)
        if opts.exactly_once:
            from wherry.spark.exactly_once import ExactlyOnceStreamWriter, ensure_state_topic

            ensure_state_topic(opts)
            return ExactlyOnceStreamWriter(opts)
        return StreamWriter(opts)


class RangePartition(InputPartition):
    """One Spark task: one offset range of one topic-partition."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng


# --------------------------------------------------------------------------------------------
# Resolving offset specifications on the planner
# --------------------------------------------------------------------------------------------


def resolve(
    view: ClusterView,
    spec: OffsetSpec,
    tps: Sequence[TopicPartition],
    *,
    option: str,
    starting: bool,
) -> PartitionOffsets:
    """Concrete offsets for ``tps`` from a starting or ending specification."""
    if isinstance(spec, EarliestSpec):
        return view.earliest(tps)
    if isinstance(spec, LatestSpec):
        return view.latest(tps)
    if isinstance(spec, OffsetsSpec):
        given = {(t, p): off for t, ps in spec.offsets.items() for p, off in ps.items()}
        missing = sorted(set(tps) - set(given))
        unknown = sorted(set(given) - set(tps))
        if unknown:
            names = ", ".join(f"{t}-{p}" for t, p in unknown)
            raise OptionError(option, f"names partitions that do not exist: {names}")
        if missing:
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise OptionError(
                option, f"gives specific offsets but not for every partition; missing: {names}"
            )
        earliest = view.earliest([tp for tp, o in given.items() if o == EARLIEST])
        latest = view.latest([tp for tp, o in given.items() if o == LATEST])
        return {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in given.items() if tp in tps}
    assert isinstance(spec, TimestampSpec)
    if spec.by_partition is not None:
        stamps = {(t, p): ts for t, ps in spec.by_partition.items() for p, ts in ps.items()}
        missing = sorted(set(tps) - set(stamps))
        if missing:
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise OptionError(option, f"no timestamp given for: {names}")
        stamps = {tp: ts for tp, ts in stamps.items() if tp in tps}
    else:
        assert spec.timestamp is not None
        stamps = {tp: spec.timestamp for tp in tps}
    found = view.for_timestamps(stamps)
    unmatched = [tp for tp, off in found.items() if off < 0]
    latest = view.latest(unmatched)
    out: PartitionOffsets = {}
    for tp, off in found.items():
        if off >= 0:
            out[tp] = off
        elif starting and view.opts.starting_by_timestamp_strategy == "error":
            raise OptionError(
                option,
                f"no record of {tp[0]}-{tp[1]} has a timestamp at or after {stamps[tp]}; set "
                "'startingOffsetsByTimestampStrategy' to 'latest' to start at the end instead",
            )
        else:
            out[tp] = latest[tp]
    return out


# --------------------------------------------------------------------------------------------
# Batch source
# --------------------------------------------------------------------------------------------


class BatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        from wherry.spark.kafka_access import ClusterView

        view = ClusterView(self.opts)
        tps = view.partitions(require_topics=True)
        start = resolve(
            view, self.opts.starting, tps, option=_start_option(self.opts), starting=True
        )
        end = resolve(view, self.opts.ending, tps, option=_end_option(self.opts), starting=False)
        for tp in tps:
            if end[tp] < start[tp]:
                raise OptionError(
                    _end_option(self.opts),
                    f"ends {tp[0]}-{tp[1]} at offset {end[tp]}, before its starting offset "
                    f"{start[tp]}",
                )
        return [RangePartition(r) for r in ranges(start, end, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from wherry.spark.kafka_access import read_range

        if isinstance(partition, RangePartition):  # else: Spark's stand-in for "no ranges"
            yield from read_range(self.opts, partition.range)


def _start_option(opts: SourceOptions) -> str:
    if isinstance(opts.starting, TimestampSpec):
        return (
            "startingTimestamp"
            if opts.starting.timestamp is not None
            else ("startingOffsetsByTimestamp")
        )
    return "startingOffsets"


def _end_option(opts: SourceOptions) -> str:
    if isinstance(opts.ending, TimestampSpec):
        return (
            "endingTimestamp" if opts.ending.timestamp is not None else ("endingOffsetsByTimestamp")
        )
    return "endingOffsets"


# --------------------------------------------------------------------------------------------
# Streaming source
# --------------------------------------------------------------------------------------------


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"topic": {"partition": next offset to read}}``, kept by Spark in the
    query's checkpoint; a restarted query resumes from the last committed batch's end."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._initial: dict[str, dict[str, int]] | None = None
        self._target: PartitionOffsets | None = None  # availableNow: stop here
        self._latest_seen: PartitionOffsets | None = None

    def initialOffset(self) -> dict[str, dict[str, int]]:
        from wherry.spark.kafka_access import ClusterView

        # Spark may ask twice; with "latest" both answers must agree.
        if self._initial is None:
            view = ClusterView(self.opts)
            sub = self.opts.subscription
            tps = view.partitions(require_topics=sub.kind != "subscribePattern")
            start = resolve(
                view, self.opts.starting, tps, option=_start_option(self.opts), starting=True
            )
            self._initial = to_json(start)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        from wherry.spark.kafka_access import ClusterView

        view = ClusterView(self.opts)
        self._target = view.latest(view.partitions(require_topics=False))
        log.info("availableNow: reading up to %s", to_json(self._target))

    def _starts(
        self, view: ClusterView, start: PartitionOffsets, tps: Sequence[TopicPartition]
    ) -> PartitionOffsets:
        """Where each current partition starts: from ``start``, or (a partition added since)
        from its earliest offset, which is 0 unless data was already deleted."""
        from wherry.spark.kafka_access import data_loss

        fresh = [tp for tp in tps if tp not in start]
        base = {tp: off for tp, off in start.items() if tp in set(tps)}
        if fresh:
            earliest = view.earliest(fresh)
            for tp in fresh:
                if earliest[tp] != 0:
                    data_loss(
                        self.opts.fail_on_data_loss,
                        f"Added partition {tp[0]}-{tp[1]} starts from {earliest[tp]} instead of 0",
                    )
                base[tp] = earliest[tp]
        return base

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        from wherry.spark.kafka_access import ClusterView, data_loss

        view = ClusterView(self.opts)
        start_map = from_json(start)
        tps = view.partitions(require_topics=False)
        current = set(tps)
        for tp in sorted(set(start_map) - current):
            data_loss(
                self.opts.fail_on_data_loss,
                f"{tp[0]}-{tp[1]} is gone (topic or partition deleted)",
            )
        latest = view.latest(tps)
        self._latest_seen = latest
        if self._target is not None:
            latest = {
                tp: min(off, self._target[tp]) for tp, off in latest.items() if tp in self._target
            }
        base = self._starts(view, start_map, [tp for tp in tps if tp in latest])
        for tp, off in latest.items():
            if off < base[tp]:
                data_loss(
                    self.opts.fail_on_data_loss,
                    f"{tp[0]}-{tp[1]}'s offset went back from {base[tp]} to {off} (was the "
                    "topic re-created?)",
                )
                base[tp] = off
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(base, latest, limit.max_rows)
        elif isinstance(limit, ReadMinRows):
            available = sum(latest[tp] - base[tp] for tp in latest)
            end = latest if available >= limit.min_rows else base
        else:
            end = dict(latest)
        # Partitions deleted from the cluster (with failOnDataLoss=false) drop out here.
        return to_json({**{tp: o for tp, o in start_map.items() if tp in current}, **end})

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        return None if self._latest_seen is None else to_json(self._latest_seen)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        from wherry.spark.kafka_access import ClusterView

        start_map = from_json(start)
        end_map = from_json(end)
        fresh = [tp for tp in end_map if tp not in start_map]
        if fresh:
            # Partitions added since the batch before: they start at their earliest offset.
            start_map.update(ClusterView(self.opts).earliest(fresh))
        return [RangePartition(r) for r in ranges(start_map, end_map, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from wherry.spark.kafka_access import read_range

        if isinstance(partition, RangePartition):  # else: Spark's stand-in for "no ranges"
            yield from read_range(self.opts, partition.range)

    def commit(self, end: dict[str, Any]) -> None:
        # Offsets live in Spark's checkpoint; nothing is committed to Kafka (as Spark's own
        # Kafka source).
        return None

    def stop(self) -> None:
        return None


# --------------------------------------------------------------------------------------------
# Sink
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteResult(WriterCommitMessage):
    records: int


def _is_headers_type(t: DataType) -> bool:
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in t.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], BinaryType | StringType)
    )


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """Spark's Kafka sink rules for the input columns, checked before any task starts."""
    types: Mapping[str, DataType] = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError("value", "required attribute 'value' not found in the input")
    for col in ("value", "key"):
        if col in types and not isinstance(types[col], BinaryType | StringType):
            raise OptionError(
                col,
                f"{col} attribute type must be string or binary, not {types[col].simpleString()}",
            )
    if opts.topic is None and "topic" not in types:
        raise OptionError(
            "topic",
            "topic option required when no 'topic' attribute is present; use the 'topic' "
            "option for setting a topic",
        )
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise OptionError("topic", f"topic attribute must be a string, not {types['topic']}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError(
            "partition", f"partition attribute must be an int, not {types['partition']}"
        )
    if "headers" in types and not _is_headers_type(types["headers"]):
        raise OptionError(
            "headers",
            "headers attribute must be array<struct<key:string,value:binary>>, not "
            + types["headers"].simpleString(),
        )


def write_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    from wherry.spark.kafka_access import RowProducer, send_rows

    producer = RowProducer(opts)
    send_rows(producer, opts, batches)
    return WriteResult(producer.close())


class BatchWriter(DataSourceArrowWriter):
    """At least once: a retried task writes its rows again (each task's idempotent producer
    only removes duplicates of its own internal retries)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.info("wrote %d records", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("write aborted; records of finished tasks stay in their topics")


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.info("micro-batch %d: wrote %d records", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted; it is written again when retried", batchId)
