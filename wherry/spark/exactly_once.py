"""The exactly-once streaming sink (``option("exactlyOnce", "true")``): Kafka transactions that
commit when Spark commits the micro-batch.

A task (query Q, micro-batch N, Spark partition p) on an executor:

1. opens a transactional producer with the id ``wherry-spark-<Q>-<p>`` and initialises it,
   which aborts whatever transaction an earlier attempt left open under that id and fences
   that attempt (a retried task, a re-run batch after a restart, a zombie executor);
2. reads the task's marker, the committed offset of the consumer group
   ``wherry-spark-<Q>-<p>`` on the state topic: the next batch id whose output p has
   committed. Above N, this task's output of batch N is already committed (the query died
   between the commit and Spark's record of it): the task writes nothing;
3. else begins a transaction, writes its rows, moves the marker to N + 1 inside the same
   transaction (TxnOffsetCommit, so the output and the marker commit together), flushes, and
   returns (transactional id, producer id, epoch) to the driver, leaving the transaction open.

The driver's ``commit(messages, N)``, called when every task succeeded, ends each transaction
with EndTxn(commit), then aborts the query's open transactions that no task of the batch owns
(`fence_strays`); ``abort`` ends the batch's transactions with EndTxn(abort). A transaction
fenced or timed out before the driver commits it fails the commit, so the batch fails and is
run again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from wherry.spark.kafka_access import ConnectorError, RowProducer, _client_conf, send_rows
from wherry.spark.options import SinkOptions
from wherry.spark.txn_wire import end_txn, fence, list_transactions

log = logging.getLogger("wherry.spark")

ID_PREFIX = "wherry-spark-"
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # Spark's local properties of a streaming task
BATCH_ID_PROPERTY = "streaming.sql.batchId"
STATS_INTERVAL_MS = 20  # librdkafka statistics carry the producer id and epoch


def transactional_id(query_id: str, partition: int) -> str:
    """One id per query and Spark partition: reused by every batch (the coordinator keeps one
    entry per id), and by every attempt of a task, so that each attempt fences the one before."""
    return f"{ID_PREFIX}{query_id}-{partition}"


@dataclass(frozen=True, slots=True)
class TxnResult(WriterCommitMessage):
    """A task's open transaction (``producer_id`` -1: the task found its output of this batch
    already committed and wrote nothing)."""

    query_id: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    batch_id: int
    records: int


def _task_ids() -> tuple[str, int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
    batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
    if ctx is None or query_id is None or batch_id is None:
        raise ConnectorError("the exactly-once sink runs only in a streaming query's tasks")
    return query_id, int(batch_id), ctx.partitionId()


def _marker(opts: SinkOptions, group: str) -> tuple[Consumer, int]:
    """A consumer of the task's marker group, and the marker: the next batch id to write."""
    conf = _client_conf(opts.bootstrap_servers, opts.kafka, opts.flush_timeout_ms)
    conf.update({"group.id": group, "isolation.level": "read_committed"})
    consumer = Consumer(conf)
    try:
        [tp] = consumer.committed(
            [TopicPartition(opts.state_topic, 0)], timeout=opts.flush_timeout_ms / 1000
        )
    except KafkaException as e:
        consumer.close()
        raise ConnectorError(f"cannot read the sink's marker of {group}: {e.args[0]}") from e
    return consumer, max(tp.offset, 0)


def producer_id_and_epoch(
    producer: RowProducer, stats: list[str], timeout_s: float
) -> tuple[int, int]:
    """The producer id and epoch of ``producer``'s open transaction, from the statistics
    librdkafka reports (it has no other way to tell them)."""
    stats.clear()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        producer.client.poll(STATS_INTERVAL_MS / 1000)
        for raw in stats:
            eos = json.loads(raw).get("eos", {})
            if eos.get("txn_state") == "InTransaction" and eos.get("producer_id", -1) >= 0:
                return int(eos["producer_id"]), int(eos["producer_epoch"])
        stats.clear()
    raise ConnectorError("the transactional producer did not report its producer id in time")


def write_transaction(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> TxnResult:
    """One task's rows in a transaction left open for the driver (see the module's doc)."""
    query_id, batch_id, partition = _task_ids()
    txn_id = transactional_id(query_id, partition)
    stats: list[str] = []
    producer = RowProducer(
        opts,
        {
            "transactional.id": txn_id,
            "statistics.interval.ms": STATS_INTERVAL_MS,
            "stats_cb": stats.append,
        },
    )
    timeout_s = opts.flush_timeout_ms / 1000
    kp = producer.client
    try:
        kp.init_transactions(timeout_s)  # aborts and fences every earlier attempt
        consumer, next_batch = _marker(opts, txn_id)
        try:
            if next_batch > batch_id:
                log.info("%s: batch %d was committed before; nothing to write", txn_id, batch_id)
                for _ in batches:  # Spark's input still has to be read
                    pass
                return TxnResult(query_id, txn_id, -1, -1, batch_id, 0)
            kp.begin_transaction()
            try:
                send_rows(producer, opts, batches)
                kp.send_offsets_to_transaction(
                    [TopicPartition(opts.state_topic, 0, batch_id + 1)],
                    consumer.consumer_group_metadata(),
                    timeout_s,
                )
                records = producer.close()  # flushed: every record acknowledged
            except BaseException:
                _abort_quietly(producer, txn_id)
                raise
        finally:
            consumer.close()
        pid, epoch = producer_id_and_epoch(producer, stats, timeout_s)
    except KafkaException as e:
        raise ConnectorError(f"transaction {txn_id}: {e.args[0]}") from e
    # Dropped without close(): close() would abort the open transaction, destruction does not.
    del kp, producer
    return TxnResult(query_id, txn_id, pid, epoch, batch_id, records)


def _abort_quietly(producer: RowProducer, txn_id: str) -> None:
    """A failing task aborts its transaction at once (else it would hold back read_committed
    readers until the next attempt fences it, or until it times out)."""
    try:
        producer.client.abort_transaction(10)
    except Exception as e:  # fenced, or the cluster is gone: the coordinator ends it later
        log.warning("%s: could not abort the failed task's transaction: %s", txn_id, e)


def _metadata(opts: SinkOptions) -> tuple[AdminClient, Any]:
    admin = AdminClient(_client_conf(opts.bootstrap_servers, opts.kafka, opts.flush_timeout_ms))
    try:
        return admin, admin.list_topics(timeout=opts.flush_timeout_ms / 1000)
    except KafkaException as e:
        raise ConnectorError(f"no cluster metadata: {e.args[0]}") from e


def ensure_state_topic(opts: SinkOptions) -> None:
    """Create the state topic (one partition, no records) when it does not exist yet."""
    admin, metadata = _metadata(opts)
    timeout_s = opts.flush_timeout_ms / 1000
    if opts.state_topic in metadata.topics:
        return
    rf = min(3, len(metadata.brokers))
    future = admin.create_topics([NewTopic(opts.state_topic, 1, rf)], operation_timeout=timeout_s)
    try:
        future[opts.state_topic].result(timeout_s)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise ConnectorError(
                f"cannot create the sink's state topic {opts.state_topic!r}: {e.args[0]}"
            ) from e


def _end_all(opts: SinkOptions, results: list[TxnResult], *, commit: bool) -> None:
    open_ones = [r for r in results if r.producer_id >= 0]
    timeout_s = opts.flush_timeout_ms / 1000

    def end(r: TxnResult) -> None:
        end_txn(
            opts.bootstrap_servers,
            r.transactional_id,
            r.producer_id,
            r.producer_epoch,
            commit=commit,
            timeout_s=timeout_s,
        )

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(open_ones)))) as pool:
        for future in [pool.submit(end, r) for r in open_ones]:
            future.result()


def fence_strays(opts: SinkOptions, results: list[TxnResult]) -> list[str]:
    """Abort the query's open transactions that no task of this batch owns (left by an earlier
    run whose batch had more Spark partitions, which no later task would fence). Nothing of the
    query writes now: the batch's tasks are done and the next batch has not begun. Their ids."""
    if not results:
        return []
    prefix = transactional_id(results[0].query_id, 0)[:-1]
    ours = {r.transactional_id for r in results}
    _, metadata = _metadata(opts)
    brokers = [f"{b.host}:{b.port}" for b in metadata.brokers.values()]
    timeout_s = opts.flush_timeout_ms / 1000
    strays = sorted(
        t.transactional_id
        for t in list_transactions(brokers, states=("Ongoing",), timeout_s=timeout_s)
        if t.transactional_id.startswith(prefix) and t.transactional_id not in ours
    )
    for txn_id in strays:
        log.warning("aborting %s, an open transaction of an earlier run of the query", txn_id)
        fence(opts.bootstrap_servers, txn_id, timeout_s=timeout_s)
    return strays


class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_transaction(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        results = [m for m in messages if isinstance(m, TxnResult)]
        if len(results) != len(messages):
            raise ConnectorError(f"micro-batch {batchId}: a task returned no transaction")
        _end_all(self.opts, results, commit=True)
        fence_strays(self.opts, results)
        log.info(
            "micro-batch %d: committed %d transaction(s), %d records",
            batchId,
            sum(r.producer_id >= 0 for r in results),
            sum(r.records for r in results),
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        results = [m for m in messages if isinstance(m, TxnResult)]
        try:
            _end_all(self.opts, results, commit=False)
        except Exception as e:  # the transactions time out on their own; the batch is re-run
            log.warning("micro-batch %d: aborting its transactions failed: %s", batchId, e)
        log.warning("micro-batch %d aborted; it is written again when retried", batchId)

