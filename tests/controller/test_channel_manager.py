"""NetworkChannelManager over real loopback sockets: order, one request in flight, resending
to a broker that was down or lost an answer, dropping a removed broker's queue, bounded
retrying and a clean close. The brokers are small asyncio servers speaking the real wire
format (and, once, a real `wherry server`)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

import pytest
from controller_harness import FAST_CHANNEL
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.loopback import FrameServer, run
from wherry.controller.channel import ResponseCallback
from wherry.controller.channel_manager import (
    BrokerAddress,
    ChannelConfig,
    NetworkChannelManager,
    retry_backoff_ms,
    send_batch,
)
from wherry.controller.request_batch import RequestBatch
from wherry.protocol.interbroker import (
    BrokerEndpoint,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wherry.protocol.interbroker_codec import (
    DEFAULT_INTERBROKER_VERSIONS,
    InterbrokerRequestBody,
    InterbrokerResponseBody,
    decode_interbroker_request,
    decode_interbroker_response,
    encode_interbroker_response,
)
from wherry.testing.zookeeper import find_free_port


def answer_for(body: InterbrokerRequestBody) -> InterbrokerResponseBody:
    if isinstance(body, LeaderAndIsrRequest):
        return LeaderAndIsrResponse(0, tuple(LeaderAndIsrPartitionError(
            s.topic_name, s.partition_index, 0) for s in body.partition_states))
    if isinstance(body, StopReplicaRequest):
        return StopReplicaResponse(0, tuple(LeaderAndIsrPartitionError(
            p.topic_name, p.partition_index, 0) for p in body.partitions))
    return UpdateMetadataResponse(0)


def as_received(body: InterbrokerRequestBody) -> InterbrokerResponseBody:
    """`answer_for(body)` as the manager reads it back (LeaderAndIsr v5+ names topics by id)."""
    key = {LeaderAndIsrRequest: 4, StopReplicaRequest: 5, UpdateMetadataRequest: 6}[type(body)]
    v = DEFAULT_INTERBROKER_VERSIONS[key]
    frame = encode_interbroker_response(key, v, 1, answer_for(body))
    return decode_interbroker_response(key, v, frame[4:])[1]


@dataclass
class FakeBroker(FrameServer):
    """A loopback server that decodes controller requests and answers them after `delay_s`.

    `drop_first` requests are not answered: the connection is closed instead (or, with
    `silent`, left open without an answer). `max_unanswered` is the most requests it ever
    held at once (pipelining would make it > 1)."""

    delay_s: float = 0.0
    drop_first: int = 0
    silent: bool = False
    received: list[InterbrokerRequestBody] = field(default_factory=list)
    correlation_ids: list[int] = field(default_factory=list)

    async def answer(self, frame: bytes) -> bytes | None:
        req = decode_interbroker_request(frame)
        self.received.append(req.body)
        self.correlation_ids.append(req.correlation_id)
        if self.drop_first > 0:
            self.drop_first -= 1
            return b"" if self.silent else None
        await asyncio.sleep(self.delay_s)
        return encode_interbroker_response(
            req.api_key, req.api_version, req.correlation_id, answer_for(req.body))


def um(epoch: int, broker_epoch: int = 10) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(0, epoch, broker_epoch, (), (BrokerEndpoint(1, "h", 1),), {})


def lai(epoch: int, topic: str = "t") -> LeaderAndIsrRequest:
    st = LeaderAndIsrPartitionState(topic, 0, epoch, 1, 3, (1,), 3, (1,))
    return LeaderAndIsrRequest(0, epoch, 10, (st,), {}, (BrokerEndpoint(1, "h", 1),))


def stop(epoch: int) -> StopReplicaRequest:
    return StopReplicaRequest(0, epoch, 10, (StopReplicaPartition("t", 0, 3, True),))


def mixed(n: int) -> list[InterbrokerRequestBody]:
    makers: list[Callable[[int], InterbrokerRequestBody]] = [lai, um, stop]
    return [makers[i % 3](i) for i in range(n)]


def down_broker() -> FakeBroker:
    """A broker that is down: its port is chosen, nothing listens there until `start`."""
    return FakeBroker(port=find_free_port())


@asynccontextmanager
async def manager_for(
    fb: FakeBroker,
    config: ChannelConfig = FAST_CHANNEL,
    on_response: ResponseCallback | None = None,
    *,
    add: bool = True,
) -> AsyncIterator[NetworkChannelManager]:
    """Controller 0's manager with `fb` as broker 1 (unless not `add`); the manager is closed
    and `fb` stopped when the block ends."""
    m = NetworkChannelManager(0, config=config, on_response=on_response)
    try:
        if add:
            m.add_broker(1, BrokerAddress("127.0.0.1", fb.port))
        yield m
    finally:
        await m.close()
        await fb.stop()


# --- tests ------------------------------------------------------------------------------------
def test_backoff_doubles_up_to_its_cap() -> None:
    cfg = ChannelConfig(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    assert [retry_backoff_ms(cfg, n) for n in range(7)] == [0, 100, 200, 400, 800, 1000, 1000]
    assert retry_backoff_ms(cfg, 10_000) == 1000


def test_requests_arrive_in_order_one_in_flight() -> None:
    async def main() -> None:
        fb = await FakeBroker(delay_s=0.01).start()
        seen: list[tuple[int, InterbrokerRequestBody, InterbrokerResponseBody]] = []

        def on_response(b: int, req: InterbrokerRequestBody, resp: InterbrokerResponseBody) -> None:
            seen.append((b, req, resp))

        async with manager_for(fb, on_response=on_response) as m:
            sent = mixed(30)
            futures = [m.enqueue(1, body) for body in sent]
            assert m.queue_size(1) == 30
            answers = await asyncio.gather(*futures)
            assert fb.received == sent
            assert fb.max_unanswered == 1 and fb.connections == 1
            assert len(set(fb.correlation_ids)) == 30
            assert answers == [as_received(b) for b in sent]
            assert seen == [(1, req, as_received(req)) for req in sent]
            assert m.queue_size(1) == 0
            # The ControllerChannel methods queue and return at once.
            assert await m.leader_and_isr(1, lai(99)) is None
            assert await m.update_metadata(1, um(100)) is None
            assert await m.stop_replica(1, stop(101)) is None
            while len(fb.received) < 33 or m.queue_size(1):
                await asyncio.sleep(0.01)
            assert fb.received[30:] == [lai(99), um(100), stop(101)]

    run(main)


def test_broker_that_is_down_gets_its_queue_when_it_comes_up() -> None:
    async def main() -> None:
        fb = down_broker()
        async with manager_for(fb) as m:
            sent = mixed(5)
            futures = [m.enqueue(1, body) for body in sent]
            await asyncio.sleep(0.3)  # refused a few times meanwhile
            assert m.queue_size(1) == 5 and not any(f.done() for f in futures)
            await fb.start()
            answers = await asyncio.gather(*futures)
            assert answers == [as_received(b) for b in sent]
            assert fb.received == sent  # each once, in order

    run(main)


@pytest.mark.parametrize("silent", [False, True], ids=["connection-closed", "no-answer"])
def test_unanswered_request_is_resent_on_a_new_connection(silent: bool) -> None:
    async def main() -> None:
        fb = await FakeBroker(drop_first=1, silent=silent).start()
        async with manager_for(fb, replace(FAST_CHANNEL, request_timeout_ms=300)) as m:
            sent = mixed(4)
            started = time.monotonic()
            answers = await asyncio.gather(*(m.enqueue(1, b) for b in sent))
            assert answers == [as_received(b) for b in sent]
            # the first request twice (the retry), then the rest once each, in order
            assert fb.received == [sent[0], *sent]
            assert fb.connections == 2
            assert fb.correlation_ids[0] != fb.correlation_ids[1]
            if silent:  # it waited for the request timeout, not longer
                assert 0.3 <= time.monotonic() - started < 3

    run(main)


def test_removed_broker_queue_is_dropped() -> None:
    async def main() -> None:
        fb = down_broker()
        async with manager_for(fb) as m:
            futures = [m.enqueue(1, body) for body in mixed(3)]
            await asyncio.sleep(0.1)
            await m.remove_broker(1)
            assert [f.result() for f in futures] == [None, None, None]
            assert m.brokers == {} and m.queue_size(1) == 0
            # a request for a broker that is not there is not sent either
            assert (await m.enqueue(1, um(5))) is None
            await fb.start()
            await asyncio.sleep(0.5)
            assert fb.connections == 0 and fb.received == []

    run(main)


def test_new_incarnation_of_a_broker_gets_a_new_queue() -> None:
    async def main() -> None:
        fb = down_broker()
        async with manager_for(fb, add=False) as m:
            await m.sync_brokers({1: BrokerAddress("127.0.0.1", fb.port, epoch=10)})
            old = m.enqueue(1, um(1, broker_epoch=10))
            await asyncio.sleep(0.1)
            # broker 1 died and came back (new registration, new epoch) before answering
            await m.sync_brokers({1: BrokerAddress("127.0.0.1", fb.port, epoch=20)})
            assert old.done() and old.result() is None
            await fb.start()
            assert await m.enqueue(1, um(2, broker_epoch=20)) == UpdateMetadataResponse(0)
            assert fb.received == [um(2, broker_epoch=20)]
            await m.sync_brokers({})
            assert m.brokers == {}

    run(main)


def test_retry_loop_is_bounded_and_close_stops_it() -> None:
    async def main() -> None:
        fb = await FakeBroker(close_on_accept=True).start()  # accepts, then hangs up at once
        cfg = ChannelConfig(connect_timeout_ms=500, request_timeout_ms=500,
                            retry_backoff_ms=50, retry_backoff_max_ms=200)
        async with manager_for(fb, cfg) as m:
            future = m.enqueue(1, um(1))
            await asyncio.sleep(1.0)
            # backoff 50, 100, 200, 200, ... ms: about 6 attempts in a second, not a hot loop
            assert 3 <= fb.connections <= 12, fb.connections
            assert not future.done()
            tasks_before = {t for t in asyncio.all_tasks() if t.get_name().startswith(
                "controller-0-to-broker-")}
            assert len(tasks_before) == 1
            started = time.monotonic()
            await m.close()
            assert time.monotonic() - started < 0.5
            assert future.result() is None
            assert all(t.done() for t in tasks_before)
            # a connect the manager made just before closing may still wait in the listening
            # socket's backlog; the server's accept callback counts it at its next turn
            await asyncio.sleep(0.05)
            count = fb.connections
            await asyncio.sleep(0.4)
            assert fb.connections == count  # nothing retries after close
            assert (await m.enqueue(1, um(2))) is None
            m.add_broker(2, BrokerAddress("127.0.0.1", fb.port))  # closed: ignored
            assert m.brokers == {}

    run(main)


def test_batch_through_the_manager_to_a_real_broker(broker: BrokerProcess) -> None:
    """A real `wherry server` answers the manager: a stale controller epoch (0) is refused."""

    async def main() -> None:
        got: list[InterbrokerResponseBody] = []
        m = NetworkChannelManager(7, config=FAST_CHANNEL, on_response=lambda b, q, r: got.append(r))
        try:
            m.add_broker(0, BrokerAddress("127.0.0.1", broker.port))
            batch = RequestBatch(7, 0)
            batch.add_leader_and_isr([0], LeaderAndIsrPartitionState(
                "never-created", 0, 0, 0, 0, (0,), 0, (0,)))
            batch.add_update_metadata([0])
            batch.add_stop_replica([0], StopReplicaPartition("never-created", 0, -2, True))
            await send_batch(m, batch.build({0: -1}, (BrokerEndpoint(0, "127.0.0.1", 1),)))
            while len(got) < 3:
                await asyncio.sleep(0.02)
        finally:
            await m.close()
        stale = ErrorCode.stale_controller_epoch
        assert got == [
            LeaderAndIsrResponse(
                stale, (LeaderAndIsrPartitionError("", 0, stale, uuid.UUID(int=0)),)
            ),
            UpdateMetadataResponse(stale),
            StopReplicaResponse(stale),
        ]

    run(main)
