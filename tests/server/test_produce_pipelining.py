"""Per-connection pipelining: a request whose work is done and whose answer only waits (an
acks=all Produce parked until the ISR has it) lets the connection handle its next request,
and every answer still goes out in request order.

The network layer on a real socket with a handler whose answers the test releases, then a
three-broker cluster (RF 3, acks=all) driven by raw Produce requests sent back to back."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from tests.helpers import create_topic
from tests.kafka_wire import call, connect, encode_request, fetch_body, recv_exact
from wherry.log.file_region import FileRegion
from wherry.protocol.records import build_batch, iter_batches, iter_records
from wherry.protocol.response_parts import ResponsePart
from wherry.server.network import _MAX_DEFERRED, ConnectionInfo, Deferred, NetworkServer
from wherry.testing.cluster import DevCluster

# --- the network layer -----------------------------------------------------------------------


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


class _Handler:
    """Frames `d<n>` are deferred until the test releases answer n; `f` is answered with
    bytes of `region_file` sent as a file region (os.sendfile); any other frame is answered at
    once with itself."""

    def __init__(self, region_file: Path | None = None) -> None:
        self.seen: list[bytes] = []
        self.answers: dict[bytes, asyncio.Future[bytes]] = {}
        self.region_file = region_file

    async def __call__(
        self, conn: ConnectionInfo, frame: memoryview
    ) -> bytes | list[ResponsePart] | Deferred:
        data = bytes(frame)
        self.seen.append(data)
        if data.startswith(b"d"):
            fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
            self.answers[data] = fut
            return Deferred(fut)
        if data == b"f" and self.region_file is not None:
            size = self.region_file.stat().st_size
            fd = os.open(self.region_file, os.O_RDONLY)
            try:
                region = FileRegion.of(fd, 0, size)
            finally:
                os.close(fd)
            return [struct.pack(">i", size + 7) + b"region ", region]
        return _frame(b"answer " + data)


async def _serve(handler: _Handler) -> tuple[NetworkServer, int]:
    server = NetworkServer(handler, max_request_bytes=1 << 20)
    return server, await server.listen("127.0.0.1", 0)


async def _until(cond: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def test_deferred_answers_let_later_requests_run_and_go_out_in_order(tmp_path: Path) -> None:
    data = os.urandom(300_000)  # more than a socket buffer: sendfile has to wait for room
    (tmp_path / "segment").write_bytes(data)

    async def main() -> None:
        handler = _Handler(tmp_path / "segment")
        server, port = await _serve(handler)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_frame(b"d1") + _frame(b"m") + _frame(b"d2") + _frame(b"f"))
            # every request is handled while the first answer still waits
            await _until(lambda: len(handler.seen) == 4)
            assert handler.seen == [b"d1", b"m", b"d2", b"f"]
            # nothing may be sent before the first answer
            handler.answers[b"d2"].set_result(_frame(b"answer d2"))
            try:
                await asyncio.wait_for(reader.readexactly(1), 0.3)
                raise AssertionError("an answer overtook the first one")
            except TimeoutError:
                pass
            handler.answers[b"d1"].set_result(_frame(b"answer d1"))
            got = [await asyncio.wait_for(_read_frame(reader), 5) for _ in range(4)]
            assert got == [b"answer d1", b"answer m", b"answer d2", b"region " + data]
            writer.close()
        finally:
            await server.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_pipeline_is_bounded_and_closing_drops_waiting_answers() -> None:
    async def main() -> None:
        handler = _Handler()
        server, port = await _serve(handler)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            n = _MAX_DEFERRED + 4
            writer.write(b"".join(_frame(b"d%d" % i) for i in range(n)))
            await _until(lambda: len(handler.seen) == _MAX_DEFERRED)
            await asyncio.sleep(0.2)
            assert len(handler.seen) == _MAX_DEFERRED  # no more until an answer is sent
            handler.answers[b"d0"].set_result(_frame(b"a0"))
            assert await asyncio.wait_for(_read_frame(reader), 5) == b"a0"
            await _until(lambda: len(handler.seen) == _MAX_DEFERRED + 1)
            # the client is killed (a reset) with answers waiting: they are dropped, not
            # cancelled (the work behind them goes on)
            writer.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            writer.transport.abort()
            await _until(lambda: not server._connections)
            for fut in handler.answers.values():
                assert not fut.cancelled()
                if not fut.done():
                    fut.set_result(_frame(b"late"))
            await asyncio.sleep(0.05)
            # the server goes on
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_frame(b"hello"))
            assert await asyncio.wait_for(_read_frame(reader), 5) == b"answer hello"
            writer.close()
        finally:
            await server.close()

    asyncio.run(asyncio.wait_for(main(), 30))


# --- a real cluster: acks=all Produce requests back to back on one connection -----------------


def _leader_of(bootstrap: str, topic: str) -> str:
    deadline = time.monotonic() + 20
    while True:
        md = call(bootstrap.split(",")[0], 3, 9, {"topics": [{"name": topic}],
                                    "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
        part = md.topics[0].partitions[0] if md.topics[0].partitions else None
        if part is not None and part.leader_id in brokers and len(part.isr_nodes) == 3:
            return brokers[part.leader_id]
        assert time.monotonic() < deadline, "no leader with a full ISR"
        time.sleep(0.1)


def _produce(topic: str, batch: bytes, correlation_id: int) -> bytes:
    body = {"acks": -1, "timeout": 10_000, "transactional_id": None,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    return encode_request(0, 9, body, correlation_id=correlation_id)


def _metadata(topic: str, correlation_id: int) -> bytes:
    return encode_request(3, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False},
                          correlation_id=correlation_id)


def _answers(sock: socket.socket, count: int) -> list[tuple[int, Any]]:
    """(correlation id, decoded body) of the next `count` answers (Produce v9 or
    Metadata v9, both flexible)."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    out = []
    for _ in range(count):
        (size,) = struct.unpack(">i", recv_exact(sock, 4))
        raw = recv_exact(sock, size)
        (cid,) = struct.unpack(">i", raw[:4])
        key = 3 if cid >= 1000 else 0
        body, _ = entity_reader(load_response_schema(key, 9))(raw, 5)
        out.append((cid, body))
    return out


def _offsets(body: Any) -> tuple[int, int]:
    p = body.responses[0].partition_responses[0]
    return int(p.error_code), int(p.base_offset)


def _pipelined_round(bootstrap: str, topic: str, batches: list[bytes], records_each: int,
                     ) -> list[int]:
    """Send every batch as a Produce, a Metadata after the first half, all in one write;
    check the answers come in request order; the base offsets."""
    leader = _leader_of(bootstrap, topic)
    s = connect(leader)
    try:
        half = len(batches) // 2
        wire = [_produce(topic, b, i) for i, b in enumerate(batches[:half])]
        wire.append(_metadata(topic, 1000))
        wire += [_produce(topic, b, half + i) for i, b in enumerate(batches[half:])]
        s.sendall(b"".join(wire))
        got = _answers(s, len(wire))
    finally:
        s.close()
    cids = [cid for cid, _ in got]
    assert cids == [*range(half), 1000, *range(half, len(batches))]
    md = got[half][1]
    assert md.topics[0].error_code == ErrorCode.none
    produced = [b for cid, b in got if cid < 1000]
    offsets = []
    for body in produced:
        err, base = _offsets(body)
        assert err == ErrorCode.none
        offsets.append(base)
    first = offsets[0]
    assert offsets == [first + i * records_each for i in range(len(batches))]
    return offsets


def _log_values(bootstrap: str, topic: str) -> list[bytes]:
    leader = _leader_of(bootstrap, topic)
    values: list[bytes] = []
    offset = 0
    while True:
        r = call(leader, 1, 12, fetch_body(topic, offset=offset))
        p = r.responses[0].partitions[0]
        assert p.error_code == ErrorCode.none
        if not p.records:
            return values
        records = bytes(p.records)
        for pos, header in iter_batches(records):
            for rec in iter_records(records, pos):
                values.append(bytes(rec.value or b""))
            offset = header.last_offset + 1
        if offset >= p.high_watermark:
            return values


def test_acks_all_produce_pipeline_in_order(wherry_cluster: DevCluster) -> None:
    bs = wherry_cluster.bootstrap
    topic = f"pipe-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, replication_factor=3, **{"min.insync.replicas": "2"})
    n = 12
    batches = [build_batch([(None, b"v%d-%d" % (i, j)) for j in range(3)]) for i in range(n)]
    offsets = _pipelined_round(bs, topic, batches, 3)
    assert offsets[0] == 0
    assert _log_values(bs, topic) == [b"v%d-%d" % (i, j) for i in range(n) for j in range(3)]


def test_idempotent_sequences_pipelined(wherry_cluster: DevCluster) -> None:
    bs = wherry_cluster.bootstrap
    topic = f"pipe-idem-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, replication_factor=3)
    leader = _leader_of(bs, topic)
    init = call(leader, 22, 4, {"transactional_id": None, "transaction_timeout_ms": 60_000,
                                "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == ErrorCode.none
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    n = 5  # librdkafka's max.in.flight with idempotence
    batches = [build_batch([(None, b"s%d-%d" % (i, j)) for j in range(2)], producer_id=pid,
                           producer_epoch=epoch, base_sequence=2 * i) for i in range(n)]
    _pipelined_round(bs, topic, batches, 2)
    # the same batches again: duplicates, answered with the offsets they were written at
    again = _pipelined_round(bs, topic, batches, 2)
    assert again[0] == 0
    assert _log_values(bs, topic) == [b"s%d-%d" % (i, j) for i in range(n) for j in range(2)]


def test_connection_killed_mid_pipeline(wherry_cluster: DevCluster) -> None:
    bs = wherry_cluster.bootstrap
    topic = f"pipe-kill-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, replication_factor=3)
    leader = _leader_of(bs, topic)
    n = 30
    wire = b"".join(
        _produce(topic, build_batch([(None, b"k%d" % i)]), i) for i in range(n)
    )
    s = connect(leader)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.sendall(wire)
    _answers(s, 2)
    s.close()  # a reset, with answers and maybe requests still waiting
    # the broker goes on: whatever was appended is whole and in order, new produces work
    deadline = time.monotonic() + 20
    while True:
        s2 = connect(leader)
        try:
            s2.sendall(_produce(topic, build_batch([(None, b"after")]), 7))
            ((cid, body),) = _answers(s2, 1)
        finally:
            s2.close()
        err, base = _offsets(body)
        if err == ErrorCode.none:
            break
        assert time.monotonic() < deadline
    assert cid == 7 and 2 <= base <= n
    while len(values := _log_values(bs, topic)) < base + 1:  # the HW catching up
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert values == [b"k%d" % i for i in range(base)] + [b"after"]
