"""Issue 11 acceptance (cluster operations) with real processes: 4 `wherry server --zookeeper`
processes on a real ZooKeeper (`ZkCluster`, broker ids 0..3), real clients (confluent-kafka)
and the real tools (`python -m wherry reassign ...`, `python -m wherry elect ...`, as
subprocesses bounded in time).

Shared cluster, no auto rebalance (`TestOperations`):

1. 12 partitions, RF 3, `min.insync.replicas=2`, reassigned from brokers {0,1,2} to {1,2,3}
   (Kafka's {1,2,3} -> {2,3,4}: ZkCluster's ids start at 0) with `wherry reassign execute` and
   `verify --wait` while an idempotent acks=all producer writes sequence numbers (the value is a
   per-partition counter): no acknowledged record missing, none twice, every replica's `.log`
   bytes identical, broker 0's partition directories gone.
2. The same with a kill -9 of the controller while the (throttled) reassignment runs: the new
   controller finishes it. The killed controller is the broker being removed: a reassignment
   whose target holds a dead broker cannot finish until that broker returns (its new replica
   must join the ISR), in Kafka as here.
3. Replication factor 1 -> 3 and 3 -> 2 by reassignment, the data intact.
4. After a broker restart, `wherry elect --election-type preferred --all-topic-partitions`
   gives every partition back to its preferred replica.

Shared cluster with auto leader rebalance every second and 2 controlled-shutdown attempts
200 ms apart (`TestRollingOperations`):

4. After a broker restart the preferred replicas lead again with no request.
5. A rolling restart (SIGTERM, start, full ISRs, next) under acks=all load: no failed delivery,
   each broker's output shows its controlled shutdown succeeded before it stopped (the stop
   times are printed); and the last ISR member of an RF 2 partition still stops after its
   attempts, with a WARNING, losing nothing.

Run: ``pytest tests/cluster/test_operations_acceptance.py -s`` (``-s`` shows the measurements).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from tests.helpers import create_topic, zk_cluster
from wherry.coordination import paths
from wherry.protocol.records import iter_batches, iter_records
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

BROKERS = 4
SESSION_TIMEOUT_MS = 4_000
STEP_TIMEOUT_S = 60.0
TOOL_TIMEOUT_S = 120.0
COMMON = {
    "offsets.topic.num.partitions": "1",  # the check consumers' group coordinator
    "replica.high.watermark.checkpoint.interval.ms": "500",
}
MANUAL = {
    **COMMON,
    "auto.leader.rebalance.enable": "false",
    # Small fetches, so a throttled reassignment overshoots its rate by little (the quota is
    # checked before each fetch, as in Kafka).
    "replica.fetch.max.bytes": "32768",
    "replica.fetch.response.max.bytes": "65536",
}
AUTO = {
    **COMMON,
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "1",
    "leader.imbalance.per.broker.percentage": "0",
    "controlled.shutdown.max.retries": "2",
    "controlled.shutdown.retry.backoff.ms": "200",
}

Plan = Mapping[tuple[str, int], Sequence[int]]


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------------------- producer


class SequenceProducer:
    """An idempotent acks=all producer: partition p gets the values 0, 1, 2, ... (the counter
    as ASCII, then ``:`` and padding when asked), round robin over the partitions, from a
    background thread; every delivery report is recorded."""

    def __init__(self, bootstrap: str, topic: str, partitions: int,
                 interval_s: float = 0.002) -> None:
        self.topic = topic
        self.partitions = partitions
        self.interval_s = interval_s
        self.lock = threading.Lock()
        self.counters = [0] * partitions
        self.acked: dict[int, dict[int, int]] = {p: {} for p in range(partitions)}  # n -> off
        self.failed: list[str] = []
        self.no_offset: list[tuple[int, int]] = []
        self.fatal: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer({
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            "request.timeout.ms": 10_000,
            "retry.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 1_000,
            "error_cb": self._on_error,
            "log_level": 0,
        })
        self._thread = threading.Thread(target=self._run, name="sequence-producer", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            with self.lock:
                self.fatal.append(str(err))

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        counter = parse_value(msg.value())  # type: ignore[arg-type]
        part, off = msg.partition(), msg.offset()
        with self.lock:
            if err is not None:
                self.failed.append(f"p{part} #{counter}: {err}")
                return
            assert part is not None
            if off is None:  # acknowledged without an offset
                self.no_offset.append((part, counter))
                off = -1
            self.acked[part][counter] = off

    def _produce(self, partition: int, pad: int) -> None:
        value = str(self.counters[partition]).encode() + (b":" + b"x" * pad if pad else b"")
        while True:
            try:
                self._producer.produce(self.topic, value, partition=partition,
                                       on_delivery=self._on_delivery)
                break
            except BufferError:
                self._producer.poll(0.05)
        self.counters[partition] += 1

    def prefill(self, per_partition: int, pad: int = 0) -> None:
        """``per_partition`` records on every partition, as fast as they go, all delivered
        (call before `start`)."""
        for _ in range(per_partition):
            for p in range(self.partitions):
                self._produce(p, pad)
            self._producer.poll(0)
        assert self._producer.flush(60) == 0
        assert not self.failed, self.failed[:5]

    def _run(self) -> None:
        p = 0
        try:
            while not self._stop.is_set() and not self.fatal:
                self._produce(p, 0)
                p = (p + 1) % self.partitions
                self._producer.poll(self.interval_s)
        except Exception as e:  # reported by the checks as a fatal error
            with self.lock:
                self.fatal.append(f"producer thread: {e!r}")

    def start(self) -> SequenceProducer:
        self._thread.start()
        return self

    def stop(self, flush_timeout_s: float = 60.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        remaining = self._producer.flush(flush_timeout_s)
        assert remaining == 0, f"{remaining} records still undelivered"
        assert not self.fatal, self.fatal

    def acked_count(self) -> int:
        with self.lock:
            return sum(len(a) for a in self.acked.values())


def parse_value(value: bytes) -> int:
    return int(value.split(b":", 1)[0])


# ------------------------------------------------------------------------------- checks


def consume_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, int]]]:
    """(offset, counter) of every record of every partition, from the start to the HW."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": new_name("check"),
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "log_level": 0,
    })
    out: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    try:
        ends = {p: high_watermark(consumer, topic, p) for p in range(partitions)}
        consumer.assign([CKTopicPartition(topic, p, 0) for p in range(partitions)])
        pending = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=0.2):
                err, part, off = m.error(), m.partition(), m.offset()
                assert part is not None
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    continue
                assert off is not None
                if off < ends[part]:
                    out[part].append((off, parse_value(m.value())))  # type: ignore[arg-type]
                if off + 1 >= ends[part]:
                    pending.discard(part)
        assert not pending, f"partitions {pending} not read to their end {ends}"
    finally:
        consumer.close()
    return out


MOVING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
          KafkaError._TRANSPORT, KafkaError._TIMED_OUT}


def high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    """The partition's high watermark, asked again while leadership moves (NOT_LEADER...)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return int(consumer.get_watermark_offsets(CKTopicPartition(topic, partition),
                                                      timeout=10, cached=False)[1])
        except KafkaException as e:
            if e.args[0].code() not in MOVING or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def check_records(acked: Mapping[int, Mapping[int, int]],
                  seen: Mapping[int, list[tuple[int, int]]]) -> tuple[int, int]:
    """Every acknowledged record at its offset, no counter twice and the counters in order on
    every partition; returns (records acknowledged, records read)."""
    missing: list[str] = []
    for p, recs in seen.items():
        counters = [n for _, n in recs]
        assert len(counters) == len(set(counters)), f"p{p}: duplicates"
        assert counters == sorted(counters), f"p{p}: counters out of order"
        by_offset, values = dict(recs), set(counters)
        missing += [f"p{p} #{n}@{off}" for n, off in sorted(acked[p].items())
                    if (by_offset.get(off) != n if off >= 0 else n not in values)]
    assert not missing, f"{len(missing)} acknowledged records missing: {missing[:10]}"
    return sum(len(a) for a in acked.values()), sum(len(r) for r in seen.values())


def partition_dir(c: ZkCluster, broker: int, topic: str, partition: int) -> Path:
    return c.directory / f"broker-{broker}" / f"{topic}-{partition}"


def log_bytes(c: ZkCluster, broker: int, topic: str, partition: int) -> bytes:
    """The replica's segments' bytes, in offset order (the files are written through
    unbuffered fds, so another process reads what the broker wrote)."""
    d = partition_dir(c, broker, topic, partition)
    segments = sorted(d.glob("*.log"), key=lambda f: int(f.stem))
    return b"".join(f.read_bytes() for f in segments)


def records_of(data: bytes) -> dict[int, int]:
    out: dict[int, int] = {}
    for pos, _ in iter_batches(data):
        for rec in iter_records(data, pos):
            assert rec.value is not None
            out[rec.offset] = parse_value(rec.value)
    return out


def check_replicas(c: ZkCluster, topic: str,
                   seen: Mapping[int, list[tuple[int, int]]]) -> None:
    """Every replica of every partition holds the same bytes on disk, and what they hold is
    what the consumer read (offset -> counter), nothing beyond the high watermark."""
    assignment = topic_assignment(c, topic)
    for p, replicas in assignment.partitions.items():

        def identical(p: int = p, replicas: Sequence[int] = replicas) -> bool:
            return len({log_bytes(c, b, topic, p) for b in replicas}) == 1

        if not wait_until(identical, 20, 0.2):
            sizes = {b: len(log_bytes(c, b, topic, p)) for b in replicas}
            raise AssertionError(f"{topic}-{p}: replicas differ on disk, bytes {sizes}")
        on_disk = records_of(log_bytes(c, replicas[0], topic, p))
        assert on_disk == dict(seen[p]), f"{topic}-{p}: the log is not what was read"


# ------------------------------------------------------------------------------- cluster state


def topic_assignment(c: ZkCluster, topic: str) -> paths.TopicAssignment:
    data, _ = c.zk().get(paths.topic_path(topic))
    return paths.TopicAssignment.from_json(data)


def all_topics(c: ZkCluster) -> list[str]:
    return sorted(c.zk().get_children(paths.BROKER_TOPICS))


def in_sync(c: ZkCluster, topics: Collection[str] | None = None) -> bool:
    """No reassignment running and every partition led, its ISR all its replicas (ZooKeeper's
    view, the controller's)."""
    for t in all_topics(c) if topics is None else topics:
        a = topic_assignment(c, t)
        if a.adding or a.removing:
            return False
        for p, replicas in a.partitions.items():
            st = c.partition_state(t, p)
            if st is None or st.leader < 0 or set(st.isr) != set(replicas):
                return False
    return True


def preferred_leaders(c: ZkCluster, topics: Collection[str] | None = None) -> bool:
    """Every partition led by its first replica, in ZooKeeper and in every running broker's
    metadata."""
    names = all_topics(c) if topics is None else list(topics)
    for t in names:
        for p, replicas in topic_assignment(c, t).partitions.items():
            st = c.partition_state(t, p)
            if st is None or st.leader != replicas[0]:
                return False
    for b in c.broker_ids:
        if not c.is_running(b):
            continue
        view = c.metadata(b, names)
        for t in names:
            parts = view.partitions(t)
            if not parts or any(v.leader != v.replicas[0] for v in parts.values()):
                return False
    return True


def must(predicate: Callable[[], object], what: str, c: ZkCluster,
         timeout_s: float = STEP_TIMEOUT_S) -> None:
    if not wait_until(predicate, timeout_s, 0.1):
        running = [b for b in c.broker_ids if c.is_running(b)]
        states = {t: {p: c.partition_state(t, p) for p in topic_assignment(c, t).partitions}
                  for t in all_topics(c)}
        raise AssertionError(f"timed out ({timeout_s} s) waiting for {what}; controller "
                             f"{c.controller()}, running {running}, states {states}")


def spread(brokers: Sequence[int], partitions: int, rf: int) -> list[list[int]]:
    """Replicas rotating over ``brokers``, so the preferred leaders are balanced."""
    n = len(brokers)
    return [[brokers[(p + i) % n] for i in range(rf)] for p in range(partitions)]


# ------------------------------------------------------------------------------- the tools


def wherry_tool(*args: str, timeout_s: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``python -m wherry ARGS`` (this interpreter, this checkout), killed after
    ``timeout_s``."""
    return subprocess.run([sys.executable, "-m", "wherry", *args], capture_output=True,
                          text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.args, result.stdout, result.stderr)
    return result.stdout


def write_plan(path: Path, plan: Plan) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())
    ]}))
    return path


def execute(c: ZkCluster, plan_file: Path, *extra: str) -> str:
    out = ok(wherry_tool("reassign", "execute", "--bootstrap-server", c.bootstrap,
                         "--reassignment-json-file", str(plan_file), *extra))
    assert "Successfully started partition reassignment" in out, out
    return out


def verify_wait(c: ZkCluster, plan_file: Path, plan: Plan) -> str:
    result = wherry_tool("reassign", "verify", "--bootstrap-server", bootstrap_of(c),
                         "--reassignment-json-file", str(plan_file), "--wait",
                         "--poll-interval-ms", "200", "--wait-timeout-ms", "90000")
    out = ok(result)
    for t, p in plan:
        assert f"Reassignment of partition {t}-{p} is completed." in out, out
    return out


def list_reassignments(c: ZkCluster) -> str:
    return ok(wherry_tool("reassign", "list", "--bootstrap-server", bootstrap_of(c)))


def bootstrap_of(c: ZkCluster) -> str:
    """The running brokers only (a tool would wait out a dead bootstrap server's timeouts)."""
    return ",".join(c.address(b) for b in c.broker_ids if c.is_running(b))


def check_moved(c: ZkCluster, plan: Plan) -> None:
    """The plan's replicas in ZooKeeper and in every running broker's metadata, ISRs full."""
    must(lambda: in_sync(c, {t for t, _ in plan}), "full ISRs after the reassignment", c)
    for (t, p), replicas in plan.items():
        assert topic_assignment(c, t).partitions[p] == list(replicas)

    def metadata_moved() -> bool:
        for b in c.broker_ids:
            if c.is_running(b):
                view = c.metadata(b, sorted({t for t, _ in plan}))
                for (t, p), replicas in plan.items():
                    v = view.partitions(t).get(p)
                    if v is None or list(v.replicas) != list(replicas) \
                            or set(v.isr) != set(replicas):
                        return False
        return True

    must(metadata_moved, "every broker's metadata to show the new replicas", c, 20)


def dirs_gone(c: ZkCluster, broker: int, topic: str, partitions: Collection[int]) -> bool:
    return not any(partition_dir(c, broker, topic, p).exists() for p in partitions)


# ------------------------------------------------------------------------------- fixtures


def start_cluster(zookeeper: ZooKeeperServer, directory: Path,
                  overrides: Mapping[str, str]) -> ZkCluster:
    c = zk_cluster(zookeeper, directory, brokers=BROKERS, session_timeout_ms=SESSION_TIMEOUT_MS,
                   overrides=overrides).start()
    if not wait_until(lambda: c.controller() is not None, 15):
        c.stop()
        raise AssertionError("no controller elected")
    return c


@pytest.fixture(scope="class")
def manual_cluster(zookeeper: ZooKeeperServer,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("ops-manual"), MANUAL)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="class")
def auto_cluster(zookeeper: ZooKeeperServer,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("ops-auto"), AUTO)
    try:
        yield c
    finally:
        c.stop()


# ------------------------------------------------------------------------------- 1 to 4


class TestOperations:
    """Items 1-3 and the tool half of 4 on one cluster without auto rebalance."""

    def test_reassign_twelve_partitions_under_load(self, manual_cluster: ZkCluster,
                                                   tmp_path: Path) -> None:
        """{0,1,2} -> {1,2,3} (Kafka's {1,2,3} -> {2,3,4}): broker 3 takes broker 0's replica of
        every partition, and with it the leadership of the partitions broker 0 preferred."""
        c = manual_cluster
        t = new_name("move")
        old = spread([0, 1, 2], 12, 3)
        create_topic(c.bootstrap, t, old, **{"min.insync.replicas": "2"})
        must(lambda: in_sync(c, [t]), "the topic online", c)
        producer = SequenceProducer(c.bootstrap, t, 12)
        producer.prefill(20, pad=200)
        producer.start()
        try:
            assert wait_until(lambda: producer.acked_count() >= 400, 20)
            plan = {(t, p): [3 if b == 0 else b for b in r] for p, r in enumerate(old)}
            plan_file = write_plan(tmp_path / "plan.json", plan)
            started = time.monotonic()
            execute(c, plan_file)
            verify_wait(c, plan_file, plan)
            took = time.monotonic() - started
            time.sleep(0.5)  # records acknowledged after the move, too
        finally:
            producer.stop()
        check_moved(c, plan)
        assert not producer.failed, producer.failed[:5]
        seen = consume_all(c.bootstrap, t, 12)
        acked, read = check_records(producer.acked, seen)
        check_replicas(c, t, seen)
        must(lambda: dirs_gone(c, 0, t, range(12)), "broker 0's replicas deleted", c, 20)
        print(f"\n[1] 12 partitions {{0,1,2}} -> {{1,2,3}} in {took:.1f} s (execute + verify "
              f"--wait); {acked} acknowledged, {read} read, 0 failed, 0 missing, 0 duplicates; "
              f"{len(producer.no_offset)} acknowledged without an offset")

    def test_reassignment_survives_a_controller_kill(self, manual_cluster: ZkCluster,
                                                     tmp_path: Path) -> None:
        c = manual_cluster
        controller = c.controller()
        assert controller is not None
        added = next(b for b in c.broker_ids if b != controller)
        old_brokers = [b for b in c.broker_ids if b != added]  # the controller among them
        t = new_name("failover")
        old = spread(old_brokers, 12, 3)
        create_topic(c.bootstrap, t, old, **{"min.insync.replicas": "2"})
        must(lambda: in_sync(c, [t]), "the topic online", c)
        producer = SequenceProducer(c.bootstrap, t, 12, interval_s=0.01)
        producer.prefill(100, pad=1000)  # ~1.2 MB for the new replicas to copy at 100 kB/s
        producer.start()
        try:
            assert wait_until(lambda: producer.acked_count() >= 1300, 20)
            plan = {(t, p): [added if b == controller else b for b in r]
                    for p, r in enumerate(old)}
            plan_file = write_plan(tmp_path / "plan.json", plan)
            started = time.monotonic()
            out = execute(c, plan_file, "--throttle", "100000")
            assert "The inter-broker throttle limit was set to 100000 B/s" in out, out
            listed = list_reassignments(c)
            assert f"adding: {added}. removing: {controller}." in listed, listed
            c.kill(controller)
            killed = time.monotonic()
            must(lambda: c.controller() not in (None, controller), "a new controller", c,
                 SESSION_TIMEOUT_MS / 1000 + 10)
            new_controller = c.controller()
            elected = time.monotonic() - killed
            # Still moving: the new controller lists (and resumes) what the old one started.
            still = list_reassignments(c)
            assert f"adding: {added}. removing: {controller}." in still, still
            out = verify_wait(c, plan_file, plan)
            assert "Clearing broker-level throttles" in out, out
            took = time.monotonic() - started
            time.sleep(0.5)
        except BaseException:
            if controller not in c.procs:  # the class's next tests need all four brokers
                c.start_broker(controller)
            raise
        finally:
            producer.stop()
        check_moved(c, plan)
        assert not producer.failed, producer.failed[:5]
        seen = consume_all(bootstrap_of(c), t, 12)
        acked, read = check_records(producer.acked, seen)
        check_replicas(c, t, seen)
        print(f"\n[2] controller {controller} killed during the reassignment; broker "
              f"{new_controller} controller after {elected:.1f} s; reassignment done after "
              f"{took:.1f} s; {acked} acknowledged, {read} read, 0 failed, 0 missing, "
              f"0 duplicates; {len(producer.no_offset)} acknowledged without an offset")
        c.start_broker(controller)
        must(lambda: controller in c.registered_brokers(), "the killed broker back", c)
        must(lambda: in_sync(c), "full ISRs with the killed broker back", c)
        leftover = [p for p in range(12) if partition_dir(c, controller, t, p).exists()]
        print(f"    the killed broker's old replica directories after its restart: "
              f"{len(leftover)} of 12 left on disk")

    def test_replication_factor_up_and_down(self, manual_cluster: ZkCluster,
                                            tmp_path: Path) -> None:
        c = manual_cluster
        t = new_name("rf")
        create_topic(c.bootstrap, t, [[0], [1], [2]])
        must(lambda: in_sync(c, [t]), "the topic online", c)
        producer = SequenceProducer(c.bootstrap, t, 3)
        producer.prefill(200, pad=100)

        up = {(t, p): [p, (p + 1) % BROKERS, (p + 2) % BROKERS] for p in range(3)}
        up_file = write_plan(tmp_path / "up.json", up)
        execute(c, up_file)
        verify_wait(c, up_file, up)
        check_moved(c, up)
        producer.prefill(100, pad=100)  # written to three replicas now
        seen = consume_all(bootstrap_of(c), t, 3)
        check_records(producer.acked, seen)
        check_replicas(c, t, seen)

        down = {(t, p): r[:2] for (_, p), r in up.items()}
        down_file = write_plan(tmp_path / "down.json", down)
        execute(c, down_file)
        verify_wait(c, down_file, down)
        check_moved(c, down)
        for (_, p), r in up.items():
            must(lambda p=p, b=r[2]: dirs_gone(c, b, t, [p]),  # type: ignore[misc]
                 f"the dropped replica of {t}-{p} deleted", c, 20)
        producer.prefill(100, pad=100)
        producer.stop()
        seen = consume_all(bootstrap_of(c), t, 3)
        acked, read = check_records(producer.acked, seen)
        assert acked == read == 3 * 400
        check_replicas(c, t, seen)
        print(f"\n[3] RF 1 -> 3 -> 2: {acked} acknowledged records, all read, replicas equal")

    def test_preferred_election_after_a_restart(self, manual_cluster: ZkCluster) -> None:
        c = manual_cluster
        must(lambda: in_sync(c), "full ISRs", c)
        controller = c.controller()
        t = new_name("pref")
        create_topic(c.bootstrap, t, spread(c.broker_ids, 8, 3))
        must(lambda: in_sync(c, [t]), "the topic online", c)
        victim = next(b for b in c.broker_ids if b != controller)
        if not preferred_leaders(c):  # earlier steps' moves: one election first
            ok(wherry_tool("elect", "--bootstrap-server", c.bootstrap, "--election-type",
                           "preferred", "--all-topic-partitions"))
        must(lambda: preferred_leaders(c), "preferred leaders before the restart", c, 20)
        c.restart(victim)  # SIGTERM (its leaderships move away) and start
        must(lambda: in_sync(c), "full ISRs after the restart", c)
        prefers = [p for p, r in topic_assignment(c, t).partitions.items() if r[0] == victim]
        assert prefers
        for p in prefers:
            st = c.partition_state(t, p)
            assert st is not None and st.leader != victim, (p, st)
        time.sleep(2)
        assert not preferred_leaders(c)  # nothing moves them back by itself here

        out = ok(wherry_tool("elect", "--bootstrap-server", c.bootstrap, "--election-type",
                             "preferred", "--all-topic-partitions"))
        assert "Successfully completed leader election (PREFERRED) for partitions" in out, out
        for p in prefers:
            assert f"{t}-{p}" in out.split("Successfully completed")[1].split("\n")[0], out
        must(lambda: preferred_leaders(c), "every partition led by its preferred replica", c,
             10)
        print(f"\n[4] broker {victim} restarted (SIGTERM, start); {len(prefers)} of its "
              f"preferred partitions of {t} led elsewhere until wherry elect:\n{out}")


# ------------------------------------------------------------------------------- 4 and 5


class TestRollingOperations:
    """The automatic half of 4 and the rolling restart (5) on a cluster that rebalances
    leaders every second and tries controlled shutdown twice, 200 ms apart."""

    def test_auto_rebalance_after_a_restart(self, auto_cluster: ZkCluster) -> None:
        c = auto_cluster
        controller = c.controller()
        t = new_name("auto")
        create_topic(c.bootstrap, t, spread(c.broker_ids, 8, 3))
        must(lambda: in_sync(c, [t]) and preferred_leaders(c, [t]), "the topic online", c)
        victim = next(b for b in c.broker_ids if b != controller)
        prefers = [p for p, r in topic_assignment(c, t).partitions.items() if r[0] == victim]
        assert prefers
        assert c.stop_broker(victim) == 0
        for p in prefers:  # moved away by the controlled shutdown
            st = c.partition_state(t, p)
            assert st is not None and st.leader != victim, (p, st)
        c.start_broker(victim)
        started = time.monotonic()
        must(lambda: in_sync(c, [t]) and preferred_leaders(c), "the preferred leaders back", c,
             30)
        print(f"\n[4] auto rebalance: broker {victim}'s {len(prefers)} preferred leaderships "
              f"back {time.monotonic() - started:.1f} s after its start, no request")

    def test_rolling_restart_under_load(self, auto_cluster: ZkCluster) -> None:
        c = auto_cluster
        t = new_name("roll")
        create_topic(c.bootstrap, t, spread(c.broker_ids, 12, 3), **{"min.insync.replicas": "2"})
        must(lambda: in_sync(c, [t]), "the topic online", c)
        producer = SequenceProducer(c.bootstrap, t, 12).start()
        stops: dict[int, float] = {}
        try:
            assert wait_until(lambda: producer.acked_count() >= 300, 20)
            for b in c.broker_ids:
                must(lambda: in_sync(c), f"full ISRs before broker {b} stops", c)
                before = len(c.output(b))
                t0 = time.monotonic()
                assert c.stop_broker(b) == 0
                stops[b] = time.monotonic() - t0
                run = c.output(b)[before:]
                shutting = run.find("shutting down")
                succeeded = run.find("controlled shutdown succeeded")
                completed = run.find("shut down completed")
                assert 0 <= shutting < succeeded < completed, run[-3000:]
                c.start_broker(b)
            must(lambda: in_sync(c) and preferred_leaders(c), "full ISRs and the preferred "
                 "leaders back after the rolling restart", c)
            time.sleep(0.5)
        finally:
            producer.stop()
        assert not producer.failed, (len(producer.failed), producer.failed[:5])
        seen = consume_all(c.bootstrap, t, 12)
        acked, read = check_records(producer.acked, seen)
        check_replicas(c, t, seen)
        print(f"\n[5] rolling restart under acks=all load: {acked} acknowledged, {read} read, "
              f"0 failed deliveries ({len(producer.no_offset)} acknowledged without an "
              "offset); SIGTERM -> exit per broker: "
              + ", ".join(f"{b}: {s:.2f} s" for b, s in stops.items()))

    def test_last_isr_member_still_stops(self, auto_cluster: ZkCluster) -> None:
        c = auto_cluster
        must(lambda: in_sync(c), "full ISRs", c)
        controller = c.controller()
        last, other = [b for b in c.broker_ids if b != controller][:2]
        t = new_name("last")
        create_topic(c.bootstrap, t, [[last, other]])
        must(lambda: in_sync(c, [t]), "the topic online", c)
        producer = SequenceProducer(c.bootstrap, t, 1)
        producer.prefill(100, pad=50)
        assert c.stop_broker(other) == 0
        must(lambda: (st := c.partition_state(t, 0)) is not None and st.isr == [last],
             "the ISR down to the last member", c)
        producer.prefill(100, pad=50)  # acks=all with an ISR of one
        producer.stop()

        before = len(c.output(last))
        t0 = time.monotonic()
        assert c.stop_broker(last) == 0
        took = time.monotonic() - t0
        run = c.output(last)[before:]
        gave_up = "controlled shutdown failed after 2 attempt(s)"
        warning = [ln for ln in run.splitlines() if " WARNING " in ln and gave_up in ln]
        assert warning and f"{t}-0" in warning[0], run[-3000:]
        assert run.find("controlled shutdown failed") < run.find("shut down completed")
        assert 0.2 <= took < 15, took

        c.start_broker(last)
        c.start_broker(other)
        must(lambda: in_sync(c), "full ISRs with both back", c)
        seen = consume_all(c.bootstrap, t, 1)
        acked, read = check_records(producer.acked, seen)
        assert acked == read == 200
        check_replicas(c, t, seen)
        print(f"\n[5] last ISR member {last} stopped after its 2 attempts in {took:.2f} s "
              f"({warning[0].split('] ', 1)[-1][:160]}); {acked} acknowledged records all read "
              "after its restart")
