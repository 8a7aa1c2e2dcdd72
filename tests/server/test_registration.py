"""A broker's registration in the metadata store: its ephemeral node with every endpoint and
the rack, the node's creation id as the broker epoch, a live registration of the same id
refused, and a new one allowed once the old session has expired (a restart)."""

from __future__ import annotations

import asyncio

import pytest

from tests.store_sessions import EmbeddedSessions
from wherry.coordination import paths
from wherry.server.registration import register_broker

ENDPOINTS = (
    paths.ListenerEndpoint("PLAINTEXT", "localhost", 9092),
    paths.ListenerEndpoint("SSL", "localhost", 9093, "SSL"),
)


def test_a_live_registration_is_refused_and_a_restarted_broker_registers_again() -> None:
    async def run() -> None:
        sessions = EmbeddedSessions()
        try:
            first = await sessions.new_session()
            epoch = await register_broker(first, 3, ENDPOINTS, "rack-a", 1_000)
            data, stat = await first.get(paths.broker_path(3))
            assert epoch == stat.czxid and stat.ephemeral_owner == first.session_id
            reg = paths.BrokerRegistration.from_json(data, broker_id=3)
            assert reg.endpoints == ENDPOINTS and reg.rack == "rack-a"
            assert reg.address("SSL") == ("localhost", 9093)

            second = await sessions.new_session()
            with pytest.raises(RuntimeError, match="Broker id 3 is already registered"):
                await register_broker(second, 3, ENDPOINTS, None, 2_000)

            await sessions.expire(first)  # the old incarnation's session is gone
            again = await register_broker(second, 3, ENDPOINTS[:1], None, 3_000)
            assert again > epoch  # a later incarnation: a newer broker epoch
            data, _ = await second.get(paths.broker_path(3))
            assert paths.BrokerRegistration.from_json(data, broker_id=3).endpoints == ENDPOINTS[:1]
        finally:
            await sessions.aclose()

    asyncio.run(run())
