"""The controlled-shutdown attempts `wherry server` and the simulated brokers share
(`replication/controlled_shutdown.py`): retried on an unreachable controller, an error or
partitions still led, `max_retries` attempts in all, `retry_backoff_ms` apart."""

from __future__ import annotations

import asyncio
import logging

import pytest
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.replication.controlled_shutdown import (
    ControlledShutdown,
    ControlledShutdownSettings,
    Outcome,
)

TP = TopicPartition("t", 0)


def run(answers: list[Outcome | None], max_retries: int = 3) -> tuple[bool, int, list[float]]:
    slept: list[float] = []
    pending = list(answers)

    async def ask() -> Outcome | None:
        return pending.pop(0)

    async def sleep(s: float) -> None:
        slept.append(s)

    cs = ControlledShutdown(
        1,
        ControlledShutdownSettings(max_retries=max_retries, retry_backoff_ms=250),
        ask=ask,
        led_partitions=lambda: [TP],
        sleep=sleep,
    )
    ok = asyncio.run(cs.run())
    return ok, cs.attempts, slept


def test_succeeds_once_nothing_is_left() -> None:
    ok, attempts, slept = run([None, (ErrorCode.none, [TP]), (ErrorCode.none, [])])
    assert (ok, attempts, slept) == (True, 3, [0.25, 0.25])


def test_gives_up_after_its_attempts_naming_what_it_still_leads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        ok, attempts, slept = run([(ErrorCode.not_controller, []), (ErrorCode.none, [TP])], 2)
    assert (ok, attempts, slept) == (False, 2, [0.25])
    assert "failed after 2 attempt(s)" in caplog.text and "t-0" in caplog.text
