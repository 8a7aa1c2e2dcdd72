"""The log cleaner's scheduled threads, `kafka-log-cleaner-thread-<n>` (Kafka's
CleanerThread): `log.cleaner.threads` of them, each running a cleaning round every
`log.cleaner.backoff.ms`. Changed live as Kafka does: all stopped, then the new number started
with the new settings (a round in progress finishes; the cleaner cleans one log at a time).
`log.cleaner.dedupe.buffer.size` applies from the next cleaning on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wherry.log.cleaner import LogCleaner
    from wherry.runtime.scheduler import Scheduler

log = logging.getLogger(__name__)

__all__ = ["THREAD_NAME", "reconfigure", "running", "start"]

THREAD_NAME = "kafka-log-cleaner-thread-"
_THREADS, _BACKOFF = "log.cleaner.threads", "log.cleaner.backoff.ms"
_DEDUPE = "log.cleaner.dedupe.buffer.size"


def running(scheduler: Scheduler) -> list[str]:
    """The names of the cleaner threads scheduled."""
    return sorted(n for n in scheduler.names if n.startswith(THREAD_NAME))


def start(scheduler: Scheduler, cleaner: LogCleaner, now_ms: Callable[[], int]) -> None:
    """Schedule the cleaner's threads as its config says."""
    backoff = max(1, cleaner.config.backoff_ms)
    for i in range(cleaner.config.threads):
        scheduler.schedule(
            f"{THREAD_NAME}{i}",
            lambda: cleaner.clean_all(now_ms(), max_rounds=10),
            period_ms=backoff,
            delay_ms=backoff,
            executor=True,
        )


async def reconfigure(
    scheduler: Scheduler,
    cleaner: LogCleaner | None,
    props: Mapping[str, str],
    now_ms: Callable[[], int],
) -> None:
    """Apply `log.cleaner.threads` / `log.cleaner.backoff.ms` of the configuration in force
    (`props`, static ones included): the threads restarted when either changed."""
    if cleaner is None or scheduler.is_shut_down:
        return
    try:
        threads = int(props.get(_THREADS, "1"))  # Kafka's defaults when none is set
        backoff = int(props.get(_BACKOFF, "15000"))
        dedupe = int(props.get(_DEDUPE, str(128 * 1024 * 1024)))
    except ValueError:
        log.error("Ignoring log cleaner settings %s=%s, %s=%s",
                  _THREADS, props.get(_THREADS), _BACKOFF, props.get(_BACKOFF))
        return
    if dedupe != cleaner.config.dedupe_buffer_size:  # from the next cleaning on
        cleaner.config = replace(cleaner.config, dedupe_buffer_size=dedupe)
    if (threads, backoff) == (cleaner.config.threads, cleaner.config.backoff_ms):
        return
    for name in running(scheduler):
        if (task := scheduler.get(name)) is not None:
            task.cancel()
            await task.wait()
    cleaner.config = replace(cleaner.config, threads=threads, backoff_ms=backoff)
    start(scheduler, cleaner, now_ms)
    log.info("Log cleaner reconfigured: %d thread(s), backoff %d ms", threads, backoff)
