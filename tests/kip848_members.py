"""KIP-848 consumers (`group.protocol=consumer`, confluent-kafka) for the consumer-group tests:
each polls in a thread of its own and commits every record synchronously once it has it; the
deliveries and the acknowledged commits go to one shared, ordered event log."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

# What a coordinator answers while it is moving or still loading its partition.
COORDINATOR_NOT_READY = {
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
}


@dataclass
class EventLog:
    """('deliver' | 'committed', member, partition, offset, value) in the order they happened."""

    events: list[tuple[str, str, int, int, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, member: str, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            self.events.append((kind, member, partition, offset, value))

    def snapshot(self) -> list[tuple[str, str, int, int, bytes]]:
        with self.lock:
            return list(self.events)

    def values(self) -> set[bytes]:
        return {v for k, _, _, _, v in self.snapshot() if k == "deliver"}

    def redelivered_after_commit(self) -> list[tuple[int, int]]:
        """Records delivered again after their commit was acknowledged."""
        committed: set[tuple[int, int]] = set()
        bad = []
        for kind, _, p, o, _ in self.snapshot():
            if kind == "committed":
                committed.add((p, o))
            elif (p, o) in committed:
                bad.append((p, o))
        return bad

    def deliveries(self) -> list[tuple[int, int]]:
        return [(p, o) for k, _, p, o, _ in self.snapshot() if k == "deliver"]


def start_from_committed(bs: str, group: str, topic: str, partitions: int) -> None:
    """Commit offset 0 for each partition before the members come, so that they all start
    from a committed offset and never through auto.offset.reset. librdkafka 2.16's reset path
    can move a partition it is already reading back to its start: when a rebalance pauses and
    resumes the partition while the reset's ListOffsets is in flight, the answer comes back
    outdated, re-arms the offset query, and that query's later answer sets the position to
    the beginning again (a client race seen on a loaded machine: no OffsetFetch, no
    rebalance of that partition, only ListOffsets for the earliest offset).

    The group's coordinator may still be loading its partition of `__consumer_offsets` when
    the broker has just started (COORDINATOR_LOAD_IN_PROGRESS); the admin client hands that
    retriable error back per partition, so the commit is tried again for a while, as Kafka's
    own admin client does."""
    admin = AdminClient({"bootstrap.servers": bs})
    start = [TopicPartition(topic, p, 0) for p in range(partitions)]
    deadline = time.monotonic() + 30
    while True:
        answer = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, start)])
        errors = [tp.error for tp in answer[group].result(15).topic_partitions if tp.error]
        if not errors:
            return
        passing = all(e.code() in COORDINATOR_NOT_READY for e in errors)
        assert passing and time.monotonic() < deadline, errors
        time.sleep(0.2)


class Member:
    """A consumer of `protocol` "consumer" (KIP-848) or "classic" (JoinGroup/SyncGroup)."""

    def __init__(
        self,
        bs: str,
        group: str,
        topic: str,
        name: str,
        log: EventLog,
        protocol: str = "consumer",
        **settings: object,
    ) -> None:
        self.name = name
        self.log = log
        config: dict[str, object] = {
            "bootstrap.servers": bs,
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "client.id": name,
            "log_level": 3,
        }
        if protocol == "classic":
            config.update({"heartbeat.interval.ms": 500, "session.timeout.ms": 10_000})
        config.update(settings)
        self.consumer = Consumer(config)
        self.consumer.subscribe([topic])
        self.errors: list[str] = []
        self.assignment: list[int] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def _run(self) -> None:
        c = self.consumer
        while not self._stop.is_set():
            try:
                m = c.poll(0.1)
                with self._lock:
                    self.assignment = sorted(tp.partition for tp in c.assignment())
                if m is None:
                    continue
                if m.error() is not None:
                    self.errors.append(str(m.error()))
                    continue
                p, o, v = m.partition() or 0, m.offset() or 0, m.value() or b""
                self.log.add("deliver", self.name, p, o, v)
                c.commit(message=m, asynchronous=False)
                self.log.add("committed", self.name, p, o, v)
            except KafkaException as e:
                self.errors.append(str(e))

    def partitions(self) -> list[int]:
        with self._lock:
            return list(self.assignment)

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()
