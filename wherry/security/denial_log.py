"""Authorization denials as log lines that cannot flood: the first denial of a (principal,
host, operation, resource) is logged at once; identical ones within the next interval are
only counted, and the first one after it is logged with that count. A client that re-asks
in a tight loop thus costs a line per interval, not a line per request.

I/O-free apart from the logger it is given; time comes from the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

DENIAL_LOG_INTERVAL_MS = 10_000
_MAX_KEYS = 10_000  # past this, keys idle for an interval are dropped

DenialKey = tuple[str, str, str, str, str, str]  # principal, host, op, type, pattern, name


@dataclass(slots=True)
class _Window:
    logged_at_ms: int
    suppressed: int = 0


class DenialLog:
    """Rate-limited INFO lines for denials on `logger` (Kafka's authorizer-log format)."""

    def __init__(
        self,
        logger: logging.Logger,
        now_ms: Callable[[], int],
        interval_ms: int = DENIAL_LOG_INTERVAL_MS,
    ) -> None:
        self.logger = logger
        self.now_ms = now_ms
        self.interval_ms = interval_ms
        self._windows: dict[DenialKey, _Window] = {}

    def denied(self, key: DenialKey) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        now = self.now_ms()
        window = self._windows.get(key)
        if window is not None and now - window.logged_at_ms < self.interval_ms:
            window.suppressed += 1
            return
        suppressed = 0 if window is None else window.suppressed
        if window is None and len(self._windows) >= _MAX_KEYS:
            self._forget_idle(now)
        self._windows[key] = _Window(now)
        principal, host, op, rtype, pattern, name = key
        line = "Principal = %s is Denied Operation = %s from host = %s on resource = %s:%s:%s"
        if suppressed:
            self.logger.info(
                line + " (%d identical denials not logged in the last %d s)",
                principal, op, host, rtype, pattern, name, suppressed,
                (now - (window.logged_at_ms if window else now)) // 1000,
            )
        else:
            self.logger.info(line, principal, op, host, rtype, pattern, name)

    def _forget_idle(self, now: int) -> None:
        idle = [k for k, w in self._windows.items() if now - w.logged_at_ms >= self.interval_ms]
        for k in idle:
            del self._windows[k]
        if len(self._windows) >= _MAX_KEYS:  # all busy: start over rather than grow
            self._windows.clear()
