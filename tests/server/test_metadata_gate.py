"""The gate that holds clients' requests until a starting broker has the controller's first
metadata: which requests it holds, when it opens, and its bound."""

from __future__ import annotations

import asyncio
import logging

import pytest

from wherry.protocol.codec import encode_request
from wherry.protocol.interbroker import BrokerEndpoint, UpdateMetadataRequest
from wherry.replication.metadata_cache import MetadataCache
from wherry.server.metadata_gate import MetadataGate, api_key_of, has_metadata


def _update(cache: MetadataCache, controller: int, brokers: list[int]) -> None:
    cache.update(
        UpdateMetadataRequest(
            controller_id=controller,
            controller_epoch=1,
            broker_epoch=-1,
            partition_states=(),
            live_brokers=tuple(BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in brokers),
        )
    )


def _frame(key: int, version: int, body: dict[str, object]) -> memoryview:
    return memoryview(encode_request(key, version, 7, body, client_id="t")[4:])


METADATA = {"topics": None, "allow_auto_topic_creation": False}


def test_the_api_key_is_read_from_the_frame() -> None:
    assert api_key_of(_frame(3, 12, METADATA)) == 3
    assert api_key_of(b"\x00") is None


def test_it_opens_once_the_cache_lists_this_broker_and_a_controller() -> None:
    async def run() -> None:
        cache = MetadataCache(1)
        gate = MetadataGate(cache, hold_ms=30_000)
        cache.add_listener(gate.on_update)
        gate.start_holding(asyncio.get_running_loop().time())
        metadata = _frame(3, 12, METADATA)
        assert gate.holds(metadata)
        waiter = asyncio.ensure_future(gate.wait())
        _update(cache, controller=0, brokers=[0])  # not this broker yet
        await asyncio.sleep(0.01)
        assert not waiter.done() and not has_metadata(cache)
        _update(cache, controller=0, brokers=[0, 1])
        await asyncio.wait_for(waiter, 1)
        assert gate.is_open and not gate.holds(metadata)

    asyncio.run(run())


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        (18, 3, {"client_software_name": "t", "client_software_version": "1"}),
        (17, 1, {"mechanism": "PLAIN"}),
        (36, 2, {"auth_bytes": b"\x00u\x00p"}),
    ],
)
def test_the_cluster_s_own_requests_are_not_held(
    key: int, version: int, body: dict[str, object]
) -> None:
    gate = MetadataGate(MetadataCache(1), hold_ms=30_000)
    assert not gate.holds(_frame(key, version, body))
    for controller_key in (1, 4, 5, 6, 7, 23, 27, 56):  # by api key, before any decoding
        assert not gate.holds(controller_key.to_bytes(2, "big") + b"\x00\x00")
    for client_key in (0, 2, 3, 8, 10, 19, 32, 60):
        assert gate.holds(client_key.to_bytes(2, "big") + b"\x00\x00")


def test_without_metadata_it_opens_after_its_bound_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> float:
        gate = MetadataGate(MetadataCache(1), hold_ms=200, prefix="[Broker id=1]")
        loop = asyncio.get_running_loop()
        gate.start_holding(loop.time())
        started = loop.time()
        await asyncio.wait_for(asyncio.gather(gate.wait(), gate.wait()), 5)
        await gate.wait()  # open: at once
        return loop.time() - started

    with caplog.at_level(logging.WARNING, logger="wherry.server.metadata_gate"):
        waited = asyncio.run(run())
    assert 0.15 <= waited < 3.0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "no metadata from the controller" in lines[0], lines
