"""`wherry server config/server.properties` on one broker: a transactional producer (confluent-
kafka) commits and a consumer group reads the committed records (read_committed); an aborted
transaction's records are not read. The only change to the shipped file's settings: the
listener's port is 0 (the OS chooses), given with `--listeners`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).parents[2]
SHIPPED = ROOT / "config" / "server.properties"
READY_TIMEOUT_S = 45.0



class _Broker:
    def __init__(self, cwd: Path) -> None:
        self.lines: list[str] = []
        self.address = ""
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wherry", "server", str(SHIPPED),
             "--listeners", "PLAINTEXT://127.0.0.1:0"],
            cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
        threading.Thread(target=self._pump, daemon=True).start()
        if not self._ready.wait(READY_TIMEOUT_S) or not self.address:
            self.stop()
            raise AssertionError("broker did not start:\n" + "".join(self.lines[-30:]))

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if not self.address and (m := re.search(r"ready on (\S+)", line)):
                self.address = m.group(1)
                self._ready.set()
        self._ready.set()

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def test_transactions_and_groups_on_the_shipped_config(tmp_path: Path) -> None:
    broker = _Broker(tmp_path)
    try:
        topic = f"txn-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": broker.address, "log_level": 0,
                             "transactional.id": f"tx-{topic}", "enable.idempotence": True})
        producer.init_transactions(60)  # creates __transaction_state on this one broker
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, key=str(i).encode(), value=f"committed {i}".encode())
        producer.commit_transaction(60)
        producer.begin_transaction()
        producer.produce(topic, value=b"aborted")
        producer.flush(30)
        producer.abort_transaction(60)
        producer.begin_transaction()
        producer.produce(topic, value=b"last")
        producer.commit_transaction(60)

        consumer = Consumer({"bootstrap.servers": broker.address, "log_level": 0,
                             "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed",
                             "enable.auto.commit": False})
        try:
            consumer.subscribe([topic])
            values: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(values) < 6 and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None or msg.error():
                    continue
                values.append(msg.value())
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert values == [f"committed {i}".encode() for i in range(5)] + [b"last"]

        admin = AdminClient({"bootstrap.servers": broker.address, "log_level": 0})
        internal = admin.list_topics(timeout=30).topics
        for name in ("__transaction_state", "__consumer_offsets"):
            assert name in internal
            assert all(len(p.replicas) == 1 for p in internal[name].partitions.values())
        committed = admin.list_consumer_group_offsets(
            [_request(f"g-{topic}")])[f"g-{topic}"].result(30)
        assert sum(tp.offset for tp in committed.topic_partitions) > 6  # past the markers
        assert not any("larger than available brokers" in line for line in broker.lines)
    finally:
        assert broker.stop() == 0, "".join(broker.lines[-30:])


def _request(group: str) -> object:
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group)
