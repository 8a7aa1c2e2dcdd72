"""One kind of client quota on one broker (Kafka's ClientQuotaManager; with `bounded`, its
ClientRequestQuotaManager): the quotas of every entity, a sampled rate per metric tags, and
the throttle time of a request that goes over. Pure, time passed in.

Nothing is recorded while no entity has a quota of this kind (as in Kafka). A recorded value
that takes the rate above the bound throttles the request for

    (rate - bound) / bound * window size

milliseconds, the window size being the span the rate is measured over (Kafka's
QuotaUtils.throttleTime); the request-time quota caps it at one window
(`quota.window.size.seconds`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from wherry.quotas.entities import MetricTags, QuotaEntity, metric_tags, quota_for_tags
from wherry.quotas.rate import SampledRate

__all__ = [
    "DEFAULT_WINDOW_NUM",
    "DEFAULT_WINDOW_SIZE_SECONDS",
    "ClientQuotaManager",
    "QuotaType",
    "TagStats",
]

DEFAULT_WINDOW_NUM = 11  # quota.window.num
DEFAULT_WINDOW_SIZE_SECONDS = 1  # quota.window.size.seconds
INACTIVE_EXPIRY_MS = 3_600_000  # Kafka drops a client's sensors after an idle hour


class QuotaType(enum.Enum):
    """The kinds of client quota, by their config key."""

    PRODUCE = "producer_byte_rate"
    FETCH = "consumer_byte_rate"
    REQUEST = "request_percentage"

    @property
    def group(self) -> str:
        """Kafka's metric group (`kafka.server:type=Produce|Fetch|Request`)."""
        return {"producer_byte_rate": "Produce", "consumer_byte_rate": "Fetch",
                "request_percentage": "Request"}[self.value]


@dataclass(slots=True)
class TagStats:
    """What one metric-tags pair recorded: its rate, and its throttle times (Kafka's
    `throttle-time` sensor: the average throttle of the requests throttled in the sampled
    window)."""

    rate: SampledRate
    throttle_sum: SampledRate
    throttle_count: SampledRate
    last_ms: int
    throttled_total: int = 0  # requests throttled, ever
    throttle_ms_total: float = 0.0


class ClientQuotaManager:
    def __init__(
        self,
        quota_type: QuotaType,
        *,
        samples: int = DEFAULT_WINDOW_NUM,
        window_ms: int = DEFAULT_WINDOW_SIZE_SECONDS * 1000,
    ) -> None:
        self.quota_type = quota_type
        self.samples = samples
        self.window_ms = window_ms
        self.quotas: dict[QuotaEntity, float] = {}
        self.stats: dict[MetricTags, TagStats] = {}
        self._next_expiry_ms = 0

    # -- the quotas ----------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return bool(self.quotas)

    def update_quota(self, entity: QuotaEntity, bound: float | None) -> None:
        """Set (None: remove) an entity's quota; the rates recorded so far stay."""
        if bound is None:
            self.quotas.pop(entity, None)
        else:
            self.quotas[entity] = float(bound)

    def tags(self, user: str, client_id: str) -> MetricTags:
        return metric_tags(self.quotas, user, client_id)

    def bound(self, user: str, client_id: str) -> float | None:
        """The quota bounding `user` / `client_id` now (None: unlimited)."""
        if not self.quotas:
            return None
        return quota_for_tags(self.quotas, self.tags(user, client_id))

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """What one window may take at the bound (Kafka caps a consumer's fetch to it)."""
        bound = self.bound(user, client_id)
        return None if bound is None else bound * self.window_ms / 1000.0

    # -- recording -----------------------------------------------------------------------------
    def _stats(self, tags: MetricTags, now_ms: int) -> TagStats:
        st = self.stats.get(tags)
        if st is None:
            st = self.stats[tags] = TagStats(
                SampledRate(self.samples, self.window_ms),
                SampledRate(self.samples, self.window_ms),
                SampledRate(self.samples, self.window_ms),
                now_ms,
            )
        st.last_ms = now_ms
        return st

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record `value` (bytes, or request-time percentage) for the request; its throttle
        time in ms (0: within the quota). Nothing is recorded without any quota."""
        if not self.quotas:
            return 0
        self._expire(now_ms)
        tags = self.tags(user, client_id)
        st = self._stats(tags, now_ms)
        st.rate.record(value, now_ms)
        bound = quota_for_tags(self.quotas, tags)
        throttle_ms = 0
        if bound is not None:
            rate = st.rate.measure(now_ms)
            if rate > bound:
                throttle_ms = self.throttle_time_ms(rate, bound, st.rate.window_size_ms(now_ms))
        self._record_throttle(st, throttle_ms, now_ms)
        return throttle_ms

    def over_quota(self, user: str, client_id: str, now_ms: int) -> bool:
        """Whether the client's rate is above its quota now (before what it asks next)."""
        if not self.quotas:
            return False
        tags = self.tags(user, client_id)
        bound = quota_for_tags(self.quotas, tags)
        st = self.stats.get(tags)
        return bound is not None and st is not None and st.rate.measure(now_ms) > bound

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch answers without its records)."""
        if not self.quotas:
            return
        st = self.stats.get(self.tags(user, client_id))
        if st is not None:
            st.rate.record(-value, now_ms)

    def throttle_time_ms(self, rate: float, bound: float, window_size_ms: int) -> int:
        ms = float(window_size_ms) if bound <= 0 else (rate - bound) / bound * window_size_ms
        if self.quota_type is QuotaType.REQUEST:
            ms = min(ms, float(self.window_ms))
        return max(0, round(ms))

    def _record_throttle(self, st: TagStats, throttle_ms: int, now_ms: int) -> None:
        if throttle_ms > 0:  # Kafka's throttle-time sensor sees throttled requests only
            st.throttle_sum.record(throttle_ms, now_ms)
            st.throttle_count.record(1, now_ms)
            st.throttled_total += 1
            st.throttle_ms_total += throttle_ms

    def _expire(self, now_ms: int) -> None:
        if now_ms < self._next_expiry_ms:
            return
        self._next_expiry_ms = now_ms + 60_000
        for tags, st in list(self.stats.items()):
            if now_ms - st.last_ms >= INACTIVE_EXPIRY_MS:
                del self.stats[tags]

    # -- metrics -------------------------------------------------------------------------------
    def snapshot(self, now_ms: int) -> list[tuple[MetricTags, float, float]]:
        """(tags, rate per second, average throttle time in ms over the window) per tags."""
        out: list[tuple[MetricTags, float, float]] = []
        for tags, st in sorted(self.stats.items()):
            count = st.throttle_count.total(now_ms)
            avg = st.throttle_sum.total(now_ms) / count if count else 0.0
            out.append((tags, st.rate.measure(now_ms), avg))
        return out
