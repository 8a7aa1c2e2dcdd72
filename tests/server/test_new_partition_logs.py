"""A LeaderAndIsr that makes a broker host new partitions creates their logs (directories,
first segments, the log dirs' fsyncs: 1-4 ms each on a busy disk) off the event loop, then
applies the states: the loop answers other connections meanwhile, and the partitions are
served as before."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_wire import call, connect, encode_request, produce_body, read_response
from wherry.common.topic_partition import TopicPartition
from wherry.log.errors import StorageError
from wherry.log.manager import LogManager
from wherry.protocol.records import build_batch
from wherry.testing.cluster import AsyncDevCluster

_API_VERSIONS = {"client_software_name": "t", "client_software_version": "1"}
_PARTITIONS = 8
_SLOW_S = 0.1  # each new log of the topic takes this much longer to create


@pytest.mark.timeout(120)
def test_new_logs_are_created_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"slow-{uuid.uuid4().hex[:8]}"
    created_in: list[threading.Thread] = []
    real_create = LogManager.get_or_create_log

    def slow_create(self: LogManager, tp, config=None, *, is_new=True):  # type: ignore[no-untyped-def]
        if tp.topic == topic and self.get_log(tp) is None:
            created_in.append(threading.current_thread())
            time.sleep(_SLOW_S)  # a slow disk (the GIL is let go, as in a system call)
        return real_create(self, tp, config, is_new=is_new)

    monkeypatch.setattr(LogManager, "get_or_create_log", slow_create)

    def client(bootstrap: str) -> None:
        """In a thread of its own, so that its clock does not wait for the broker's loop."""
        pinger = connect(bootstrap)
        pinger.sendall(encode_request(18, 3, _API_VERSIONS, 1))
        read_response(pinger, 18, 3)
        admin = connect(bootstrap)
        admin.sendall(encode_request(19, 7, {
            "topics": [{"name": topic, "num_partitions": _PARTITIONS, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout": 30_000, "validate_only": False}, 2))
        # While the logs are created (_PARTITIONS x _SLOW_S), ApiVersions is answered at once.
        waits: list[float] = []
        deadline = time.monotonic() + 30
        while len(created_in) < _PARTITIONS and time.monotonic() < deadline:
            started = time.monotonic()
            pinger.sendall(encode_request(18, 3, _API_VERSIONS, 3))
            assert read_response(pinger, 18, 3).error_code == ErrorCode.none
            if created_in:
                waits.append(time.monotonic() - started)
            time.sleep(0.01)
        assert len(created_in) == _PARTITIONS
        assert waits and max(waits) < _SLOW_S * _PARTITIONS / 2, waits
        created = read_response(admin, 19, 7)
        assert created.topics[0].error_code == ErrorCode.none
        # each partition is served: its leader takes a write
        for p in range(_PARTITIONS):
            deadline = time.monotonic() + 10
            while True:
                body = produce_body(topic, build_batch([(None, b"v")]), partition=p, acks=1)
                r = call(bootstrap, 0, 9, {**body, "transactional_id": None})
                err = r.responses[0].partition_responses[0].error_code
                if err == ErrorCode.none or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert err == ErrorCode.none, (p, err)
        pinger.close()
        admin.close()

    async def main() -> None:
        async with AsyncDevCluster(tmp_path, brokers=1, base_port=0) as cluster:
            await asyncio.to_thread(client, f"127.0.0.1:{cluster.port(0)}")

    loop_thread = threading.current_thread()
    asyncio.run(main())
    assert all(t is not loop_thread for t in created_in)


@pytest.mark.timeout(120)
def test_a_log_that_cannot_be_created_leaves_its_partition_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when the log is created while the states are applied: the partition is offline here
    (KAFKA_STORAGE_ERROR to its clients), the topic's other partitions are served."""
    topic = f"failing-{uuid.uuid4().hex[:8]}"
    real_create = LogManager.get_or_create_log

    def failing_create(self: LogManager, tp, config=None, *, is_new=True):  # type: ignore[no-untyped-def]
        if tp.topic == topic and tp.partition == 1:
            raise StorageError(f"creating {tp.dir_name}: No space left on device")
        return real_create(self, tp, config, is_new=is_new)

    monkeypatch.setattr(LogManager, "get_or_create_log", failing_create)

    def produce(bootstrap: str, partition: int) -> int:
        body = produce_body(topic, build_batch([(None, b"v")]), partition=partition, acks=1)
        r = call(bootstrap, 0, 9, {**body, "transactional_id": None})
        return int(r.responses[0].partition_responses[0].error_code)

    async def main() -> None:
        async with AsyncDevCluster(tmp_path, brokers=1, base_port=0) as cluster:
            b = cluster.brokers[0]
            await b.admin.create_topic(topic, num_partitions=2, replication_factor=1, configs={})
            bootstrap = f"127.0.0.1:{cluster.port(0)}"
            async with asyncio.timeout(20):
                while b.replica_manager.get_partition(TopicPartition(topic, 0)) is None:
                    await asyncio.sleep(0.02)
            assert TopicPartition(topic, 1) in b.replica_manager.offline_partitions
            assert b.replica_manager.get_partition(TopicPartition(topic, 1)) is None
            async with asyncio.timeout(20):
                while await asyncio.to_thread(produce, bootstrap, 0) != ErrorCode.none:
                    await asyncio.sleep(0.05)
            assert await asyncio.to_thread(produce, bootstrap, 1) == ErrorCode.kafka_storage_error

    asyncio.run(main())
