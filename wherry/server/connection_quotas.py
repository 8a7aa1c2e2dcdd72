"""Kafka's ConnectionQuotas as plain accounting: connections per address, per listener and
on the broker, and the rate new connections are created at. Pure: the network layer asks and
tells (`admission`, `add`, `remove`), time is passed in.

What Kafka does with the answers, and so the network layer:
- over `max.connections.per.ip` (or its override for the address) a new connection is closed
  at once, with `Rejected connection from /ip, address already has the configured maximum
  of N connections.`;
- at `max.connections` (broker-wide) or a listener's `listener.name.<l>.max.connections`, a
  new connection waits until a slot frees (Kafka's acceptor stops accepting); the
  inter-broker listener may go over the broker-wide limit, and then the least recently
  active connection of another listener is closed (`over_broker_limit`);
- over `max.connection.creation.rate` (broker-wide, the inter-broker listener excepted) or
  a listener's own rate, a new connection waits for the throttle time the rate gives, as
  Kafka's acceptor does: the rate is measured over `quota.window.num` windows of
  `quota.window.size.seconds`, and the throttle is `(rate - quota) / quota * window`.
"""

from __future__ import annotations

import collections
import math

from wherry.server.connection_limits import INT_MAX, ConnectionLimits


class SampledRate:
    """Events per second over the last `samples` windows of `window_ms` (Kafka's Rate with
    SampledStat): the elapsed time counts at least `samples - 1` whole windows."""

    __slots__ = ("_samples", "samples", "window_ms")

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: collections.deque[list[int]] = collections.deque()  # [start, count]

    def _purge(self, now_ms: int) -> None:
        horizon = now_ms - self.samples * self.window_ms
        while self._samples and self._samples[0][0] + self.window_ms <= horizon:
            self._samples.popleft()

    def record(self, now_ms: int, n: int = 1) -> None:
        self._purge(now_ms)
        last = self._samples[-1] if self._samples else None
        if last is None or now_ms >= last[0] + self.window_ms:
            self._samples.append([now_ms, n])
            while len(self._samples) > self.samples:
                self._samples.popleft()
        else:
            last[1] += n

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        oldest = self._samples[0][0] if self._samples else now_ms
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def rate(self, now_ms: int) -> float:
        window = self.window_size_ms(now_ms)  # (samples out of the window dropped first)
        return sum(c for _, c in self._samples) * 1000.0 / window

    def throttle_ms(self, quota: float, now_ms: int) -> int:
        """How long to wait before the rate is back within `quota` (0: it is)."""
        if quota <= 0:
            return self.samples * self.window_ms
        value = self.rate(now_ms)
        if value <= quota:
            return 0
        ms = math.ceil((value - quota) / quota * self.window_size_ms(now_ms))
        return min(ms, self.samples * self.window_ms)


class ConnectionQuotas:
    """Counts and limits of one broker's client connections."""

    def __init__(self, limits: ConnectionLimits, inter_broker_listener: str | None = None,
                 resolved_overrides: dict[str, int] | None = None) -> None:
        self.limits = limits
        self.inter_broker_listener = inter_broker_listener
        # per-IP overrides by address (host names resolved by the caller)
        self.overrides = dict(limits.max_connections_per_ip_overrides
                              if resolved_overrides is None else resolved_overrides)
        self.by_ip: dict[str, int] = {}
        self.by_listener: dict[str, int] = collections.defaultdict(int)
        self.total = 0
        window_ms = limits.quota_window_size_seconds * 1000
        self._broker_rate = SampledRate(limits.quota_window_num, window_ms)
        self._listener_rates: dict[str, SampledRate] = {}

    def max_for_ip(self, ip: str) -> int:
        return self.overrides.get(ip, self.limits.max_connections_per_ip)

    def ip_limit_reached(self, ip: str) -> int | None:
        """The limit when `ip` already has as many connections as it may have; else None."""
        limit = self.max_for_ip(ip)
        if limit >= INT_MAX:
            return None
        return limit if self.by_ip.get(ip, 0) >= limit else None

    def _protected(self, listener: str) -> bool:
        return listener == self.inter_broker_listener

    def slot_available(self, listener: str) -> bool:
        """Whether `listener` may take one more connection now (its own limit, and the
        broker's unless it is the inter-broker listener)."""
        limit = self.limits.listener_max_connections.get(listener, INT_MAX)
        if self.by_listener[listener] >= limit:
            return False
        return self._protected(listener) or self.total < self.limits.max_connections

    def over_broker_limit(self) -> bool:
        """More connections than `max.connections` (the inter-broker listener went over):
        one of another listener's must go."""
        return self.total > self.limits.max_connections

    def record_creation(self, listener: str, now_ms: int) -> int:
        """Count a new connection on `listener` in the creation rates; the time it must wait
        before it is served (0: none), the larger of the listener's and the broker's."""
        throttle = 0
        listener_quota = self.limits.listener_max_connection_creation_rate.get(listener, INT_MAX)
        if listener_quota < INT_MAX:
            rate = self._listener_rates.get(listener)
            if rate is None:
                rate = self._listener_rates[listener] = SampledRate(
                    self.limits.quota_window_num, self.limits.quota_window_size_seconds * 1000
                )
            rate.record(now_ms)
            throttle = rate.throttle_ms(listener_quota, now_ms)
        broker_quota = self.limits.max_connection_creation_rate
        if broker_quota < INT_MAX and not self._protected(listener):
            self._broker_rate.record(now_ms)
            throttle = max(throttle, self._broker_rate.throttle_ms(broker_quota, now_ms))
        return throttle

    def add(self, listener: str, ip: str) -> None:
        self.by_ip[ip] = self.by_ip.get(ip, 0) + 1
        self.by_listener[listener] += 1
        self.total += 1

    def remove(self, listener: str, ip: str) -> None:
        n = self.by_ip.get(ip, 0) - 1
        if n > 0:
            self.by_ip[ip] = n
        else:
            self.by_ip.pop(ip, None)
        self.by_listener[listener] = max(0, self.by_listener[listener] - 1)
        self.total = max(0, self.total - 1)
