"""What the connector asks of a Kafka cluster, through confluent-kafka (librdkafka).

Driver side: `ClusterView` lists partitions and looks up offsets (earliest, latest, by
timestamp) with the AdminClient `client_cache` keeps for the options. Executor side:
`read_range` reads one offset range with an assigned Consumer (kept for the process's next
range) and yields Arrow record batches; `RowProducer` writes rows with an idempotent producer.
Clients are created where they are used, never pickled.
"""

from __future__ import annotations

import bisect
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

import confluent_kafka as ck
import pyarrow as pa
from confluent_kafka.admin import AdminClient, OffsetSpec

from wherry.spark import client_cache
from wherry.spark.options import OptionError, SinkOptions, SourceOptions, Subscription
from wherry.spark.planning import OffsetRange, PartitionOffsets
from wherry.spark.planning import TopicPartition as TP
from wherry.spark.row_schema import HEADERS_TYPE, TIMESTAMP_TYPE

if TYPE_CHECKING:
    from wherry.spark.fetch_client import PartitionClient

log = logging.getLogger("wherry.spark")

ROWS_PER_BATCH = 50_000
"""Most rows in one Arrow batch (fewer, larger batches cost Spark less per row)."""
BATCH_BYTES = 16 << 20
"""Aim for Arrow batches of about this many key + value bytes (large records: fewer rows)."""



class DataLossError(RuntimeError):
    """Records the query should have read are gone and ``failOnDataLoss`` is true."""


class ConnectorError(RuntimeError):
    """The cluster refused or could not answer a request the connector needs."""


def data_loss(fail: bool, message: str) -> None:
    """Fail the query (``failOnDataLoss=true``) or log a warning and go on."""
    hint = (
        " Some data may have been lost because they are not available in Kafka any more; "
        "either the data was aged out by Kafka or the topic may have been deleted before all "
        "the data in the topic was processed. If you want your streaming query to fail on such "
        "cases, set the source option 'failOnDataLoss' to 'true'."
    )
    if fail:
        raise DataLossError(
            message + ". Some data may have been lost because they are not available in Kafka any "
            "more. If you don't want your query to fail on such cases, set the source option "
            "'failOnDataLoss' to 'false'."
        )
    log.warning("%s.%s", message, hint)


def _client_conf(servers: str, extra: Mapping[str, str], timeout_ms: int) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": servers,
        "socket.connection.setup.timeout.ms": min(timeout_ms, 30_000),
        "reconnect.backoff.max.ms": 1000,
        "log_level": 3,
    }
    conf.update(extra)
    conf["bootstrap.servers"] = servers
    return conf


def _unreachable(servers: str, timeout_ms: int, err: object) -> OptionError:
    return OptionError(
        "kafka.bootstrap.servers",
        f"no answer from the brokers at {servers!r} within {timeout_ms} ms ({err})",
    )


class ClusterView:
    """Metadata and offset lookups for the planner (driver), with the AdminClient the process
    keeps for these options (`client_cache`); the object itself stays a plain, picklable
    value."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def _conf(self) -> dict[str, Any]:
        return _client_conf(
            self.opts.bootstrap_servers, self._admin_params(), self.opts.metadata_timeout_ms
        )

    def _admin(self) -> AdminClient:
        """The AdminClient kept for these options in this process (`client_cache`)."""
        try:
            return client_cache.admin(self._conf())
        except ck.KafkaException as e:
            raise OptionError("kafka.*", f"the Kafka client refused its settings: {e}") from e

    def _admin_params(self) -> dict[str, str]:
        # Consumer-only settings would make the AdminClient refuse to start.
        consumer_only = {"group.id", "auto.offset.reset", "isolation.level", "enable.auto.commit"}
        return {k: v for k, v in self.opts.kafka.items() if k not in consumer_only}

    def partitions(self, *, require_topics: bool) -> list[TP]:
        """Topic-partitions of the subscription that exist now, sorted."""
        timeout_s = self.opts.metadata_timeout_ms / 1000
        admin = self._admin()
        try:
            md = admin.list_topics(timeout=timeout_s)
        except ck.KafkaException as e:
            client_cache.forget_admin(self._conf())
            timeout_ms = self.opts.metadata_timeout_ms
            raise _unreachable(self.opts.bootstrap_servers, timeout_ms, e) from e
        existing = {
            name: sorted(t.partitions)
            for name, t in md.topics.items()
            if t.error is None or t.error.code() == ck.KafkaError.NO_ERROR
        }
        sub: Subscription = self.opts.subscription
        if sub.kind == "subscribe":
            missing = [t for t in sub.topics if t not in existing]
            if missing and require_topics:
                raise OptionError("subscribe", f"topic(s) do not exist: {', '.join(missing)}")
            return [(t, p) for t in sub.topics if t in existing for p in existing[t]]
        if sub.kind == "subscribePattern":
            return [
                (t, p)
                for t in sorted(existing)
                if not t.startswith("__") and sub.matches(t)
                for p in existing[t]
            ]
        missing_tp = [(t, p) for t, p in sub.assigned if p not in existing.get(t, ())]
        if missing_tp and require_topics:
            names = ", ".join(f"{t}-{p}" for t, p in missing_tp)
            raise OptionError("assign", f"partition(s) do not exist: {names}")
        return [tp for tp in sub.assigned if tp not in missing_tp]

    def _list_offsets(self, specs: Mapping[TP, OffsetSpec]) -> dict[TP, int]:
        if not specs:
            return {}
        admin = self._admin()
        timeout_ms = self.opts.metadata_timeout_ms
        request = {ck.TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        try:
            futures: dict[ck.TopicPartition, Future[Any]] = admin.list_offsets(
                request, request_timeout=timeout_ms / 1000
            )
            out: dict[TP, int] = {}
            for tp, fut in futures.items():
                info = fut.result(timeout=timeout_ms / 1000 + 5)
                out[(tp.topic, tp.partition)] = int(info.offset)
            return out
        except ck.KafkaException as e:
            client_cache.forget_admin(self._conf())
            err = e.args[0] if e.args else e
            if isinstance(err, ck.KafkaError) and err.code() in (
                ck.KafkaError._TRANSPORT,
                ck.KafkaError._TIMED_OUT,
                ck.KafkaError.REQUEST_TIMED_OUT,
            ):
                raise _unreachable(self.opts.bootstrap_servers, timeout_ms, err) from e
            raise ConnectorError(f"ListOffsets failed: {err}") from e
        except TimeoutError as e:
            client_cache.forget_admin(self._conf())
            raise _unreachable(self.opts.bootstrap_servers, timeout_ms, "timed out") from e

    def earliest(self, tps: Sequence[TP]) -> PartitionOffsets:
        return self._list_offsets({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps: Sequence[TP]) -> PartitionOffsets:
        return self._list_offsets({tp: OffsetSpec.latest() for tp in tps})

    def for_timestamps(self, stamps: Mapping[TP, int]) -> dict[TP, int]:
        """Offset of the first record with timestamp >= the given one; -1 if there is none."""
        return self._list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in stamps.items()})


# --------------------------------------------------------------------------------------------
# Executor side: reading
# --------------------------------------------------------------------------------------------


def _consumer_conf(opts: SourceOptions) -> dict[str, Any]:
    """A range reader's consumer settings, but its group id (each consumer has its own)."""
    conf = _client_conf(opts.bootstrap_servers, {}, opts.metadata_timeout_ms)
    conf.update(
        {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "isolation.level": "read_uncommitted",
            # A range reader asks only for offsets that exist, and its consumer is kept for
            # the next range (`client_cache`). librdkafka's defaults would make that next range
            # wait: a broker's long poll at the end of the log (500 ms), and the fetch backoff
            # (1000 ms) its prefetch of 100000 records past a short range sets off. A smaller
            # prefetch also fetches and decodes fewer records the range does not need.
            "fetch.wait.max.ms": 10,
            "fetch.queue.backoff.ms": 10,
            "queued.min.messages": 10_000,
        }
    )
    conf.update(opts.kafka)
    conf["enable.partition.eof"] = True
    conf["enable.auto.commit"] = False
    return conf


def _new_consumer(conf: Mapping[str, Any]) -> ck.Consumer:
    # A group of its own: nothing is committed, and no other reader shares its state.
    group = {"group.id": f"wherry-spark-{uuid.uuid4().hex}"}
    try:
        return ck.Consumer({**group, **conf})
    except ck.KafkaException as e:
        raise OptionError("kafka.*", f"the Kafka consumer refused its settings: {e}") from e


def _to_batch(
    topic: str,
    partition: int,
    records: list[ck.Message],
    offsets: list[int],
    with_headers: bool,
) -> pa.RecordBatch:
    n = len(records)
    stamped = [m.timestamp() for m in records]
    ts = pa.array([t * 1000 for _, t in stamped], pa.int64())  # ms to Spark's µs
    arrays = [
        pa.array([m.key() for m in records], pa.binary()),
        pa.array([m.value() for m in records], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        ts.cast(TIMESTAMP_TYPE),
        # librdkafka: 1 CreateTime, 2 LogAppendTime; Spark: 0 and 1.
        pa.array([1 if kind == 2 else 0 for kind, _ in stamped], pa.int32()),
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if with_headers:
        headers = [
            [{"key": h[0], "value": h[1]} for h in hs] if (hs := m.headers()) else []
            for m in records
        ]
        arrays.append(pa.array(headers, HEADERS_TYPE))
        names.append("headers")
    return pa.RecordBatch.from_arrays(arrays, names=names)


def read_range(opts: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` (offsets ``[start, end)``) as Arrow batches.

    Data the range names that is no longer in the log (deleted by retention or DeleteRecords,
    or the topic was re-created) is a data loss: the task fails or, with
    ``failOnDataLoss=false``, skips it with a warning.

    A PLAINTEXT cluster with only the client settings `fetch_client` honours is read with
    Fetch requests of its own, whose record batches become Arrow columns with no Python
    object per record (`arrow_records`); else (TLS, SASL, any other librdkafka setting) a
    librdkafka consumer reads the range.
    """
    if rng.end <= rng.start:
        return
    # The Fetch reader (and the protocol codecs under it) is imported by executors only.
    from wherry.spark.fetch_client import PartitionClient, Settings, raw_fetch_possible

    if raw_fetch_possible(opts.kafka):
        settings = Settings.of(opts.bootstrap_servers, opts.kafka, opts.poll_timeout_ms)
        key = ("fetch", settings)
        yield from _lent(
            lambda: client_cache.take_reader(key, lambda: PartitionClient(settings)),
            lambda client: _fetch_range(client, opts, rng),
            lambda client: client_cache.keep_reader(key, client),
        )
        return
    conf = _consumer_conf(opts)
    yield from _lent(
        lambda: client_cache.take_consumer(conf, lambda: _new_consumer(conf)),
        lambda consumer: _read(consumer, opts, rng),
        lambda consumer: client_cache.give_back(conf, consumer),
    )


_C = TypeVar("_C", ck.Consumer, "PartitionClient")


def _lent(
    take: Callable[[], _C],
    read: Callable[[_C], Iterator[pa.RecordBatch]],
    give_back: Callable[[_C], None],
) -> Iterator[pa.RecordBatch]:
    """``read`` with a kept client: given back for the next range when the read ends well
    (no answer outstanding), closed when it fails or is abandoned."""
    client = take()
    done = False
    try:
        yield from read(client)
        done = True
    finally:
        if done:
            give_back(client)
        else:
            client.close()


FIRST_FETCH_BYTES = 1 << 20
"""A Fetch asks for this much when the client has seen no records yet; after that for what
the rest of the range needs by the record size it saw last, plus this much (up to
`BATCH_BYTES`)."""


def _fetch_range(
    client: PartitionClient, opts: SourceOptions, rng: OffsetRange
) -> Iterator[pa.RecordBatch]:
    """`read_range` with `fetch_client`: the next Fetch is sent before the answer in hand is
    decoded, so the broker reads while this process builds columns."""
    from wherry.protocol.records import batches_next_offset
    from wherry.spark.arrow_records import fetched_rows
    from wherry.spark.fetch_client import (
        LEADER_ERRORS,
        OFFSET_OUT_OF_RANGE,
        FetchUnavailable,
        NoSuchPartition,
        PartitionError,
    )

    topic, partition = rng.topic, rng.partition
    name = f"{topic}-{partition}"
    given = client.settings.partition_max_bytes
    read_committed = client.settings.read_committed
    timeout_s = opts.poll_timeout_ms / 1000
    deadline = time.monotonic() + timeout_s
    position, end = rng.start, rng.end
    checked = False  # the range was clamped to the log
    pending: tuple[int, int] | None = None  # (offset, correlation id) of a Fetch sent

    def ask(offset: int) -> tuple[int, int]:
        if given is not None:
            size = given
        elif not client.bytes_per_record:
            size = FIRST_FETCH_BYTES
        else:
            # An answer ends with the part of a batch that did not fit, which is dropped and
            # fetched again: room for one more batch saves that second round trip.
            rows = min(end - offset, ROWS_PER_BATCH)
            size = int(rows * client.bytes_per_record * 1.05) + FIRST_FETCH_BYTES
            size = min(BATCH_BYTES, size)
        return offset, client.send_fetch(topic, partition, offset, size)

    while position < end:
        try:
            if pending is None or pending[0] != position:
                pending = ask(position)
            answer = client.receive_fetch(topic, partition, pending[1])
            pending = None
            if answer.error_code == OFFSET_OUT_OF_RANGE:
                low = client.list_offsets(topic, partition, -2)
                high = client.list_offsets(topic, partition, -1)
                if not checked:
                    checked = True
                    position, end = _clamp(opts, rng, low, high)
                elif position < low:
                    _gone(opts, name, position, low)
                    position = low
                else:
                    _clamp(opts, OffsetRange(topic, partition, position, end), low, high)
                    return
                continue
            if answer.error_code != 0:
                raise PartitionError(answer.error_code, f"Fetch of {name}")
        except (FetchUnavailable, PartitionError) as e:
            pending = None
            retry = isinstance(e, FetchUnavailable) or (
                e.code in LEADER_ERRORS and not isinstance(e, NoSuchPartition)
            )
            if not retry:
                raise ConnectorError(f"reading {name} at offset {position} failed: {e}") from e
            if time.monotonic() > deadline:
                raise _timed_out(opts, name, position, end) from e
            client.forget(topic, partition)
            time.sleep(0.05)
            continue
        high = answer.last_stable_offset if read_committed else answer.high_watermark
        if not checked:
            checked = True
            position, end = _clamp(opts, rng, answer.log_start_offset, high)
            if position >= end:
                return
        records = answer.records if answer.records is not None else b""
        after = batches_next_offset(records)
        if after is not None and after < end and position < after:
            pending = ask(after)  # the broker reads on while this answer is decoded
        rows, after = fetched_rows(
            records,
            topic=topic,
            partition=partition,
            start=position,
            end=end,
            read_committed=read_committed,
            aborted=answer.aborted_transactions,
            with_headers=opts.include_headers,
        )
        if after > position:
            client.bytes_per_record = len(records) / (after - position)
            position = after
            deadline = time.monotonic() + timeout_s
        elif position >= high:
            return  # the end of the log: a compacted tail may stop short of ``end``
        elif time.monotonic() > deadline:
            raise _timed_out(opts, name, position, end)
        if rows is not None:
            yield rows


def _watermarks(
    consumer: ck.Consumer, topic: str, partition: int, timeout_s: float
) -> tuple[int, int]:
    """The partition's low and high watermarks. A kept consumer (`client_cache`) may know the
    cluster from before the partition was added: it then learns the topic afresh and asks
    again."""
    tp = ck.TopicPartition(topic, partition)
    try:
        try:
            return consumer.get_watermark_offsets(tp, timeout=timeout_s)
        except ck.KafkaException as e:
            err = e.args[0] if e.args else None
            unknown = (ck.KafkaError._UNKNOWN_PARTITION, ck.KafkaError._UNKNOWN_TOPIC)
            if not isinstance(err, ck.KafkaError) or err.code() not in unknown:
                raise
            consumer.list_topics(topic, timeout=timeout_s)  # a metadata request for the topic
            return consumer.get_watermark_offsets(tp, timeout=timeout_s)
    except ck.KafkaException as e:
        raise ConnectorError(
            f"cannot look up the offsets of {topic}-{partition}: {e.args[0]}"
        ) from e


def _clamp(opts: SourceOptions, rng: OffsetRange, low: int, high: int) -> tuple[int, int]:
    """The part of the range that is in the log (``low`` to ``high``); what is not is a data
    loss."""
    name = f"{rng.topic}-{rng.partition}"
    start, end = rng.start, rng.end
    if start < low:
        data_loss(
            opts.fail_on_data_loss,
            f"Cannot fetch offset {start} of {name}: the earliest available offset is {low}, "
            f"so offsets {start} to {min(low, end) - 1} are gone",
        )
        start = low
    if end > high:
        data_loss(
            opts.fail_on_data_loss,
            f"{name} ends at offset {high} but the query planned to read up to {end - 1}",
        )
        end = high
    return start, end


def _gone(opts: SourceOptions, name: str, position: int, low: int) -> None:
    message = f"offset {position} of {name} is gone (earliest is now {low})"
    data_loss(opts.fail_on_data_loss, message)


def _timed_out(opts: SourceOptions, name: str, position: int, end: int) -> ConnectorError:
    return ConnectorError(
        f"timed out after {opts.poll_timeout_ms} ms reading {name} at offset "
        f"{position} (the range ends at {end}); raise "
        "'kafkaConsumer.pollTimeoutMs' if the cluster is slow"
    )


def _read(consumer: ck.Consumer, opts: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    topic, partition = rng.topic, rng.partition
    timeout_s = opts.poll_timeout_ms / 1000
    name = f"{topic}-{partition}"
    low, high = _watermarks(consumer, topic, partition, timeout_s)
    start, end = _clamp(opts, rng, low, high)
    if start >= end:
        return
    consumer.assign([ck.TopicPartition(topic, partition, start)])
    position = start
    deadline = time.monotonic() + timeout_s
    chunk = 1000  # rows per consume(); adapted to the record size seen
    while position < end:
        msgs = consumer.consume(num_messages=min(chunk, end - position), timeout=0.5)
        if not msgs:
            if time.monotonic() > deadline:
                raise _timed_out(opts, name, position, end)
            continue
        deadline = time.monotonic() + timeout_s
        # Records come first; an error (end of partition, offset reset) ends the chunk.
        failed = [i for i, m in enumerate(msgs) if m.error() is not None]
        records = msgs[: failed[0]] if failed else msgs
        offsets: list[int] = [m.offset() for m in records]  # type: ignore[misc]
        if offsets and offsets[-1] >= end:  # a compacted range may run past ``end``
            keep = bisect.bisect_left(offsets, end)
            records, offsets = records[:keep], offsets[:keep]
            failed, position = [], end
        if records:
            position = max(position, offsets[-1] + 1)
            batch = _to_batch(topic, partition, records, offsets, opts.include_headers)
            size = batch.column(0).nbytes + batch.column(1).nbytes
            chunk = max(1, min(ROWS_PER_BATCH, BATCH_BYTES * len(records) // max(1, size)))
            yield batch
        if not failed:
            continue
        err = msgs[failed[0]].error()
        assert err is not None
        if err.code() == ck.KafkaError._PARTITION_EOF:
            # The end of the log: a compacted tail may stop short of ``end``.
            return
        if err.code() == ck.KafkaError._AUTO_OFFSET_RESET:
            # Deleted between the watermark lookup and the fetch.
            low, _ = consumer.get_watermark_offsets(
                ck.TopicPartition(topic, partition), timeout=timeout_s
            )
            _gone(opts, name, position, low)
            position = max(position, low)
            consumer.seek(ck.TopicPartition(topic, partition, position))
            continue
        raise ConnectorError(f"reading {name} at offset {position} failed: {err}")


# --------------------------------------------------------------------------------------------
# Executor side: writing
# --------------------------------------------------------------------------------------------


class RowProducer:
    """An idempotent producer for one writer task; `close` flushes and raises on failures."""

    def __init__(self, opts: SinkOptions, extra: Mapping[str, Any] | None = None) -> None:
        conf = _client_conf(opts.bootstrap_servers, {}, 30_000)
        conf.update({"linger.ms": 5, "acks": "all"})
        conf.update(opts.kafka)
        conf["enable.idempotence"] = True
        conf.update(extra or {})
        self.timeout_ms = opts.flush_timeout_ms
        self.sent = 0
        self.failures: list[str] = []
        try:
            self._producer = ck.Producer(conf)
        except ck.KafkaException as e:
            raise OptionError("kafka.*", f"the Kafka producer refused its settings: {e}") from e

    @property
    def client(self) -> ck.Producer:
        """The confluent-kafka producer (for the exactly-once sink's transaction calls)."""
        return self._producer

    def _delivered(self, err: ck.KafkaError | None, msg: Any) -> None:
        if err is not None and len(self.failures) < 10:
            self.failures.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        kwargs: dict[str, Any] = {"value": value, "key": key, "on_delivery": self._delivered}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:
                self._producer.poll(0.1)
            except ck.KafkaException as e:
                raise ConnectorError(f"cannot write to topic {topic!r}: {e.args[0]}") from e
        self.sent += 1
        if self.failures:
            self.raise_failures()
        self._producer.poll(0)

    def raise_failures(self) -> None:
        raise ConnectorError(
            "the Kafka producer could not deliver records: " + "; ".join(self.failures)
        )

    def close(self) -> int:
        left = self._producer.flush(self.timeout_ms / 1000)
        if self.failures:
            self.raise_failures()
        if left:
            raise ConnectorError(
                f"{left} record(s) were not acknowledged within {self.timeout_ms} ms "
                "(option 'flushTimeoutMs')"
            )
        return self.sent


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    for i, field in enumerate(batch.schema):
        if field.name.lower() == name:
            return batch.column(i).to_pylist()
    return None


def _as_bytes(v: Any) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def send_rows(producer: RowProducer, opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> None:
    """Send the rows of Arrow batches (the sink's input columns) with ``producer``."""
    for batch in batches:
        n = batch.num_rows
        values = _column(batch, "value")
        assert values is not None
        keys = _column(batch, "key") or [None] * n
        topics = [opts.topic] * n if opts.topic else _column(batch, "topic")
        assert topics is not None
        parts = _column(batch, "partition") or [None] * n
        headers = _column(batch, "headers") or [None] * n
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise OptionError("topic", "null topic present in the data; use the 'topic' option")
            hs = headers[i]
            producer.send(
                topic,
                _as_bytes(values[i]),
                _as_bytes(keys[i]),
                parts[i],
                [(h["key"], _as_bytes(h["value"])) for h in hs] if hs else None,
            )
