"""A broker's controlled shutdown attempts (Kafka's KafkaServer.controlledShutdown),
shared by `wherry server` (`server/controlled_shutdown.py`) and the simulated brokers
(`sim/node.py`); each brings its own way of asking the controller.

`controlled.shutdown.max.retries` attempts are made in all (Kafka counts its "retries" that
way), `controlled.shutdown.retry.backoff.ms` apart; an attempt fails on an error answer, on
partitions still led, or when the controller cannot be asked (no controller known, not
reachable: `ask` returns None). When the attempts run out a WARNING names the partitions the
broker still leads, and the broker stops anyway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition

__all__ = ["Ask", "ControlledShutdown", "ControlledShutdownSettings", "Outcome"]

log = logging.getLogger(__name__)

Outcome = tuple[ErrorCode, list[TopicPartition]]
"""The controller's answer: an error code and the partitions the broker still leads."""

Ask = Callable[[], Awaitable[Outcome | None]]
"""One ControlledShutdown request to the controller; None when it could not be asked."""


@dataclass(frozen=True, slots=True)
class ControlledShutdownSettings:
    enable: bool = True
    max_retries: int = 3  # attempts in all
    retry_backoff_ms: int = 5_000
    request_timeout_ms: int = 30_000  # controller.socket.timeout.ms


class ControlledShutdown:
    """The attempts of one broker's controlled shutdown: `ask` sends one request,
    `led_partitions()` names what the broker leads now (for the final warning)."""

    def __init__(
        self,
        broker_id: int,
        settings: ControlledShutdownSettings,
        *,
        ask: Ask,
        led_partitions: Callable[[], Collection[TopicPartition]],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self._ask = ask
        self._led_partitions = led_partitions
        self._sleep = sleep
        self._prefix = f"[Broker id={broker_id}]"
        self.attempts = 0

    async def run(self) -> bool:
        """Attempt until the controller has moved every leadership or the attempts run out;
        True on success."""
        started = time.monotonic()
        remaining: list[TopicPartition] | None = None
        for attempt in range(1, self.settings.max_retries + 1):
            self.attempts = attempt
            outcome = await self._ask()
            if outcome is not None:
                error, remaining = outcome
                if error == ErrorCode.none and not remaining:
                    log.info(
                        "%s controlled shutdown succeeded after %d attempt(s) in %d ms",
                        self._prefix,
                        attempt,
                        (time.monotonic() - started) * 1000,
                    )
                    return True
                if error != ErrorCode.none:
                    log.info(
                        "%s controlled shutdown attempt %d: error from the controller: %s",
                        self._prefix,
                        attempt,
                        error.name,
                    )
                else:
                    log.info(
                        "%s controlled shutdown attempt %d: remaining partitions to move: %s",
                        self._prefix,
                        attempt,
                        _names(remaining),
                    )
            if attempt < self.settings.max_retries:
                await self._sleep(self.settings.retry_backoff_ms / 1000)
                log.info(
                    "%s retrying controlled shutdown after the previous attempt failed",
                    self._prefix,
                )
        led = sorted(set(self._led_partitions()) | set(remaining or ()))
        log.warning(
            "%s controlled shutdown failed after %d attempt(s); proceeding to an unclean "
            "shutdown while still leading %s",
            self._prefix,
            self.settings.max_retries,
            _names(led) if led else "no partitions",
        )
        return False


def _names(partitions: Collection[TopicPartition]) -> str:
    return ", ".join(str(tp) for tp in sorted(partitions))
