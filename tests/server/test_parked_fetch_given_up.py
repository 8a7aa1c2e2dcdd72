"""A Fetch parked until `min_bytes` arrive or `max_wait` passes is given up when its client's
connection is gone (reset): its wait leaves the fetch purgatory at once, instead of living on
for up to the `max_wait` the client asked for (2^31 - 1 ms is 24 days). A client that keeps
its connection keeps its parked fetch, and gets its answer. And a wait whose waiter is
cancelled (the fuzzer's budget, a caller's time-out) abandons its purgatory operation."""

from __future__ import annotations

import asyncio
import socket
import struct
import uuid
from pathlib import Path

import pytest

from tests.kafka_wire import encode_request, fetch_body, read_response
from wherry.common.topic_partition import TopicPartition
from wherry.purgatory.operation import DelayedOperation
from wherry.runtime.parking import answer_future
from wherry.testing.cluster import AsyncDevCluster

FOREVER_MS = 2**31 - 1


def _parked_fetch(port: int, topic: str, min_bytes: int = 1 << 30) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    body = {**fetch_body(topic), "max_wait": FOREVER_MS, "min_bytes": min_bytes}
    sock.sendall(encode_request(1, 12, body))
    return sock


def _produce(port: int, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
    producer.produce(topic, b"still-waiting", partition=0)
    assert producer.flush(30) == 0


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # RST, not FIN


@pytest.mark.timeout(120)
def test_a_reset_connection_gives_up_its_parked_fetch(tmp_path: Path) -> None:
    async def main() -> None:
        cluster = AsyncDevCluster(tmp_path, brokers=1, base_port=0)
        await cluster.start()
        try:
            b = cluster.brokers[0]
            topic = f"parked-{uuid.uuid4().hex[:8]}"
            tp = TopicPartition(topic, 0)
            await b.admin.create_topic(topic, num_partitions=1, replication_factor=1, configs={})
            async with asyncio.timeout(10):
                while b.replica_manager.get_partition(tp) is None:
                    await asyncio.sleep(0.02)
            purgatory = b.replica_manager.fetch_purgatory
            port = cluster.port(0)

            # One client keeps its connection: its fetch stays parked throughout.
            keeper = await asyncio.to_thread(_parked_fetch, port, topic, 1)
            async with asyncio.timeout(10):
                while purgatory.delayed < 1:
                    await asyncio.sleep(0.01)

            for round_ in range(100):
                sock = await asyncio.to_thread(_parked_fetch, port, topic)
                async with asyncio.timeout(10):
                    while purgatory.delayed < 2:
                        await asyncio.sleep(0.005)
                _reset(sock)
                async with asyncio.timeout(10):
                    while purgatory.delayed > 1:
                        await asyncio.sleep(0.005)
                assert purgatory.delayed == 1, round_
            purgatory.purge_completed()
            assert purgatory.watched(tp) == 1  # only the keeper's

            # The keeper's fetch is intact: a record arrives, and it is answered with it.
            await asyncio.to_thread(_produce, port, topic)
            answer = await asyncio.to_thread(read_response, keeper, 1, 12)
            keeper.close()
            records = answer.responses[0].partitions[0].records
            assert records is not None and b"still-waiting" in bytes(records)
            assert purgatory.delayed == 0
        finally:
            await cluster.stop()

    asyncio.run(main())


def test_a_cancelled_wait_abandons_its_operation() -> None:
    class Waiting(DelayedOperation):
        completed = 0

        def try_complete(self) -> bool:
            return False

        def on_complete(self) -> None:
            Waiting.completed += 1

    async def main() -> None:
        op = Waiting(FOREVER_MS)
        fut = answer_future(lambda respond: op)

        async def wait() -> None:
            await fut

        waiter = asyncio.ensure_future(wait())
        await asyncio.sleep(0)
        waiter.cancel()  # the waiter's task is cancelled, and with it the future it awaits
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await asyncio.sleep(0)  # the future's done callbacks
        assert op.is_completed and not op.is_expired
        assert Waiting.completed == 0  # nobody to answer: on_complete never ran
        assert not op.force_complete()  # and it cannot complete twice

        answered = answer_future(lambda respond: respond(7))  # answered at once: no hook
        assert await answered == 7

    asyncio.run(main())
