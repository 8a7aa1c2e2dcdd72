"""Segment rolling and retention through the broker's background task and topic configs."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.broker_process import BrokerProcess, wait_until


def _offsets(bs: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "unused"})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(lo), int(hi)
    finally:
        c.close()


def _set(admin: AdminClient, topic: str, **configs: str) -> None:
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    for f in admin.incremental_alter_configs([res]).values():
        f.result(10)


def test_small_segments_roll_and_retention_deletes_them(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = f"ret-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics(
        [NewTopic(topic, 1, 1, config={"segment.bytes": "2048", "file.delete.delay.ms": "0"})]
    )[topic].result(15)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(200):
        p.produce(topic, value=b"x" * 100 + str(i).encode(), partition=0)
        p.poll(0)
    assert p.flush(20) == 0
    pdir = broker.data_dir / f"{topic}-0"
    segments = sorted(pdir.glob("*.log"))
    assert len(segments) > 5, "segment.bytes=2048 must roll many segments"
    assert all(
        s.with_suffix(".index").exists() and s.with_suffix(".timeindex").exists() for s in segments
    )
    assert _offsets(bs, topic) == (0, 200)

    # retention.bytes: keep about 4 KiB; older whole segments go (the active one stays). The
    # log start moves first; the files of the segments it passed go right after, off the
    # log's lock (and a pass may be followed by another).
    _set(admin, topic, retention_bytes="4096")

    def files_follow_the_log_start() -> bool:
        lo = _offsets(bs, topic)[0]
        remaining = sorted(pdir.glob("*.log"))
        return lo > 0 and bool(remaining) and int(remaining[0].stem) == lo

    assert wait_until(files_follow_the_log_start, timeout_s=15)
    lo, hi = _offsets(bs, topic)
    assert hi == 200 and 100 < lo < 200
    remaining = sorted(pdir.glob("*.log"))
    assert int(remaining[0].stem) == lo
    assert sum(s.stat().st_size for s in remaining) <= 4096 + 2048

    # retention.ms: everything is older than 1 ms; the log empties to its end offset.
    _set(admin, topic, retention_bytes="-1", retention_ms="1")
    assert wait_until(lambda: _offsets(bs, topic) == (200, 200), timeout_s=15)

    # The log goes on from where it was.
    _set(admin, topic, retention_ms="604800000")
    offsets: list[int] = []
    p.produce(topic, value=b"new", partition=0, on_delivery=lambda e, m: offsets.append(m.offset()))
    assert p.flush(10) == 0
    assert offsets == [200]


def test_segment_ms_rolls_by_time(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = f"roll-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.ms": "300"})])[topic].result(15)
    p = Producer({"bootstrap.servers": bs})
    for i in range(3):
        p.produce(topic, value=str(i).encode(), partition=0)
        assert p.flush(10) == 0
        time.sleep(0.5)
    segments = sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
    assert [int(s.stem) for s in segments] == [0, 1, 2]
