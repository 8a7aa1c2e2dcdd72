"""What the share-group tests share: broker overrides that allow short locks and heartbeats,
setting a group's configs through IncrementalAlterConfigs (a GROUP resource, as
confluent-kafka's own tests do), producing, and a ShareConsumer loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tests.broker_process import BrokerProcess

BROKER_OVERRIDES = [
    "group.share.min.record.lock.duration.ms=1000",
    "group.share.min.heartbeat.interval.ms=500",
    "group.share.heartbeat.interval.ms=1000",
]
# as confluent-kafka-python's suite runs its broker: one-second record locks
SUITE_OVERRIDES = [*BROKER_OVERRIDES, "group.share.record.lock.duration.ms=1000"]


@contextmanager
def suite_broker(log_dir: Path) -> Iterator[BrokerProcess]:
    """A `wherry server` with the settings of confluent-kafka-python's share-consumer
    suite, stopped when the block ends."""
    b = BrokerProcess(log_dir, overrides=SUITE_OVERRIDES).start()
    try:
        yield b
    finally:
        b.stop()


def set_group_configs(bootstrap: str, group: str, configs: Mapping[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    r = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    admin.incremental_alter_configs([r])[r].result(15)


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(20) == 0


def share_consumer(bootstrap: str, group: str, topic: str, **extra: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **extra})
    c.subscribe([topic])
    return c


def consume_until(
    c: ShareConsumer,
    done: Callable[[], bool],
    on_message: Callable[[ShareConsumer, object], None],
    timeout_s: float,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not done():
        for m in c.poll(0.5):
            if m.error() is None:
                on_message(c, m)
