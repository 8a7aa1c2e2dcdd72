"""Benchmark worker processes: `python -m bench.workers ROLE 'JSON params'`.

Each role runs in its own process (so the orchestrator, the broker and the load generator do
not share a GIL) and prints its result as one JSON line last. Server roles print `port N`
first. Every loop is bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import (
    MIB,
    BenchError,
    cpu_split,
    decode_response,
    encode_request,
    pretouch_param,
    read_frame,
)
from bench.paced import produce_paced

_SIZE = struct.Struct(">i")
_TOTAL = struct.Struct(">q")

Params = dict[str, Any]


# --------------------------------------------------------------------------------------------
# Pre-encoded Produce requests (shared by the raw pipe and the broker ingest benchmark)
# --------------------------------------------------------------------------------------------


def build_record_batch(batch_bytes: int, record_bytes: int) -> bytes:
    """A valid uncompressed v2 batch of `record_bytes`-sized values, at most `batch_bytes`."""
    from wherry.protocol.records import build_batch

    value = os.urandom(record_bytes)
    one = len(build_batch([(None, value)] * 2)) - len(build_batch([(None, value)]))
    count = max(1, (batch_bytes - len(build_batch([(None, value)]))) // one + 1)
    while True:
        batch = build_batch([(None, value)] * count)
        if len(batch) <= batch_bytes or count == 1:
            return batch
        count -= 1


def produce_frame(
    topic: str, partition: int, batch: bytes, acks: int, correlation_id: int
) -> bytes:
    """A size-prefixed ProduceRequest v9 (request header v2) carrying one batch."""
    return encode_request(
        0,
        9,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": 30_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
            ],
        },
        correlation_id=correlation_id,
    )


def produce_frames(p: Params, batch: bytes | None = None) -> list[bytes]:
    if batch is None:
        batch = build_record_batch(p["batch_bytes"], p["record_bytes"])
    return [
        produce_frame(p["topic"], part, batch, p.get("acks", 1), correlation_id=part + 1)
        for part in range(p["partitions"])
    ]


def _produce_errors(frame: bytes) -> list[str]:
    resp = decode_response(0, 9, frame)
    return [
        f"{t.name}-{pr.index}: {pr.error_code!r} {pr.error_message}"
        for t in resp.responses
        for pr in t.partition_responses
        if int(pr.error_code) != 0
    ]


def _recv_into_exact(sock: socket.socket, view: memoryview) -> bool:
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return False
        got += k
    return True


@contextmanager
def _accept_one(timeout_s: float) -> Iterator[socket.socket]:
    """Listen on a free loopback port, print `port N` for the orchestrator, and yield the one
    connection it makes (closed afterwards); `timeout_s` bounds the wait for it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        srv.settimeout(timeout_s)
        print(f"port {srv.getsockname()[1]}", flush=True)
        conn, _ = srv.accept()
        with conn:
            yield conn


# --------------------------------------------------------------------------------------------
# (a) raw limit: loopback socket → file with the same framing and payload
# --------------------------------------------------------------------------------------------


def raw_server(p: Params) -> Params:
    """Receive size-prefixed frames on one connection and append each to a file."""
    path = Path(p["dir"]) / "raw-pipe.log"
    with _accept_one(p["timeout_s"]) as conn:
        conn.settimeout(p["timeout_s"])
        buf = bytearray(p.get("max_frame_bytes", 4 * MIB))
        view = memoryview(buf)
        size_view = memoryview(bytearray(4))
        total = frames = 0
        with open(path, "ab", buffering=0) as f:
            while _recv_into_exact(conn, size_view):
                (size,) = _SIZE.unpack(size_view)
                if size == 0:  # end marker: answer with the byte count once all is written
                    conn.sendall(_TOTAL.pack(total))
                    break
                if not _recv_into_exact(conn, view[:size]):
                    break
                f.write(view[:size])
                total += size
                frames += 1
    size_on_disk = path.stat().st_size
    path.unlink()
    return {"bytes": total, "frames": frames, "file_bytes": size_on_disk}


def raw_client(p: Params) -> Params:
    """Send the benchmark's Produce frames to the raw server for `duration_s`."""
    frame = produce_frames(p)[0]
    with socket.create_connection(("127.0.0.1", p["port"]), timeout=p["timeout_s"]) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pretouch_s = pretouch_param(p)
        n = 0
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        deadline = t0 + p["duration_s"]
        while time.perf_counter() < deadline:
            s.sendall(frame)
            n += 1
        s.sendall(_SIZE.pack(0))
        (total,) = _TOTAL.unpack(_recv_exact(s, _TOTAL.size))
        elapsed = time.perf_counter() - t0
    wire = n * len(frame)
    if total != wire - 4 * n:
        raise BenchError(f"raw server wrote {total} bytes, expected {wire - 4 * n}")
    return {
        "frames": n,
        "frame_bytes": len(frame),
        "bytes": wire,
        "elapsed_s": elapsed,
        "mb_s": wire / elapsed / MIB,
        "client_cpu_s": time.process_time() - cpu0,
        **({} if pretouch_s is None else {"pretouch_s": pretouch_s}),
    }


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    if not _recv_into_exact(s, memoryview(buf)):
        raise ConnectionError("connection closed")
    return bytes(buf)


# --------------------------------------------------------------------------------------------
# (b) broker ingest capacity: pre-encoded pipelined Produce requests
# --------------------------------------------------------------------------------------------


def ingest(p: Params) -> Params:
    """`connections` connections, `in_flight` requests outstanding on each, for `duration_s`.

    Connection i writes partition i % partitions. The broker answers each connection in
    order, so a response always acknowledges the oldest request in flight.
    """
    host, port = p["bootstrap"].rsplit(":", 1)
    from wherry.protocol.records import parse_header

    batch = build_record_batch(p["batch_bytes"], p["record_bytes"])
    per_request = parse_header(batch).record_count
    frames = produce_frames(p, batch)
    conns = p["connections"]
    in_flight = p["in_flight"]
    timeout_s = p["timeout_s"]

    socks = []
    for _ in range(conns):
        s = socket.create_connection((host, int(port)), timeout=timeout_s)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)

    # Warm-up: one acknowledged request per partition (waits for leadership if needed).
    deadline = time.monotonic() + 20
    for part, frame in enumerate(frames):
        s = socks[part % conns]
        while True:
            s.sendall(frame)
            errs = _produce_errors(read_frame(s))
            if not errs:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"warm-up produce failed: {errs}")
            time.sleep(0.1)

    pretouch_s = pretouch_param(p)
    barrier = threading.Barrier(conns + 1)
    acked = [0] * conns
    last_ack = [0.0] * conns
    errors: list[str] = []
    start = [0.0]

    def run(i: int) -> None:
        s = socks[i]
        frame = frames[i % len(frames)]
        sent = done = 0
        try:
            barrier.wait()
            end = start[0] + p["duration_s"]
            while sent < in_flight:
                s.sendall(frame)
                sent += 1
            while done < sent:
                resp = read_frame(s)
                done += 1
                errs = _produce_errors(resp)
                if errs:
                    errors.extend(errs)
                    return
                if time.perf_counter() < end:
                    s.sendall(frame)
                    sent += 1
            last_ack[i] = time.perf_counter()
            acked[i] = done
        except Exception as e:  # reported below
            errors.append(f"connection {i}: {e!r}")

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(conns)]
    for t in threads:
        t.start()
    cpu0 = time.process_time()
    start[0] = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join(p["duration_s"] + timeout_s)
    for s in socks:
        s.close()
    if errors:
        raise BenchError(f"ingest errors: {errors[:5]}")
    elapsed = max(last_ack) - start[0]
    total = sum(acked)
    frame_bytes = len(frames[0])
    return {
        "requests": total,
        "records": total * per_request,
        "rec_s": total * per_request / elapsed,
        "records_per_request": per_request,
        "frame_bytes": frame_bytes,
        "bytes": total * frame_bytes,
        "elapsed_s": elapsed,
        "mb_s": total * frame_bytes / elapsed / MIB,
        "req_s": total / elapsed,
        "client_cpu_s": time.process_time() - cpu0,
        **({} if pretouch_s is None else {"pretouch_s": pretouch_s}),
    }


# --------------------------------------------------------------------------------------------
# (d3) broker consume capacity: pre-encoded pipelined Fetch requests
# --------------------------------------------------------------------------------------------


def fetch_frame(
    topic: str, offsets: dict[int, int], max_bytes: int, correlation_id: int, max_wait: int = 0
) -> bytes:
    """A size-prefixed FetchRequest v12 (no session: epoch -1) for the partitions of
    `offsets` (partition → fetch offset), `max_bytes` each; no wait unless `max_wait` (ms)
    says so (a broker with data at hand answers at once either way)."""
    return encode_request(
        1,
        12,
        {
            "replica_id": -1,
            "max_wait": max_wait,
            "min_bytes": 1,
            "max_bytes": max_bytes * len(offsets),
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": max_bytes,
                        }
                        for partition, offset in offsets.items()
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
        correlation_id=correlation_id,
    )


def _fetch_plan(
    s: socket.socket, topic: str, partitions: list[int], max_bytes: int, max_wait: int = 0
) -> list[tuple[bytes, int, int]]:
    """Walk partitions from offset 0 (together, one Fetch for all of them) with decoded
    Fetches: (request frame, response frame size, record bytes) of every Fetch it takes to
    read them once."""
    from wherry.protocol.records import iter_batches

    plan: list[tuple[bytes, int, int]] = []
    offsets = dict.fromkeys(partitions, 0)
    while True:
        frame = fetch_frame(topic, offsets, max_bytes, len(plan) + 1, max_wait)
        s.sendall(frame)
        resp_frame = read_frame(s)
        resp = decode_response(1, 12, resp_frame)
        if int(resp.error_code) != 0:
            raise BenchError(f"fetch {topic}: {resp.error_code!r}")
        total = 0
        for part in resp.responses[0].partitions:
            if int(part.error_code) != 0:
                raise BenchError(f"fetch {topic}-{part.partition_index}: {part.error_code!r}")
            records = part.records or b""
            batches = list(iter_batches(records))
            if records and not batches:
                raise BenchError(f"fetch {topic}-{part.partition_index}: no whole batch")
            if batches:
                offsets[int(part.partition_index)] = batches[-1][1].next_offset
            total += len(records)
        if not total:
            return plan
        plan.append((frame, len(resp_frame), total))


def fetch_load(p: Params) -> Params:
    """`connections` connections (partition i on connection i % connections), each cycling
    through the pre-encoded Fetches that read its partitions from the start (planned once
    with decoded responses), `in_flight` requests outstanding, for `duration_s`. Responses
    are read into a buffer and discarded; each must have the size of its planned answer
    (the log does not change meanwhile)."""
    host, port = p["bootstrap"].rsplit(":", 1)
    timeout_s = p["timeout_s"]
    in_flight = p["in_flight"]
    max_bytes = p.get("max_bytes", MIB)
    conns = p.get("connections", p["partitions"])
    socks = []
    plans = []
    for c in range(conns):
        s = socket.create_connection((host, int(port)), timeout=timeout_s)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
        mine = [part for part in range(p["partitions"]) if part % conns == c]
        plans.append(_fetch_plan(s, p["topic"], mine, max_bytes, p.get("max_wait_ms", 0)))
    if not all(plans):
        raise BenchError("a partition of the consume topic is empty")

    barrier = threading.Barrier(len(socks) + 1)
    counts = [(0, 0, 0)] * len(socks)  # (responses, response bytes, record bytes)
    last = [0.0] * len(socks)
    errors: list[str] = []
    start = [0.0]

    def run(i: int) -> None:
        s, plan = socks[i], plans[i]
        buf = memoryview(bytearray(max(size for _, size, _ in plan) + 4))
        n = len(plan)
        sent = done = nbytes = rbytes = 0
        try:
            barrier.wait()
            end = start[0] + p["duration_s"]
            while sent < in_flight:
                s.sendall(plan[sent % n][0])
                sent += 1
            while done < sent:
                if not _recv_into_exact(s, buf[:4]):
                    raise ConnectionError("connection closed")
                (size,) = _SIZE.unpack_from(buf)
                _, want, records = plan[done % n]
                if size != want:
                    raise BenchError(f"response of {size} bytes, planned {want}")
                if not _recv_into_exact(s, buf[4 : 4 + size]):
                    raise ConnectionError("connection closed")
                done += 1
                nbytes += size + 4
                rbytes += records
                if time.perf_counter() < end:
                    s.sendall(plan[sent % n][0])
                    sent += 1
            last[i] = time.perf_counter()
            counts[i] = (done, nbytes, rbytes)
        except Exception as e:  # reported below
            errors.append(f"connection {i}: {e!r}")

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(socks))]
    for t in threads:
        t.start()
    cpu0 = time.process_time()
    start[0] = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join(p["duration_s"] + timeout_s)
    for s in socks:
        s.close()
    if errors:
        raise BenchError(f"fetch load errors: {errors[:5]}")
    elapsed = max(last) - start[0]
    responses = sum(c[0] for c in counts)
    wire = sum(c[1] for c in counts)
    records = sum(c[2] for c in counts)
    return {
        "requests": responses,
        "bytes": wire,
        "record_bytes": records,
        "elapsed_s": elapsed,
        "mb_s": records / elapsed / MIB,
        "wire_mb_s": wire / elapsed / MIB,
        "req_s": responses / elapsed,
        "passes": responses / sum(len(x) for x in plans),
        "client_cpu_s": time.process_time() - cpu0,
    }


# --------------------------------------------------------------------------------------------
# (c) (d) (e) confluent-kafka clients
# --------------------------------------------------------------------------------------------


def _client_result(records: int, nbytes: int, elapsed_s: float, cpu_s: float) -> Params:
    """What a producer or consumer role reports: counts, rates and its own CPU time."""
    return {
        "records": records,
        "bytes": nbytes,
        "elapsed_s": elapsed_s,
        "rec_s": records / elapsed_s,
        "mb_s": nbytes / elapsed_s / MIB,
        "client_cpu_s": cpu_s,
    }


def cf_produce(p: Params) -> Params:
    from confluent_kafka import KafkaError, Message, Producer

    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None and len(failures) < 10:
            failures.append(str(err))

    prod = Producer(
        {
            "bootstrap.servers": p["bootstrap"],
            "linger.ms": p.get("linger_ms", 5),
            "batch.size": p.get("batch_size", 1_000_000),
            "queue.buffering.max.messages": 1_000_000,
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
            "acks": p.get("acks", "all"),  # librdkafka's default
            **p.get("client_conf", {}),  # security.protocol, ssl.*, sasl.* (bench/security.py)
        }
    )
    prod.list_topics(p["topic"], timeout=10)  # connect and fetch metadata before timing
    topic = p["topic"]
    value = os.urandom(p["record_bytes"])
    count = p["count"]
    pretouch_s = pretouch_param(p)
    deadline = time.monotonic() + p["timeout_s"]
    produce = prod.produce
    brokers0 = [cpu_split(pid) for pid in p.get("broker_pids", ())]
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(count):
        try:
            produce(topic, value)
        except BufferError:
            while True:
                prod.poll(0.001)
                try:
                    produce(topic, value)
                    break
                except BufferError:
                    if time.monotonic() > deadline:
                        raise
        if i & 0xFFFF == 0:
            prod.poll(0)
    remaining = prod.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - t0
    brokers1 = [cpu_split(pid) for pid in p.get("broker_pids", ())]
    if failures or remaining:
        raise BenchError(f"produce failed: {remaining} undelivered, errors {failures}")
    r = _client_result(count, count * p["record_bytes"], elapsed, time.process_time() - cpu0)
    if brokers0:  # (user, system) seconds each broker spent while the clock ran
        r["broker_cpu_split_s"] = [
            (u1 - u0, k1 - k0) for (u0, k0), (u1, k1) in zip(brokers0, brokers1, strict=True)
        ]
    if pretouch_s is not None:
        r["pretouch_s"] = pretouch_s
    return r


def _transaction_sizes(count: int, per_txn: int) -> Iterator[int]:
    """How many of `count` records each transaction sends: `per_txn`, the last the rest."""
    for first in range(0, count, per_txn):
        yield min(per_txn, count - first)


def cf_txn_produce(p: Params) -> Params:
    """confluent-kafka producer, idempotent (`per_txn` 0) or transactional: `count` records,
    `per_txn` per transaction (begin, produce, commit_transaction). The producer id (and the
    transactional id's InitProducerId) is fetched before the clock starts."""
    from confluent_kafka import KafkaError, Message, Producer

    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None and len(failures) < 10:
            failures.append(str(err))

    per_txn = p["per_txn"]
    conf: Params = {
        "bootstrap.servers": p["bootstrap"],
        "linger.ms": p.get("linger_ms", 5),
        "batch.size": p.get("batch_size", 1_000_000),
        "queue.buffering.max.messages": 1_000_000,
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
        "enable.idempotence": True,
    }
    if per_txn:
        conf["transactional.id"] = p["transactional_id"]
    prod = Producer(conf)
    topic = p["topic"]
    prod.list_topics(topic, timeout=10)  # connect and fetch metadata before timing
    timeout = float(p["timeout_s"])
    if per_txn:
        prod.init_transactions(timeout)
    else:  # the idempotent producer gets its producer id with the first send: do it now
        prod.produce(topic, b"warm-up", partition=0)
        if prod.flush(timeout):
            raise BenchError("warm-up record not delivered")
    value = os.urandom(p["record_bytes"])
    count = p["count"]
    deadline = time.monotonic() + timeout
    produce = prod.produce
    transactions = 0

    def send(n: int) -> None:
        for i in range(n):
            try:
                produce(topic, value)
            except BufferError:
                while True:
                    prod.poll(0.001)
                    try:
                        produce(topic, value)
                        break
                    except BufferError:
                        if time.monotonic() > deadline:
                            raise
            if i & 0xFFFF == 0:
                prod.poll(0)

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    if per_txn:
        for n in _transaction_sizes(count, per_txn):
            prod.begin_transaction()
            send(n)
            prod.commit_transaction(max(1.0, deadline - time.monotonic()))
            transactions += 1
        remaining = 0
    else:
        send(count)
        remaining = prod.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - t0
    if failures or remaining:
        raise BenchError(f"produce failed: {remaining} undelivered, errors {failures}")
    out = _client_result(count, count * p["record_bytes"], elapsed, time.process_time() - cpu0)
    out["transactions"] = transactions
    return out


def ak_txn_produce(p: Params) -> Params:
    """The same as `cf_txn_produce` with aiokafka, a client whose transaction is its round
    trips and nothing else (no registration timer, no flush of its own): `count` records,
    idempotent (`per_txn` 0) or `per_txn` a transaction (`async with transaction()`, the
    records sent, the commit). A warm-up record (in a transaction of its own when
    transactional) gets the producer id and the metadata before the clock starts."""
    return asyncio.run(_ak_txn_produce(p))


async def _ak_txn_produce(p: Params) -> Params:
    from aiokafka import AIOKafkaProducer

    per_txn = p["per_txn"]
    topic = p["topic"]
    conf: Params = {
        "bootstrap_servers": p["bootstrap"],
        "linger_ms": p.get("linger_ms", 5),
        "max_batch_size": p.get("batch_size", 1_000_000),
        "enable_idempotence": True,
        "acks": "all",
        "request_timeout_ms": int(p["timeout_s"] * 1000),
    }
    if per_txn:
        conf["transactional_id"] = p["transactional_id"]
    prod = AIOKafkaProducer(**conf)
    failures: list[str] = []

    def on_done(fut: Any) -> None:
        if not fut.cancelled() and fut.exception() is not None and len(failures) < 10:
            failures.append(repr(fut.exception()))

    await prod.start()
    try:
        deadline = time.monotonic() + float(p["timeout_s"])
        if per_txn:
            async with prod.transaction():
                await (await prod.send(topic, b"warm-up", partition=0))
        else:
            await (await prod.send(topic, b"warm-up", partition=0))
        value = os.urandom(p["record_bytes"])
        count = p["count"]
        send = prod.send
        transactions = 0
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        if per_txn:
            for n in _transaction_sizes(count, per_txn):
                async with prod.transaction():
                    for _ in range(n):
                        (await send(topic, value)).add_done_callback(on_done)
                transactions += 1
                if time.monotonic() > deadline:
                    raise BenchError("the deadline passed with records left unsent")
        else:
            for _ in range(count):
                (await send(topic, value)).add_done_callback(on_done)
            await asyncio.wait_for(prod.flush(), max(1.0, deadline - time.monotonic()))
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    finally:
        await prod.stop()
    if failures:
        raise BenchError(f"produce failed: {failures}")
    out = _client_result(count, count * p["record_bytes"], elapsed, cpu)
    out["transactions"] = transactions
    return out


def cf_consume(p: Params) -> Params:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    cons = Consumer(
        {
            "bootstrap.servers": p["bootstrap"],
            "group.id": "wherry-bench",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1000) whenever
            # its prefetch queue is over queued.min.messages; a Python loop drains that queue
            # in well under a second and would then sit idle: a client artifact.
            "fetch.queue.backoff.ms": 10,
        }
    )
    topic = p["topic"]
    expected = p["expected"]
    n = nbytes = 0
    try:
        cons.list_topics(topic, timeout=10)  # connect and fetch metadata before timing
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        cons.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(p["partitions"])])
        deadline = time.monotonic() + p["timeout_s"]
        while n < expected and time.monotonic() < deadline:
            # ask for no more than is left: consume() waits for num_messages or the timeout
            for m in cons.consume(num_messages=min(10_000, expected - n), timeout=0.5):
                if m.error() is not None:
                    raise BenchError(f"consume error: {m.error()}")
                n += 1
                nbytes += len(m)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    finally:
        cons.close()
    if n != expected:
        raise BenchError(f"consumed {n} records, expected {expected}")
    return _client_result(n, nbytes, elapsed, cpu)


def cf_latency(p: Params) -> Params:
    """Produce `record_bytes` records (100 B by default) at `rate`/s for `duration_s`,
    linger.ms=0, `acks` (all by default); latency = produce() → delivery report. `quiet`
    turns librdkafka's log off; the final flush waits up to `flush_timeout_s` (10 s); `keys`
    gives record i the key `i % keys` (no key by default)."""
    from confluent_kafka import Producer

    conf: Params = {
        "bootstrap.servers": p["bootstrap"],
        "linger.ms": 0,
        "acks": p.get("acks", "all"),
    }
    if p.get("quiet"):
        conf["log_level"] = 0
    prod = Producer(conf)
    topic = p["topic"]
    value = os.urandom(p.get("record_bytes", 100))
    prod.produce(topic, value)  # warm-up: connection, metadata, first batch
    if prod.flush(10) != 0:
        raise BenchError("latency warm-up message was not delivered")

    count = int(p["rate"] * p["duration_s"])
    run = produce_paced(prod, topic, value, p["rate"], count, p.get("keys"))
    t0 = run.t0
    remaining = prod.flush(p.get("flush_timeout_s", 10.0))
    elapsed = time.perf_counter() - t0
    latencies, failures = run.latencies, run.failures
    if failures or remaining or len(latencies) != count:
        raise BenchError(f"latency run: {remaining} undelivered, errors {failures[:5]}")
    # the slowest deliveries with when they were sent (seconds into the run), to spot stalls
    slowest = sorted(zip(latencies, run.sent_at, strict=True), reverse=True)[:10]
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

    return {
        "records": count,
        "elapsed_s": elapsed,
        "rate": count / elapsed,
        "client_cpu_s": run.cpu_s,
        "sent_s": run.sent_s,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        "max_ms": latencies[-1] * 1000,
        "slowest": [[round(t - t0, 3), round(lat * 1000, 2)] for lat, t in slowest],
    }


# --------------------------------------------------------------------------------------------
# (d) raw limit: os.sendfile of segment files → loopback client
# --------------------------------------------------------------------------------------------


def sendfile_server(p: Params) -> Params:
    """Send the files (again and again until `min_bytes` were sent) with os.sendfile."""
    files = [Path(f) for f in p["files"]]
    min_bytes = p.get("min_bytes", 0)
    total = 0
    with _accept_one(p["timeout_s"]) as conn:
        fds = [os.open(f, os.O_RDONLY) for f in files]
        try:
            out = conn.fileno()
            passes = 0
            while passes == 0 or total < min_bytes:
                for fd in fds:
                    size = os.fstat(fd).st_size
                    offset = 0
                    while offset < size:
                        sent = os.sendfile(out, fd, offset, size - offset)
                        if sent == 0:
                            break
                        offset += sent
                    total += offset
                passes += 1
                if total == 0:
                    break
        finally:
            for fd in fds:
                os.close(fd)
    return {"bytes": total, "passes": passes}


def sendfile_client(p: Params) -> Params:
    buf = memoryview(bytearray(MIB))
    total = 0
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", p["port"]), timeout=p["timeout_s"]) as s:
        while True:
            k = s.recv_into(buf)
            if k == 0:
                break
            total += k
    elapsed = time.perf_counter() - t0
    return {"bytes": total, "elapsed_s": elapsed, "mb_s": total / elapsed / MIB}


ROLES: dict[str, Callable[[Params], Params]] = {
    "raw_server": raw_server,
    "raw_client": raw_client,
    "ingest": ingest,
    "fetch_load": fetch_load,
    "cf_produce": cf_produce,
    "cf_txn_produce": cf_txn_produce,
    "ak_txn_produce": ak_txn_produce,
    "cf_consume": cf_consume,
    "cf_latency": cf_latency,
    "sendfile_server": sendfile_server,
    "sendfile_client": sendfile_client,
}


def main(argv: list[str]) -> int:
    role, params = argv[1], json.loads(argv[2])
    result = ROLES[role](params)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
