"""The simulation's clients and followers reach the brokers through the broker's real request
path (frames decoded by the codecs, the handlers, fetch sessions): a bug planted in a request
handler is one the simulation finds."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.codec import Request
from wherry.server.handlers import LOADED, handler_for
from wherry.server.services import BrokerServices
from wherry.sim.world import SimOptions, SimResult, run_seed

CI = SimOptions(duration_ms=3_000, settle_ms=2_500)
PRODUCE, FETCH = 0, 1


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture
def handlers() -> Iterator[dict[int, Any]]:
    """The handler table, restored afterwards."""
    saved = dict(LOADED)
    yield LOADED
    LOADED.clear()
    LOADED.update(saved)


def first_failure(seeds: int, options: SimOptions = CI) -> SimResult | None:
    for seed in range(seeds):
        result = run_seed(seed, options)
        if not result.ok:
            return result
    return None


async def produce_acknowledged_not_appended(
    broker: BrokerServices, req: Request
) -> Mapping[str, Any]:
    """A Produce handler with a bug: it answers NONE at the log end offset without appending."""
    responses = []
    for t in req.body.topic_data:
        parts = []
        for p in t.partition_data:
            part = broker.replica_manager.get_partition(TopicPartition(t.name, p.index))
            end = part.log.log_end_offset if part is not None else 0
            parts.append(
                {"index": p.index, "error_code": ErrorCode.none, "base_offset": end,
                 "log_append_time": -1, "log_start_offset": 0}
            )
        responses.append({"name": t.name, "partition_responses": parts})
    return {"responses": responses, "throttle_time": 0}


def test_the_simulation_runs_the_real_handlers(handlers: dict[int, Any]) -> None:
    """Every Produce and Fetch of a default seed went through the handler table."""
    calls = {PRODUCE: 0, FETCH: 0}
    real = {k: handler_for(k) for k in calls}

    def counting(key: int) -> Any:
        async def handle(broker: BrokerServices, req: Request) -> Any:
            calls[key] += 1
            return await real[key](broker, req)

        return handle

    for key in calls:
        handlers[key] = counting(key)
    result = run_seed(0, CI)
    assert result.ok, result.violation or result.error
    assert result.acks > 0
    assert calls[PRODUCE] >= result.acks  # clients' Produce requests
    assert calls[FETCH] > calls[PRODUCE]  # followers' fetches and consumers'


def test_a_produce_handler_that_does_not_append_is_caught(handlers: dict[int, Any]) -> None:
    assert first_failure(3) is None  # the real handler: no failure
    handlers[PRODUCE] = produce_acknowledged_not_appended
    failed = first_failure(50)
    assert failed is not None, "the planted Produce bug went unnoticed for 50 seeds"
    assert failed.violation is not None and "acknowledged" in failed.violation, failed


def _trace(seed: int) -> tuple[object, ...]:
    r = run_seed(seed, SimOptions(duration_ms=1_500, settle_ms=3_000, transactions=True))
    return (r.ok, r.violation, r.steps, r.sim_ms, r.acks, r.produced, r.consumed,
            r.transactions, r.committed, tuple(r.faults))


def test_a_seed_replays_the_same_after_other_worlds_ran_in_the_process() -> None:
    """Nothing of a world outlives it: the same seed, run first and again after other seeds
    in one process, takes the same steps and ends the same."""
    first = _trace(7)
    for other in (1, 2):
        _trace(other)
    assert _trace(7) == first
