"""Log compaction through a real broker process and confluent-kafka clients."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.broker_process import BrokerProcess, wait_until
from tests.helpers import poll_messages

OVERRIDES = ("log.cleaner.backoff.ms=200", "offsets.topic.num.partitions=3")
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1500",
    "segment.ms": "400",
    "file.delete.delay.ms": "0",
}


@pytest.fixture
def cbroker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES).start()
    try:
        yield b
    finally:
        b.kill()


def _create(bs: str, config: dict[str, str] = TOPIC_CONFIG) -> str:
    topic = f"cmp-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(15)
    return topic


def _produce(bs: str, topic: str, items: list[tuple[bytes, bytes | None]]) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.size": 2000})
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for k, v in items:
        p.produce(topic, key=k, value=v, partition=0, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors[:3]


def _roll(bs: str, topic: str) -> None:
    """Let segment.ms pass, then append so the segment holding the updates rolls."""
    time.sleep(0.5)
    _produce(bs, topic, [(b"__roll", b"x")])


def _read_all(bs: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    try:
        _lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        last = -1
        while last < hi - 1 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            last = m.offset() or 0
            out.append((last, m.key(), m.value()))
        return out
    finally:
        c.close()


def _latest(recs: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    view: dict[bytes | None, bytes | None] = {}
    for _, k, v in recs:
        view[k] = v
    return view


def _updates(keys: int, rounds: int) -> list[tuple[bytes, bytes | None]]:
    return [
        (f"k{k}".encode(), f"v{r}-{k}".encode() * 4) for r in range(rounds) for k in range(keys)
    ]


def test_many_updates_shrink_to_one_per_key(cbroker: BrokerProcess) -> None:
    bs = cbroker.bootstrap
    topic = _create(bs)
    items = _updates(20, 30)
    _produce(bs, topic, items)
    expected = _latest([(0, k, v) for k, v in items])
    pdir = cbroker.data_dir / f"{topic}-0"
    size_before = sum(p.stat().st_size for p in pdir.glob("*.log"))
    _roll(bs, topic)

    def cleaned() -> bool:
        recs = _read_all(bs, topic)
        keys = [k for _, k, _ in recs]
        return len(keys) == len(set(keys))

    assert wait_until(cleaned, timeout_s=30, interval_s=0.5), cbroker.log_text()[-3000:]
    recs = _read_all(bs, topic)
    view = _latest(recs)
    view.pop(b"__roll")
    assert view == expected
    size_after = sum(p.stat().st_size for p in pdir.glob("*.log"))
    assert size_after < size_before / 5
    assert (cbroker.data_dir / "cleaner-offset-checkpoint").exists()


def test_tombstones_disappear_after_delete_retention(cbroker: BrokerProcess) -> None:
    bs = cbroker.bootstrap
    topic = _create(bs)
    _produce(bs, topic, _updates(5, 5))
    _produce(bs, topic, [(b"k1", None), (b"k3", None)])
    _roll(bs, topic)
    # cleaned, tombstones still there (judged on the read that saw six records: on a slow
    # machine delete.retention.ms may pass before another read, and the next clean drops them)
    seen: list[list[tuple[int, bytes | None, bytes | None]]] = []

    def six() -> bool:
        seen.append(_read_all(bs, topic))
        return len(seen[-1]) == 6

    assert wait_until(six, timeout_s=20, interval_s=0.3)
    view = _latest(seen[-1])
    assert view[b"k1"] is None and view[b"k3"] is None
    # then gone after delete.retention.ms
    assert wait_until(lambda: len(_read_all(bs, topic)) == 4, timeout_s=20, interval_s=0.3)
    assert set(_latest(_read_all(bs, topic))) == {b"k0", b"k2", b"k4", b"__roll"}


def test_consistent_view_while_cleaning(cbroker: BrokerProcess) -> None:
    bs = cbroker.bootstrap
    topic = _create(bs)
    items = _updates(50, 40)
    expected = _latest([(0, k, v) for k, v in items])
    _produce(bs, topic, items)
    _roll(bs, topic)
    views: list[dict[bytes | None, bytes | None]] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            views.append(_latest(_read_all(bs, topic)))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        assert wait_until(lambda: len(_read_all(bs, topic)) == 51, timeout_s=30, interval_s=0.3)
        # At least two whole reads, however fast the cleaner was (under load one read can
        # outlast the whole clean).
        assert wait_until(lambda: len(views) >= 2, timeout_s=30, interval_s=0.1)
    finally:
        stop.set()
        t.join(60)
    assert len(views) >= 2
    for v in views:
        v.pop(b"__roll", None)
        assert v == expected


def test_kill_9_while_cleaning_loses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = BrokerProcess(data, overrides=OVERRIDES).start()
    try:
        bs = b.bootstrap
        topic = _create(bs, {**TOPIC_CONFIG, "segment.bytes": "16384"})
        items = _updates(100, 30)
        expected = _latest([(0, k, v) for k, v in items])
        _produce(bs, topic, items)
        pdir = data / f"{topic}-0"
        _roll(bs, topic)
        # kill as soon as the cleaner writes its output (or swaps), else when it is done
        wait_until(
            lambda: any(p.name.endswith((".cleaned", ".swap")) for p in pdir.iterdir()),
            timeout_s=15,
            interval_s=0.002,
        )
        b.kill()
        b = BrokerProcess(data, overrides=OVERRIDES).start()
        bs = b.bootstrap
        view = _latest(_read_all(bs, topic))
        view.pop(b"__roll", None)
        assert view == expected
        # and compaction completes after the restart
        assert wait_until(lambda: len(_read_all(bs, topic)) == 101, timeout_s=30, interval_s=0.5)
        view = _latest(_read_all(bs, topic))
        view.pop(b"__roll", None)
        assert view == expected
    finally:
        b.kill()


def test_consumer_offsets_topic_is_compacted(cbroker: BrokerProcess) -> None:
    bs = cbroker.bootstrap
    topic = _create(bs)
    _produce(bs, topic, [(b"a", b"1")])
    c = Consumer(
        {"bootstrap.servers": bs, "group.id": "cmp-group", "auto.offset.reset": "earliest"}
    )
    try:
        c.subscribe([topic])
        assert poll_messages(c, 1, 30, skip_errors=True)
        c.commit(asynchronous=False)
    finally:
        c.close()
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    configs = admin.describe_configs([res])[res].result(15)
    assert configs["cleanup.policy"].value == "compact"


def test_keyless_record_rejected_on_compacted_topic(cbroker: BrokerProcess) -> None:
    bs = cbroker.bootstrap
    topic = _create(bs)
    p = Producer({"bootstrap.servers": bs, "retries": 0})
    errors: list[KafkaError | None] = []
    p.produce(topic, value=b"no key", partition=0, on_delivery=lambda e, _m: errors.append(e))
    assert p.flush(15) == 0
    err = errors[0] if errors else None
    assert err is not None and err.code() == KafkaError.INVALID_RECORD


def _descendants(pid: int) -> list[int]:
    """The processes under `pid` (children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie left for its new parent to reap counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return not any(ln.split()[1:2] in (["Z"], ["X"]) for ln in status.splitlines()
                   if ln.startswith("State:"))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("end", ["stop", "sigkill"])
def test_the_cleaners_worker_process_ends_with_the_broker(tmp_path: Path, end: str) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES).start()
    family: list[int] = []
    try:
        assert _descendants(b.pid) == []  # no worker before the first clean with work
        bs = b.bootstrap
        topic = _create(bs)
        _produce(bs, topic, _updates(20, 30))
        _roll(bs, topic)
        assert wait_until(
            lambda: "Log cleaner worker process started" in b.log_text()
            and f"{topic}-0: cleaned" in b.log_text(),
            timeout_s=30,
            interval_s=0.2,
        ), b.log_text()[-3000:]
        family = _descendants(b.pid)
        assert len(family) >= 2, family  # the forkserver and the worker at least
        if end == "stop":
            assert b.stop() == 0
        else:
            b.kill()
        assert wait_until(lambda: not any(_alive(p) for p in family), timeout_s=15), [
            p for p in family if _alive(p)
        ]
    finally:
        b.kill()
        for p in family:  # by PID, whatever outlived the test
            if _alive(p):
                os.kill(p, signal.SIGKILL)
