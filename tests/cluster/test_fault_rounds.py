"""Real-process fault rounds (issue 6 acceptance): ZooKeeper + 3 `wherry server --zookeeper`
processes, a topic with RF 3 and `min.insync.replicas=2`, an idempotent acks=all producer
writing sequence-numbered records from a background thread, while the test, round after
round, kills -9 a partition leader, kills -9 the controller, stops a leader with SIGTERM and
SIGSTOPs a leader for longer than `replica.lag.time.max.ms` (once also longer than the
ZooKeeper session, so a zombie leader wakes up after it was replaced).

Afterwards (every broker up, every ISR full again) a consumer reads every partition from the
beginning to the high watermark, and the check finds no acknowledged record missing or moved,
no value twice, and — reading each broker's partition directories with wherry's own `Log`
after the cluster stopped — the same (offset → value) on every replica below the high
watermark. Short timings: lag 2 s, ZooKeeper session 4 s, tickTime 100 ms.

No send may fail either: a restarting broker must not lead the producer into a fatal state
(librdkafka's "Unable to reconstruct MessageSet" once failed every send after it). With
`WHERRY_FAULT_CLIENT_DEBUG=<file>` the producer's librdkafka debug log (msg, protocol, eos,
topic, metadata) is written to that file; `WHERRY_FAULT_PRODUCE_INTERVAL_S` sets the pause
between two sends (0.002 s; 0.0001 drives millions of records through the rounds)."""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests import helpers
from tests.helpers import zk_cluster
from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.log import Log
from wherry.protocol.records import iter_batches, iter_records
from wherry.runtime.state_change_log import STATE_CHANGE_LOG_FILE, merge_state_change_logs
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

BROKERS = 3
PARTITIONS = 3
LAG_MS = 2_000
SESSION_TIMEOUT_MS = 4_000
ROUNDS = 12
PAUSE_S = LAG_MS / 1000 + 1.0  # longer than the lag time, shorter than the session
LONG_PAUSE_S = SESSION_TIMEOUT_MS / 1000 + 2.0  # the session expires: a zombie leader
DOWN_S = 1.0  # how long a killed/stopped broker stays down after its leadership moved
STEP_TIMEOUT_S = 30.0
# ~500 records/s offered; WHERRY_FAULT_PRODUCE_INTERVAL_S=0.0001 offers as many as it takes
PRODUCE_INTERVAL_S = float(os.environ.get("WHERRY_FAULT_PRODUCE_INTERVAL_S", "0.002"))


@dataclass
class Acks:
    """What the producer thread saw (guarded by `lock`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: int = 0
    # seq -> (partition, offset); offset -1: acknowledged without one (librdkafka's idempotent
    # producer reports a batch whose answer was lost as persisted, with no offset, once a later
    # batch of the same partition is acknowledged)
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    ack_times: dict[int, list[float]] = field(default_factory=dict)  # partition -> times
    failed: dict[int, str] = field(default_factory=dict)  # seq -> error
    fatal: list[str] = field(default_factory=list)


class SequenceProducer:
    """A background thread producing value = global sequence number (as ASCII) to partition
    seq % PARTITIONS, with acks=all and idempotence, recording every acknowledgement."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acks = Acks()
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "request.timeout.ms": 5_000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1_000,
                "error_cb": self._on_error,
                "log_level": 0,
                **client_debug(),
            }
        )
        self._thread = threading.Thread(target=self._run, name="sequence-producer", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            with self.acks.lock:
                self.acks.fatal.append(str(err))

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        seq = int(msg.value())  # type: ignore[arg-type]
        with self.acks.lock:
            if err is not None:
                self.acks.failed[seq] = str(err)
                return
            part, off = msg.partition(), msg.offset()
            assert part is not None
            self.acks.acked[seq] = (part, -1 if off is None else off)
            self.acks.ack_times.setdefault(part, []).append(time.monotonic())

    def _run(self) -> None:
        try:
            self._produce_loop()
        except Exception as e:  # reported by the test as a fatal error
            with self.acks.lock:
                self.acks.fatal.append(f"producer thread: {e!r}")

    def _produce_loop(self) -> None:
        seq = 0
        while not self._stop.is_set() and not self.acks.fatal:
            try:
                self._producer.produce(
                    self.topic,
                    str(seq).encode(),
                    partition=seq % PARTITIONS,
                    on_delivery=self._on_delivery,
                )
            except BufferError:
                self._producer.poll(0.05)
                continue
            seq += 1
            with self.acks.lock:
                self.acks.sent = seq
            self._producer.poll(PRODUCE_INTERVAL_S)

    def start(self) -> None:
        self._thread.start()

    def stop(self, flush_timeout_s: float = 60.0) -> int:
        """Stop producing and wait for every outstanding delivery; returns how many remain."""
        self._stop.set()
        self._thread.join(10)
        return self._producer.flush(flush_timeout_s)

    def acked_count(self) -> int:
        with self.acks.lock:
            return len(self.acks.acked)

    def first_ack_after(self, partition: int, t: float) -> float | None:
        with self.acks.lock:
            times = self.acks.ack_times.get(partition, [])
            i = bisect.bisect_right(times, t)
            return times[i] if i < len(times) else None


def client_debug() -> dict[str, object]:
    """librdkafka's debug log to the file `WHERRY_FAULT_CLIENT_DEBUG` names, if set."""
    path = os.environ.get("WHERRY_FAULT_CLIENT_DEBUG")
    if not path:
        return {}
    logger = logging.getLogger("fault-rounds.librdkafka")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    return {"debug": "msg,protocol,eos,topic,metadata", "logger": logger, "log_level": 7}


@dataclass(frozen=True)
class FaultResult:
    round: int
    kind: str
    long_pause: bool
    victim: int
    partition: int
    elected_s: float | None  # fault -> another leader in ZooKeeper (None: leader unchanged)
    acks_s: float  # fault -> first new acknowledgement on the partition
    isr_full_s: float  # fault -> every partition's ISR full again (victim restarted)


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    overrides = {
        "replica.lag.time.max.ms": str(LAG_MS),
        "replica.high.watermark.checkpoint.interval.ms": "500",
        "offsets.topic.num.partitions": "1",  # the check consumers' group coordinator
    }
    with zk_cluster(
        zookeeper,
        tmp_path,
        brokers=BROKERS,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        overrides=overrides,
    ) as c:
        yield c


# ------------------------------------------------------------------------------- helpers


def leader_of(c: ZkCluster, topic: str, partition: int) -> int:
    state = c.partition_state(topic, partition)
    assert state is not None
    return state.leader


def isr_full(c: ZkCluster, topic: str) -> bool:
    for p in range(PARTITIONS):
        state = c.partition_state(topic, p)
        if state is None or len(state.isr) != BROKERS or state.leader < 0:
            return False
    return True


def must(predicate: Callable[[], object], what: str, c: ZkCluster, topic: str) -> None:
    if not wait_until(predicate, STEP_TIMEOUT_S, 0.02):
        states = {p: c.partition_state(topic, p) for p in range(PARTITIONS)}
        running = [b for b in range(BROKERS) if c.is_running(b)]
        raise AssertionError(
            f"timed out ({STEP_TIMEOUT_S} s) waiting for {what}; controller {c.controller()}, "
            f"running {running}, partition states {states}"
        )


def create_topic(bootstrap: str, topic: str) -> None:
    assignment = [[(p + i) % BROKERS for i in range(BROKERS)] for p in range(PARTITIONS)]
    helpers.create_topic(bootstrap, topic, assignment, **{"min.insync.replicas": "2"})
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(20)
    assert configs["min.insync.replicas"].value == "2"


def consume_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """(offset, value) of every record of every partition, from the start to the HW."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
            "log_level": 0,
        }
    )
    out: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    try:
        ends = {
            p: consumer.get_watermark_offsets(CKTopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([CKTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        pending = {p for p, end in ends.items() if end > 0}
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=0.2):
                err = m.error()
                part = m.partition()
                assert part is not None
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    continue
                off = m.offset()
                assert off is not None
                out[part].append((off, int(m.value())))  # type: ignore[arg-type]
                if off + 1 >= ends[part]:
                    pending.discard(part)
        assert not pending, f"partitions {pending} not read to their end {ends}"
    finally:
        consumer.close()
    return out


def read_replica(log_dir: Path, tp: TopicPartition) -> dict[int, int]:
    """offset -> value of a stopped broker's partition log, read with wherry's own Log."""
    log = Log.open(
        log_dir / str(tp), LogConfig(), topic_partition=tp, now_ms=int(time.time() * 1000)
    )
    out: dict[int, int] = {}
    try:
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, max_bytes=1 << 20)
            if not data:
                break
            for pos, header in iter_batches(data):
                for rec in iter_records(data, pos):
                    assert rec.value is not None
                    out[rec.offset] = int(rec.value)
                offset = header.last_offset + 1
    finally:
        log.close()
    return out


# ------------------------------------------------------------------------------- the test


def test_no_acknowledged_write_lost_over_fault_rounds(cluster: ZkCluster) -> None:
    c = cluster
    started = time.monotonic()
    topic = f"faults-{uuid.uuid4().hex[:6]}"
    assert wait_until(lambda: c.controller() is not None, 10)
    create_topic(c.bootstrap, topic)
    must(lambda: isr_full(c, topic), "the topic online with full ISRs", c, topic)

    producer = SequenceProducer(c.bootstrap, topic)
    producer.start()
    assert wait_until(lambda: producer.acked_count() >= 200, 20), producer.acks.failed
    results: list[FaultResult] = []
    kinds = ("kill_leader", "kill_controller", "term_leader", "pause_leader")
    try:
        for rnd in range(ROUNDS):
            kind = kinds[rnd % len(kinds)]
            partition = rnd % PARTITIONS
            results.append(run_round(c, topic, producer, rnd, kind, partition))
            r = results[-1]
            label = kind + (" (long)" if r.long_pause else "")
            print(
                f"round {rnd:2d} {label:<22} broker {r.victim} (p{r.partition}): "
                f"elected {'-' if r.elected_s is None else f'{r.elected_s:.2f} s'}, "
                f"acks after {r.acks_s:.2f} s, ISR full after {r.isr_full_s:.2f} s; "
                f"{producer.acked_count()} acked"
            )
            assert not producer.acks.fatal, producer.acks.fatal
    finally:
        remaining = producer.stop()
    assert not producer.acks.fatal, producer.acks.fatal
    assert remaining == 0, f"{remaining} records still undelivered"
    must(lambda: isr_full(c, topic), "full ISRs after the rounds", c, topic)
    hws = {p: leader_hw_wait(c, topic, p) for p in range(PARTITIONS)}

    # ---- what a consumer sees
    seen = consume_all(c.bootstrap, topic)
    acked = dict(producer.acks.acked)
    failed = dict(producer.acks.failed)
    by_position = {(p, off): v for p, recs in seen.items() for off, v in recs}
    values = [v for recs in seen.values() for _, v in recs]
    in_partition = {(p, v) for p, recs in seen.items() for _, v in recs}
    missing = [
        (seq, pos)
        for seq, pos in sorted(acked.items())
        if (by_position.get(pos) != seq if pos[1] >= 0 else (pos[0], seq) not in in_partition)
    ]
    duplicates = len(values) - len(set(values))
    for p, recs in seen.items():
        offsets = [off for off, _ in recs]
        assert offsets == sorted(set(offsets)), f"p{p}: offsets out of order or repeated"
        assert len(recs) == hws[p], f"p{p}: {len(recs)} records read, HW {hws[p]}"

    # ---- every replica's log, read from disk after a clean stop
    c.stop()
    mismatches: list[str] = []
    for p in range(PARTITIONS):
        tp = TopicPartition(topic, p)
        consumer_view = dict(seen[p])
        for b in range(BROKERS):
            replica = read_replica(c.directory / f"broker-{b}", tp)
            below_hw = {off: v for off, v in replica.items() if off < hws[p]}
            if below_hw != consumer_view:
                diff = sorted(
                    off
                    for off in set(below_hw) | set(consumer_view)
                    if below_hw.get(off) != consumer_view.get(off)
                )
                mismatches.append(f"p{p} broker {b}: {len(diff)} offsets differ, first {diff[:5]}")

    transitions = [
        (r.old_state, r.new_state)
        for r in merge_state_change_logs(
            [c.directory / f"broker-{b}" / STATE_CHANGE_LOG_FILE for b in range(BROKERS)]
        )
        if r.topic == topic and r.is_change and r.node_kind == "Broker"
    ]
    shrinks = transitions.count(("PendingShrinkIsr", "Committed"))
    expands = transitions.count(("PendingExpandIsr", "Committed"))
    elapsed = time.monotonic() - started
    print(
        f"\n{len(results)} rounds in {elapsed:.0f} s; {producer.acks.sent} sent, {len(acked)} "
        f"acked, {len(failed)} failed (not acknowledged), {len(values)} in the log; "
        f"missing {len(missing)}, duplicates {duplicates}, replica mismatches {len(mismatches)}; "
        f"ISR shrinks {shrinks}, expansions {expands} committed by leaders"
    )
    for kind in kinds:
        rs = [r for r in results if r.kind == kind]
        elected = [r.elected_s for r in rs if r.elected_s is not None]
        print(
            f"  {kind:<15} x{len(rs)}: elected "
            + (f"max {max(elected):.2f} s" if elected else "-")
            + f", acks resume max {max(r.acks_s for r in rs):.2f} s, "
            f"ISR full max {max(r.isr_full_s for r in rs):.2f} s"
        )
    assert not missing, f"{len(missing)} acknowledged records missing, first {missing[:10]}"
    assert duplicates == 0
    assert not failed, f"{len(failed)} sends failed, first {sorted(failed.items())[:5]}"
    assert not mismatches, mismatches
    assert len(acked) > 1000


LEADER_MOVED = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
    }
)
"""Watermark answers worth asking again (librdkafka does not mark them retriable here)."""


def leader_hw_wait(c: ZkCluster, topic: str, partition: int) -> int:
    """The partition's high watermark once it stops moving (the producer is stopped). Asked
    again when leadership moves meanwhile (auto leader rebalance may give it back to the
    preferred replica after the rounds)."""
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "hw", "log_level": 0})
    try:
        last = -1
        for _ in range(100):
            try:
                hw = consumer.get_watermark_offsets(
                    CKTopicPartition(topic, partition), timeout=10, cached=False
                )[1]
            except KafkaException as e:
                if e.args[0].code() not in LEADER_MOVED:
                    raise
                time.sleep(0.2)
                continue
            if hw == last:
                return hw
            last = hw
            time.sleep(0.2)
        raise AssertionError(f"p{partition}: the high watermark keeps moving")
    finally:
        consumer.close()


def run_round(
    c: ZkCluster, topic: str, producer: SequenceProducer, rnd: int, kind: str, partition: int
) -> FaultResult:
    must(lambda: isr_full(c, topic), f"full ISRs before round {rnd}", c, topic)
    before = c.partition_state(topic, partition)
    assert before is not None
    victim = c.controller() if kind == "kill_controller" else before.leader
    assert victim is not None
    # The partition the round watches: one the victim leads (any, if it leads none).
    led = [p for p in range(PARTITIONS) if leader_of(c, topic, p) == victim]
    watched = partition if partition in led else (led[0] if led else partition)
    before = c.partition_state(topic, watched)
    assert before is not None
    epoch_before = before.leader_epoch

    def moved() -> bool:
        s = c.partition_state(topic, watched)
        return s is not None and s.leader not in (-1, victim) and s.leader_epoch > epoch_before

    t0 = gone = time.monotonic()
    elected: float | None = None
    long_pause = False
    if kind in ("kill_leader", "kill_controller", "term_leader"):
        if kind == "term_leader":
            c.stop_broker(victim)
            gone = time.monotonic()  # the old leader acks until it exits: count from here
        else:
            c.kill(victim)
        if kind == "kill_controller":
            must(lambda: c.controller() not in (None, victim), "a new controller", c, topic)
        if victim == before.leader or watched in led:
            must(moved, f"p{watched} to move off broker {victim}", c, topic)
            elected = time.monotonic() - t0
        time.sleep(DOWN_S)
        c.start_broker(victim)
    else:
        long_pause = (rnd // 4) % 2 == 1
        c.pause(victim)
        try:
            # With the long pause the session expires: another leader is elected meanwhile.
            pause_s = LONG_PAUSE_S if long_pause else PAUSE_S
            if long_pause and wait_until(moved, pause_s, 0.02):
                elected = time.monotonic() - t0
            time.sleep(max(0.0, t0 + pause_s - time.monotonic()))
        finally:
            c.resume(victim)
        if long_pause and elected is None:
            raise AssertionError(f"p{watched} did not move off broker {victim} while paused")
    # Acks the victim sent before the signal may still be on their way for a few ms.
    must(
        lambda: producer.first_ack_after(watched, gone + 0.05) is not None,
        f"acks on p{watched} after the fault",
        c,
        topic,
    )
    first = producer.first_ack_after(watched, gone + 0.05)
    assert first is not None
    acks_s = first - t0
    must(lambda: isr_full(c, topic), f"full ISRs after round {rnd}", c, topic)
    return FaultResult(
        rnd,
        kind,
        long_pause,
        victim,
        watched,
        elected,
        acks_s,
        time.monotonic() - t0,
    )
