"""Request frames over the simulated network: what replaces the sockets, and only that.

A `SimConnection` is a `FrameTransport` from one simulated process to a broker: each request
frame is carried by `SimNetwork.call` (delayed, dropped, refused while cut apart or down) to
the broker's `handle_frame`, which is the real request path (`dispatch.decode_frame`, then
`dispatch.serve`: the codecs, the handlers, fetch sessions, the authorizer), and the encoded
answer comes back the same way. A Fetch answer's file regions are read into the frame, as
the network layer would send them. A connection is bound to the incarnation of the broker it
reached: once that process is gone it is reset, as a TCP connection would be. As in the network
layer, a request runs to its end in the broker whatever its client does (`SimBroker.serve`),
and a connection the client closes or gives up on is closed at the broker too
(`SimBroker.connection_closed`: its share sessions close, a Fetch still waiting is given up).

`SimClients` are one process's connections to the brokers, with a `RequestClient` (the one
the brokers' own fetchers and marker senders use) on each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.file_region import FileRegion, ShortRegionError
from wherry.outbound import RequestClient
from wherry.outbound.connection import Connect, FrameTransport
from wherry.server.network import (
    _GIVEN_UP_WITH_CONNECTION,
    CloseConnection,
    ConnectionInfo,
    Deferred,
)
from wherry.sim.network import SimNetwork

__all__ = [
    "FetchedRange",
    "SimClients",
    "SimConnection",
    "broker_connect_to",
    "fetch",
    "frame_bytes",
    "produce",
]

PRODUCE_KEY: Final = 0
FETCH_KEY: Final = 1

class FrameServer(Protocol):
    """A simulated broker as its connections see it (`node.SimBroker`)."""

    @property
    def incarnation(self) -> int: ...

    def serve(self, conn: ConnectionInfo, frame: memoryview) -> asyncio.Task[bytes | None]: ...

    def connection_closed(self, conn: ConnectionInfo) -> None: ...


class Brokers(Protocol):
    network: SimNetwork

    def node(self, broker_id: int) -> FrameServer | None: ...

    def incarnation(self, node_id: int) -> int | None: ...


async def frame_bytes(answer: Any) -> bytes | None:
    """A handler's answer as the bytes of its frame (size prefix included); None when there is
    none (acks=0). A parked answer is awaited; file regions are read (a region the file no
    longer holds -- a power loss cut it -- drops the connection, as the network layer does)."""
    if isinstance(answer, Deferred):
        answer = await answer.answer
    if answer is None or isinstance(answer, bytes):
        return answer
    chunks: list[bytes] = []
    try:
        for part in answer:
            if isinstance(part, FileRegion):
                chunks.append(part.read())
            else:
                chunks.append(bytes(part))
    except ShortRegionError as e:
        raise ConnectionError(f"connection closed: {e}") from e
    finally:
        for part in answer:
            if isinstance(part, FileRegion):
                part.close()
    return b"".join(chunks)


class SimConnection:
    """A connection from process `src` to broker `dst` over the simulated network."""

    def __init__(
        self, world: Brokers, src: int, dst: int, *, timeout_ms: int, alive: Callable[[], bool]
    ) -> None:
        self.world = world
        self.src = src
        self.dst = dst
        self.timeout_ms = timeout_ms
        self._alive = alive  # the sending process is still the one that opened it
        self.dst_incarnation = world.incarnation(dst)
        self.closed = self.dst_incarnation is None
        self._inflight: asyncio.Task[bytes | None] | None = None
        self._inflight_key = -1
        conn_id = world.network.next_connection_id()
        self.info = ConnectionInfo(f"10.0.{src // 250}.{src % 250}:{conn_id}", "PLAINTEXT", conn_id)

    @property
    def connected(self) -> bool:
        return not self.closed

    def abort(self) -> None:
        self._close()

    def _close(self) -> None:
        """Closed at this end; the broker, if it is the process this connection reached, hears
        of it (its close listener), and a Fetch of it still waiting is given up."""
        if self.closed:
            return
        self.closed = True
        task, self._inflight = self._inflight, None
        if task is not None and not task.done() and self._inflight_key in _GIVEN_UP_WITH_CONNECTION:
            task.cancel()
        node = self.world.node(self.dst)
        if node is not None and node.incarnation == self.dst_incarnation:
            node.connection_closed(self.info)

    async def request(self, frame: bytes) -> bytes:
        world, dst, inc = self.world, self.dst, self.dst_incarnation
        if not self._alive():
            self._close()
            raise ConnectionError("the sending process is gone")
        if self.closed or world.incarnation(dst) != inc:
            self._close()
            raise ConnectionError(f"broker {dst}: connection refused or reset")

        async def handler() -> bytes | None:
            node = world.node(dst)
            if node is None or node.incarnation != inc:
                raise ConnectionError(f"broker {dst}: connection reset")
            task = node.serve(self.info, memoryview(frame)[4:])
            self._inflight, self._inflight_key = task, int.from_bytes(frame[4:6], "big")
            try:
                # the client's timeout does not end the broker's work (`_close` may)
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if me is not None and me.cancelling():
                    raise  # the client's own timeout
                # the broker's process ended the request: it died or stopped
                raise ConnectionError(f"broker {dst}: connection reset") from None
            except CloseConnection as e:
                raise ConnectionError(f"broker {dst} closed the connection: {e}") from e

        try:
            answer = await world.network.call(self.src, dst, handler, timeout_ms=self.timeout_ms)
        except (ConnectionError, TimeoutError):
            self._close()
            raise
        if not self._alive():  # the answer came back to a process that is gone
            self._close()
            raise ConnectionError("the sending process is gone")
        if answer is None:
            self._close()
            raise ConnectionError(f"broker {dst} sent no answer")
        return answer[4:]


class Process(Protocol):
    """A simulated broker process as its outbound connections see it (`node.SimBroker`)."""

    broker_id: int
    incarnation: int
    up: bool


def broker_connect_to(
    world: Brokers, node: Process, timeout_ms: int
) -> Callable[[int, str, int], Connect]:
    """A broker's coordinators' connections to the other brokers (a `txn_markers.ConnectTo`):
    request frames into the destination's request path over the simulated network, dead with
    this incarnation of the process."""
    incarnation = node.incarnation

    def connect_to(broker_id: int, _host: str, _port: int) -> Connect:
        async def connect() -> FrameTransport:
            return SimConnection(
                world,
                node.broker_id,
                broker_id,
                timeout_ms=timeout_ms,
                alive=lambda: node.up and node.incarnation == incarnation,
            )

        return connect

    return connect_to


class SimClients:
    """One simulated process's connections to the brokers, a `RequestClient` on each."""

    def __init__(
        self,
        world: Brokers,
        src: int,
        *,
        client_id: str,
        timeout_ms: int,
        alive: Callable[[], bool] = lambda: True,
    ) -> None:
        self.world = world
        self.src = src
        self.client_id = client_id
        self.timeout_ms = timeout_ms
        self.alive = alive
        self._clients: dict[int, RequestClient] = {}

    def connect(self, dst: int) -> Connect:
        async def connect() -> FrameTransport:
            return SimConnection(
                self.world, self.src, dst, timeout_ms=self.timeout_ms, alive=self.alive
            )

        return connect

    def to(self, dst: int) -> RequestClient:
        client = self._clients.get(dst)
        if client is None:
            client = RequestClient(self.connect(dst), client_id=self.client_id, peer=f"{dst}")
            self._clients[dst] = client
        return client

    async def call(self, dst: int, api_key: int, api_version: int, body: Any) -> Any:
        """One request to broker `dst` and its decoded answer; ConnectionError (the
        `RequestError` of a lost, refused or timed-out request) when there is none."""
        return await self.to(dst).call(api_key, api_version, body)


# --- the requests simulated clients send ------------------------------------------------------
PRODUCE_VERSION: Final = 9
FETCH_VERSION: Final = 12


@dataclass(frozen=True, slots=True)
class FetchedRange:
    """One partition of a consumer's Fetch answer."""

    error_code: ErrorCode
    high_watermark: int
    records: bytes
    aborted_transactions: list[tuple[int, int]]  # (producer id, first offset)


async def produce(
    clients: SimClients,
    leader: int,
    tp: TopicPartition,
    batch: bytes,
    timeout_ms: int,
    *,
    transactional_id: str | None = None,
    version: int | None = None,
) -> tuple[ErrorCode, int] | None:
    """An acks=all Produce of one batch: (error, base offset), None when no answer came.
    `version`: the request's (Produce v12+ is a transactions v2 client's)."""
    body = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout": timeout_ms,
        "topic_data": [
            {"name": tp.topic, "partition_data": [{"index": tp.partition, "records": batch}]}
        ],
    }
    try:
        resp = await clients.call(leader, PRODUCE_KEY, version or PRODUCE_VERSION, body)
    except ConnectionError:
        return None
    for t in resp.responses:
        for p in t.partition_responses:
            return ErrorCode(p.error_code), int(p.base_offset)
    return None


async def fetch(
    clients: SimClients, broker: int, tp: TopicPartition, offset: int, isolation_level: int
) -> FetchedRange | None:
    """A consumer's Fetch (no wait, up to 1 MiB) of one partition from `offset`; None when no
    answer came."""
    wanted = {
        "partition": tp.partition,
        "fetch_offset": offset,
        "partition_max_bytes": 1 << 20,
        "current_leader_epoch": -1,
        "log_start_offset": -1,
        "last_fetched_epoch": -1,
    }
    body = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": tp.topic, "partitions": [wanted]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    try:
        resp = await clients.call(broker, FETCH_KEY, FETCH_VERSION, body)
    except ConnectionError:
        return None
    if resp.error_code != ErrorCode.none:
        return FetchedRange(ErrorCode(resp.error_code), -1, b"", [])
    for t in resp.responses:
        for p in t.partitions:
            return FetchedRange(
                ErrorCode(p.error_code),
                int(p.high_watermark),
                bytes(p.records or b""),
                [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions or ()],
            )
    return None
