"""`outbound.RequestClient` over real loopback sockets: correlation ids, decoding, one request
in flight, and a `RequestError` (with the connection dropped and re-opened on the next call)
for a refused or lost connection, silence, an unreadable answer or an answer to another
request. The peers are tiny asyncio servers speaking the real wire format (and, once, a real
`wherry server`)."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.loopback import FrameServer, run
from wherry.outbound import OutboundConnection, RequestClient, RequestError
from wherry.protocol.codec import (
    Request,
    ResponseDecodeError,
    decode_request,
    encode_request,
    encode_response,
    kio_version_range,
)
from wherry.protocol.interbroker import (
    BrokerEndpoint,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wherry.protocol.interbroker_codec import INTERBROKER_VERSIONS, InterbrokerEncodeError
from wherry.testing.zookeeper import find_free_port

ALTER_PARTITION = 56
UPDATE_METADATA = 6
SUPPORTED = {ALTER_PARTITION: kio_version_range(ALTER_PARTITION), **INTERBROKER_VERSIONS}
Answer = Callable[[Request], bytes | None]
"""A whole response frame for a request; b"" to say nothing, None to drop the connection."""


def answer_ok(req: Request) -> bytes:
    """UpdateMetadata: no error; AlterPartition: no error, the correlation id as throttle time
    (so a caller can tell which request an answer is for)."""
    if req.api_key == UPDATE_METADATA:
        body: Any = UpdateMetadataResponse(0)
    else:
        body = {"error_code": ErrorCode.none, "throttle_time": req.correlation_id}
    return encode_response(req.api_key, req.api_version, req.correlation_id, body)


def um(epoch: int) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(0, epoch, 10, (), (BrokerEndpoint(1, "h", 1),))


def alter(broker_epoch: int) -> dict[str, Any]:
    return {"broker_id": 1, "broker_epoch": broker_epoch, "topics": []}


def throttle_ms(answer: Any) -> int:
    return round(answer.throttle_time.total_seconds() * 1000)


@dataclass
class Peer(FrameServer):
    """Decodes each request, records it and answers it as `reply` says, after `delay_s`."""

    reply: Answer = answer_ok
    delay_s: float = 0.0
    requests: list[Request] = field(default_factory=list)

    async def answer(self, frame: bytes) -> bytes | None:
        req = decode_request(frame, SUPPORTED)
        assert isinstance(req, Request)
        self.requests.append(req)
        await asyncio.sleep(self.delay_s)
        return self.reply(req)

    def client(self, request_timeout_s: float = 5.0) -> RequestClient:
        return RequestClient(
            OutboundConnection(
                "127.0.0.1", self.port, connect_timeout_s=5, request_timeout_s=request_timeout_s
            ).connect,
            client_id="test-client",
            peer=f"peer at {self.port}",
        )


def test_requests_and_answers_on_one_connection() -> None:
    async def main() -> None:
        peer = await Peer().start()
        client = peer.client()
        try:
            first = await client.call(ALTER_PARTITION, 3, alter(5))
            second = await client.call(UPDATE_METADATA, 8, um(7))
            third = await client.call(ALTER_PARTITION, 2, alter(6))
            assert client.connected
        finally:
            client.close()
            await peer.stop()
        assert (first.error_code, throttle_ms(first)) == (ErrorCode.none, 1)
        assert second == UpdateMetadataResponse(0)
        assert throttle_ms(third) == 3
        assert [(r.api_key, r.api_version, r.correlation_id) for r in peer.requests] == [
            (ALTER_PARTITION, 3, 1),
            (UPDATE_METADATA, 8, 2),
            (ALTER_PARTITION, 2, 3),
        ]
        assert {r.client_id for r in peer.requests} == {"test-client"}
        assert peer.requests[0].body.broker_epoch == 5
        assert peer.requests[1].body == um(7)
        assert peer.connections == 1

    run(main)


def test_concurrent_calls_go_one_at_a_time() -> None:
    async def main() -> None:
        peer = await Peer(delay_s=0.01).start()
        client = peer.client()
        try:
            answers = await asyncio.gather(
                *(client.call(ALTER_PARTITION, 3, alter(i)) for i in range(8))
            )
        finally:
            client.close()
            await peer.stop()
        assert peer.max_unanswered == 1 and peer.connections == 1
        epoch_of = {r.correlation_id: r.body.broker_epoch for r in peer.requests}
        # each caller got the answer to its own request
        assert [epoch_of[throttle_ms(a)] for a in answers] == list(range(8))

    run(main)


def first_answer(bad: Answer) -> Answer:
    """`bad` for the first request, `answer_ok` after."""
    answered = 0

    def answer(req: Request) -> bytes | None:
        nonlocal answered
        answered += 1
        return bad(req) if answered == 1 else answer_ok(req)

    return answer


def wrong_id(req: Request) -> bytes:
    return encode_response(
        req.api_key, req.api_version, req.correlation_id + 1, UpdateMetadataResponse(0)
    )


def garbage(req: Request) -> bytes:
    return struct.pack(">ii", 7, req.correlation_id) + b"\x00\x01\x02"


@pytest.mark.parametrize(
    ("bad", "cause", "message"),
    [
        pytest.param(wrong_id, ResponseDecodeError, "correlation id 2 in the answer to request 1",
                     id="wrong-correlation-id"),
        pytest.param(garbage, ResponseDecodeError, "truncated", id="unreadable"),
        pytest.param(lambda req: None, ConnectionError, "closed during a request",
                     id="connection-closed"),
        pytest.param(lambda req: b"", TimeoutError, "TimeoutError", id="no-answer"),
    ],
)
def test_failed_request_drops_the_connection_and_the_next_call_opens_one(
    bad: Answer, cause: type[Exception], message: str
) -> None:
    async def main() -> None:
        peer = await Peer(reply=first_answer(bad)).start()
        client = peer.client(request_timeout_s=0.3)
        try:
            started = time.monotonic()
            with pytest.raises(RequestError, match=message) as err:
                await client.call(UPDATE_METADATA, 8, um(1))
            assert time.monotonic() - started < 2  # a silent peer: the request timeout
            assert isinstance(err.value.__cause__, cause)
            assert not client.connected
            assert await client.call(UPDATE_METADATA, 8, um(2)) == UpdateMetadataResponse(0)
        finally:
            client.close()
            await peer.stop()
        assert peer.connections == 2
        # the retry is a new request: a correlation id is never reused
        assert [r.correlation_id for r in peer.requests] == [1, 2]

    run(main)


def test_refused_connection_is_a_request_error() -> None:
    async def main() -> None:
        port = find_free_port()  # nothing listens there
        client = RequestClient(
            OutboundConnection("127.0.0.1", port, connect_timeout_s=1).connect,
            client_id=None,
            peer=f"nobody at {port}",
        )
        with pytest.raises(RequestError, match=f"nobody at {port}") as err:
            await client.call(UPDATE_METADATA, 8, um(1))
        assert isinstance(err.value.__cause__, OSError)
        assert not client.connected

    run(main)


def test_unencodable_request_is_not_sent() -> None:
    async def main() -> None:
        peer = await Peer().start()
        client = peer.client()
        try:
            with pytest.raises(InterbrokerEncodeError):
                await client.call(UPDATE_METADATA, 8, alter(1))  # not an UpdateMetadataRequest
            assert peer.connections == 0
            assert await client.call(UPDATE_METADATA, 8, um(1)) == UpdateMetadataResponse(0)
        finally:
            client.close()
            await peer.stop()
        assert [r.body for r in peer.requests] == [um(1)]

    run(main)


def test_outbound_connection_timeouts_and_refusal() -> None:
    async def main() -> None:
        conn = OutboundConnection("127.0.0.1", find_free_port(), connect_timeout_s=1,
                                  request_timeout_s=0.2)
        with pytest.raises(OSError):
            await conn.connect()
        peer = await Peer(reply=lambda req: b"").start()
        try:
            conn = OutboundConnection("127.0.0.1", peer.port, request_timeout_s=0.2)
            await conn.connect()
            frame = encode_request(UPDATE_METADATA, 8, 1, um(1))
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await conn.request(frame)
            assert time.monotonic() - started < 1.5
            assert not conn.connected
            with pytest.raises(ConnectionError):
                await conn.request(frame)
        finally:
            await peer.stop()

    run(main)


def test_against_a_real_broker(broker: BrokerProcess) -> None:
    """ApiVersions v3 (flexible, but answered with header v0) and Metadata v12 (header v1)."""

    async def main() -> None:
        client = RequestClient(
            OutboundConnection("127.0.0.1", broker.port, connect_timeout_s=5).connect,
            client_id="request-client-test",
            peer="the test broker",
        )
        try:
            versions = await client.call(
                18, 3, {"client_software_name": "wherry-test", "client_software_version": "1"}
            )
            metadata = await client.call(3, 12, {"topics": None})
        finally:
            client.close()
        assert versions.error_code == ErrorCode.none
        assert {int(k.api_key) for k in versions.api_keys} >= {1, 2, 3, 18, 23, 56}
        assert [int(b.port) for b in metadata.brokers] == [broker.port]

    run(main)
