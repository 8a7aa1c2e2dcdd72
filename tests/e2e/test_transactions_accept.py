"""Issue 14 acceptance with real clients and real brokers: the coordinator aborts the
transaction of a producer killed mid-transaction (within transaction.timeout.ms + the check
interval) and read_committed consumers continue past it; compaction of a topic with aborted
transactions keeps only committed data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.broker_process import BrokerProcess, wait_until
from tests.helpers import create_topic, poll_messages
from tests.kafka_wire import call

TIMEOUT_MS = 4000
CHECK_MS = 500

# A producer that opens a transaction, writes records (flushed to the log), says READY and
# then hangs until it is killed.
_STUCK_PRODUCER = """
import sys, time
from confluent_kafka import Producer
bs, topic, tid, timeout_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
p = Producer({"bootstrap.servers": bs, "transactional.id": tid,
              "transaction.timeout.ms": timeout_ms, "socket.timeout.ms": min(timeout_ms, 60000)})
p.init_transactions(20)
p.begin_transaction()
for i in range(5):
    p.produce(topic, key=b"s", value=b"stuck-%d" % i, partition=0)
assert p.flush(20) == 0
print("READY", flush=True)
time.sleep(120)
"""


@pytest.fixture
def tbroker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path / "data",
        overrides=[
            f"transaction.abort.timed.out.transaction.cleanup.interval.ms={CHECK_MS}",
            "offsets.topic.num.partitions=3",
            "transaction.state.log.num.partitions=3",
        ],
    ).start()
    try:
        yield b
    finally:
        b.kill()


def describe(bs: str, tid: str) -> Any:
    r = call(bs, 65, 0, {"transactional_ids": [tid]})
    return r.transaction_states[0]


def listed(bs: str) -> dict[str, tuple[int, str]]:
    r = call(bs, 66, 0, {"state_filters": [], "producer_id_filters": []})
    return {t.transactional_id: (t.producer_id, t.transaction_state) for t in r.transaction_states}


def latest(bs: str, topic: str, isolation: int) -> int:
    r = call(bs, 2, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return int(r.topics[0].partitions[0].offset)


def _consumer(bs: str, isolation: str) -> Consumer:
    return Consumer({"bootstrap.servers": bs, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "isolation.level": isolation,
                     "fetch.wait.max.ms": 100})


def _committed(bs: str, tid: str, topic: str, values: list[bytes], timeout_ms: int) -> None:
    p = Producer({"bootstrap.servers": bs, "transactional.id": tid,
                  "transaction.timeout.ms": timeout_ms, "socket.timeout.ms": timeout_ms})
    p.init_transactions(20)
    p.begin_transaction()
    for v in values:
        p.produce(topic, key=b"c", value=v, partition=0)
    p.commit_transaction(20)


def test_killed_producer_transaction_is_aborted_by_timeout(tbroker: BrokerProcess) -> None:
    bs = tbroker.bootstrap
    topic = f"txto-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    tid = f"stuck-{topic}"
    _committed(bs, f"other-{topic}", topic, [b"c0"], 60_000)  # offsets 0, marker 1

    proc = subprocess.Popen([sys.executable, "-c", _STUCK_PRODUCER, bs, topic, tid,
                             str(TIMEOUT_MS)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        open_txn = describe(bs, tid)
        assert open_txn.transaction_state == "Ongoing"
        assert open_txn.transaction_timeout.total_seconds() * 1000 == TIMEOUT_MS
        pid, epoch = open_txn.producer_id, open_txn.producer_epoch
        # A read_committed reader sees c0 only; the stuck transaction starts at offset 2.
        reader = _consumer(bs, "read_committed")
        reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert [m.value() for m in poll_messages(reader, 1, 15)] == [b"c0"]
        # Another producer commits after the stuck transaction's first offset: not visible.
        _committed(bs, f"other-{topic}", topic, [b"c1", b"c2", b"c3"], 60_000)
        assert latest(bs, topic, 1) == 2
        assert latest(bs, topic, 0) == 11  # c0 m s0..s4 c1..c3 m
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    assert poll_messages(reader, 1, 0.5) == []  # still stuck at the LSO
    assert wait_until(lambda: describe(bs, tid).transaction_state == "CompleteAbort",
                      timeout_s=(TIMEOUT_MS + CHECK_MS) / 1000 + 10, interval_s=0.02)
    took = time.monotonic() - killed
    open_for = time.time() - open_txn.transaction_start_time.timestamp()
    print(f"\nkill -> CompleteAbort: {took:.2f} s, transaction start -> CompleteAbort: "
          f"{open_for:.2f} s (transaction.timeout.ms={TIMEOUT_MS}, check interval {CHECK_MS} ms)")
    assert took <= (TIMEOUT_MS + CHECK_MS) / 1000 + 1.0
    assert open_for >= TIMEOUT_MS / 1000  # not aborted before its timeout
    aborted = describe(bs, tid)
    assert (aborted.producer_id, aborted.producer_epoch) == (pid, epoch + 1)
    assert listed(bs)[tid] == (pid, "CompleteAbort")

    # The reader continues past the aborted transaction; aborted records never show.
    got = poll_messages(reader, 3, 15)
    got += poll_messages(reader, 1, 1)
    reader.close()
    assert [m.value() for m in got] == [b"c1", b"c2", b"c3"]
    assert latest(bs, topic, 1) == latest(bs, topic, 0) == 12  # + the abort marker
    uncommitted = _consumer(bs, "read_uncommitted")
    uncommitted.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values = [m.value() for m in poll_messages(uncommitted, 9, 15)]
    uncommitted.close()
    assert values == [b"c0", *(b"stuck-%d" % i for i in range(5)), b"c1", b"c2", b"c3"]

    # A restarted producer with the same transactional id works.
    _committed(bs, tid, topic, [b"after"], TIMEOUT_MS)
    assert wait_until(lambda: describe(bs, tid).transaction_state == "CompleteCommit")
    after = describe(bs, tid)
    assert after.producer_id == pid and after.producer_epoch > epoch + 1
    reader = _consumer(bs, "read_committed")
    reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = poll_messages(reader, 5, 15)
    got += poll_messages(reader, 1, 1)
    reader.close()
    assert [m.value() for m in got] == [b"c0", b"c1", b"c2", b"c3", b"after"]


# --- compaction of a topic with aborted transactions ---------------------------------------

COMPACT_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "2000",
    "segment.ms": "400",
    "file.delete.delay.ms": "0",
}
KEYS = [f"k{i}".encode() for i in range(10)]


@pytest.fixture
def cbroker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides=[
        "log.cleaner.backoff.ms=200", "offsets.topic.num.partitions=3",
        "transaction.state.log.num.partitions=3"]).start()
    try:
        yield b
    finally:
        b.kill()


def dump_log(pdir: Path) -> list[str]:
    """`wherry dump-log --print-data-log` over the partition's .log files (retried when the
    cleaner swaps a file away in between)."""
    for _ in range(20):
        files = sorted(pdir.glob("*.log"))
        out = subprocess.run(
            [sys.executable, "-m", "wherry", "dump-log", "--print-data-log",
             "--files", ",".join(str(f) for f in files)],
            capture_output=True, text=True, timeout=60,
        )
        if out.returncode == 0:
            return out.stdout.splitlines()
        time.sleep(0.1)
    raise AssertionError(out.stdout + out.stderr)


def _latest_values(bs: str, topic: str, isolation: str) -> dict[bytes, bytes]:
    c = _consumer(bs, isolation)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        last = latest(bs, topic, 1 if isolation == "read_committed" else 0)
        view: dict[bytes, bytes] = {}
        deadline = time.monotonic() + 20
        pos = -1
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                view[m.key() or b""] = m.value() or b""
                pos = m.offset() or 0
            if pos >= last - 2:  # the last data offset (the last marker follows it)
                break
        return view
    finally:
        c.close()


def test_compaction_keeps_only_committed_data(cbroker: BrokerProcess) -> None:
    bs = cbroker.bootstrap
    topic = f"txcmp-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, **COMPACT_CONFIG)
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"cmp-{topic}",
                  "linger.ms": 5})
    p.init_transactions(20)
    pad = b"." * 80
    expected: dict[bytes, bytes] = {}

    def txn(round_: int, keys: list[bytes], commit: bool) -> None:
        p.begin_transaction()
        tag = b"committed" if commit else b"aborted"
        for k in keys:
            p.produce(topic, key=k, value=b"%s-%d-%s-%s" % (tag, round_, k, pad), partition=0)
        if commit:
            p.commit_transaction(20)
            for k in keys:
                expected[k] = b"%s-%d-%s-%s" % (tag, round_, k, pad)
        else:
            assert p.flush(20) == 0  # in the log before the abort
            p.abort_transaction(20)

    txn(0, KEYS, True)
    for r in range(1, 8):
        txn(r, KEYS, False)  # aborted values over committed ones
        txn(r, KEYS[: 10 - r], True)  # fewer keys each round: older values stay latest
        txn(r, KEYS[r:], False)  # aborted values newer than every committed one
    pdir = cbroker.data_dir / f"{topic}-0"
    before = dump_log(pdir)
    # (the cleaner may already have cleaned rolled segments meanwhile)
    assert any("payload: aborted" in line for line in before)
    # Roll: the next transaction starts a segment of its own, everything before is cleanable.
    time.sleep(0.5)
    p.begin_transaction()
    p.produce(topic, key=b"__roll", value=b"x", partition=0)
    p.commit_transaction(20)
    expected[b"__roll"] = b"x"

    def no_aborted_data() -> bool:
        return not any("payload: aborted" in line for line in dump_log(pdir))

    assert wait_until(no_aborted_data, timeout_s=30, interval_s=0.3), cbroker.log_text()[-3000:]
    cleaned = dump_log(pdir)
    # Markers of aborted transactions (their data gone) carry a delete horizon, then go.
    abort_batches = [i for i, line in enumerate(cleaned) if "endTxnMarker: ABORT" in line]
    horizons = [int(cleaned[i - 1].split("deleteHorizonMs: OptionalLong[")[1].split("]")[0])
                for i in abort_batches if "OptionalLong[" in cleaned[i - 1]]
    print(f"\nafter the first clean: {len(abort_batches)} abort markers, "
          f"{len(horizons)} with a delete horizon")
    for isolation in ("read_committed", "read_uncommitted"):
        assert _latest_values(bs, topic, isolation) == expected, isolation

    def no_abort_markers() -> bool:
        return not any("endTxnMarker: ABORT" in line for line in dump_log(pdir))

    assert wait_until(no_abort_markers, timeout_s=30, interval_s=0.3), cbroker.log_text()[-3000:]
    if horizons:
        assert time.time() * 1000 >= max(horizons)
    final = dump_log(pdir)
    data = [line for line in final if "payload:" in line]
    assert not any("payload: aborted" in line for line in data)
    # Only the latest committed value of each key is left.
    keys = [line.split(" key: ")[1].split(" payload:")[0] for line in data]
    assert sorted(keys) == sorted(k.decode() for k in expected), final
    for isolation in ("read_committed", "read_uncommitted"):
        assert _latest_values(bs, topic, isolation) == expected, isolation
    p.flush(5)
