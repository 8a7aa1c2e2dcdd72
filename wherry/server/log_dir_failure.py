"""What a broker does when a log dir fails (KIP-112), beyond the replica node's part.

* `notify_controller`: Kafka's `propagateLogDirEvent`, a sequential
  `/log_dir_event_notification/log_dir_event_<seq>` node naming this broker; the controller
  watches the path and asks the broker (LeaderAndIsr) which of its replicas are offline.
* `halt`: every log dir of the broker failed; as Kafka's broker, it logs one line and exits
  at once (status 1): nothing it could still do would be durable.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from wherry.coordination import paths
from wherry.coordination.store import MetadataStore

__all__ = ["LogDirEventReporter", "halt"]

log = logging.getLogger(__name__)


class LogDirEventReporter:
    """Writes a log dir failure notification per failed dir (each in a task of its own)."""

    def __init__(self, broker_id: int, store: Callable[[], MetadataStore]) -> None:
        self.broker_id = broker_id
        self.store = store
        self._tasks: set[asyncio.Task[None]] = set()

    def report(self, dir: Path) -> None:
        task = asyncio.get_running_loop().create_task(
            self.notify_controller(dir), name=f"log-dir-event-{self.broker_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def notify_controller(self, dir: Path) -> None:
        try:
            await self.store().create(
                paths.LOG_DIR_EVENT_PREFIX,
                paths.encode_log_dir_event(self.broker_id),
                sequential=True,
                make_parents=True,
            )
        except Exception as e:  # the store's own failures are reported where they happen
            log.error("could not tell the controller that log dir %s failed: %s", dir, e)
            return
        log.info("told the controller that log dir %s of broker %d failed", dir, self.broker_id)


def halt(message: str) -> None:
    """Log `message` (one line) and exit the process with status 1 without cleanup."""
    log.error("%s", message)
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:
            pass
    sys.stderr.flush()
    os._exit(1)
