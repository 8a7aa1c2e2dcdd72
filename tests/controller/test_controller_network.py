"""The controller with the network channel manager: stand-in brokers behind real loopback
sockets speaking the inter-broker wire format. The controller keeps the manager's queues in
step with the live brokers (`sync_brokers`, with broker epochs), and StopReplica answers,
which arrive later through the manager's response listener, complete a topic deletion."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

from controller_harness import (
    FAST_CHANNEL,
    EmbeddedBackend,
    StandInBroker,
    async_test,
    wait_until,
)

from tests.loopback import FrameServer
from wherry.common.topic_partition import TopicPartition
from wherry.controller.channel_manager import BrokerAddress, NetworkChannelManager
from wherry.controller.controller import Controller
from wherry.coordination import paths
from wherry.protocol.interbroker import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataResponse,
)
from wherry.protocol.interbroker_codec import (
    InterbrokerResponseBody,
    decode_interbroker_request,
    encode_interbroker_response,
    with_topic_ids,
)


class SocketBroker(FrameServer):
    """Serves a `StandInBroker` on a loopback port."""

    def __init__(self, broker: StandInBroker) -> None:
        super().__init__()
        self.broker = broker

    async def answer(self, frame: bytes) -> bytes:
        req = decode_interbroker_request(frame)
        body = req.body
        resp: InterbrokerResponseBody
        if isinstance(body, LeaderAndIsrRequest):
            resp = with_topic_ids(await self.broker.handle_leader_and_isr(body), body.topic_ids)
        elif isinstance(body, StopReplicaRequest):
            resp = await self.broker.handle_stop_replica(body)
        else:
            resp = UpdateMetadataResponse(await self.broker.handle_update_metadata(body))
        return encode_interbroker_response(req.api_key, req.api_version, req.correlation_id, resp)


@async_test
async def test_network_channel_follows_live_brokers_and_answers_drive_deletion() -> None:
    backend = EmbeddedBackend()
    admin = await backend.new_session()
    await paths.ensure_persistent_paths(admin)
    brokers: dict[int, tuple[StandInBroker, SocketBroker]] = {}
    for b in (1, 2):
        store = await backend.new_session()
        sb = StandInBroker(b, store)
        server = SocketBroker(sb)
        sb.port = (await server.start()).port
        await sb.register()
        brokers[b] = (sb, server)
    channel = NetworkChannelManager(1, config=replace(FAST_CHANNEL, request_timeout_ms=2000))
    controller = Controller(1, brokers[1][0].store, channel)
    try:
        await controller.start()
        assert controller.active
        assert channel.brokers == {
            b: BrokerAddress("127.0.0.1", sb.port, sb.fence.broker_epoch)
            for b, (sb, _) in brokers.items()
        }
        await admin.create(paths.topic_path("n"), paths.TopicAssignment(
            uuid.uuid4(), {0: [1, 2], 1: [2, 1]}).to_json())
        b1, b2 = brokers[1][0], brokers[2][0]
        await wait_until(lambda: len(b1.partitions) == 2 and len(b2.partitions) == 2)
        assert {tp.partition: s.leader for tp, s in b2.partitions.items()} == {0: 1, 1: 2}
        assert not b1.rejected and not b2.rejected

        await admin.create(paths.delete_topic_path("n"), b"")
        await wait_until(lambda: len(b1.deleted) == 2 and len(b2.deleted) == 2)
        for _ in range(200):  # the answers come back through the manager's listener
            if await admin.exists(paths.topic_path("n")) is None:
                break
            await asyncio.sleep(0.02)
        assert await admin.exists(paths.topic_path("n")) is None
        await wait_until(lambda: "n" not in controller.ctx.assignments)
        assert sorted(b2.deleted) == [TopicPartition("n", 0), TopicPartition("n", 1)]

        # Broker 2 dies: its queue goes.
        await brokers[2][1].stop()
        await brokers[2][0].store.close()
        await wait_until(lambda: sorted(channel.brokers) == [1])
    finally:
        await controller.stop()
        assert channel.brokers == {}  # resigning drops every queue
        await channel.close()
        for _, server in brokers.values():
            await server.stop()
        await admin.close()
        await backend.aclose()
