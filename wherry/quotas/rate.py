"""A rate over a `SampledStat`, as Kafka measures quotas: a value recorded into windows of
`window_ms`, of which the last `samples` are kept, measured per second over the time they span
(at least one window: Kafka's `SimpleRate`). Samples older than `samples * window_ms` are reset
before every measure. Pure, time passed in.

Kafka's client quotas divide by a span padded to `samples - 1` windows instead (`Rate`): a new
or idle client may then send ten windows' worth at once, and each time that burst's sample
ages out another one follows, so a client sending as fast as it may swings around its quota
in 11-second waves (from about half to one and a half times it over 10 s). Measured over the
real span, the same throttle formula holds such a client within a few percent of its quota
over any 10 s.
"""

from __future__ import annotations

from wherry.common.record import record

__all__ = ["SampledRate"]


@record(slots=True)
class _Sample:
    """What was recorded in one window, from `start_ms`."""

    start_ms: int
    value: float = 0.0


class SampledRate:
    """A rate per second: `record` adds, `measure` reads, `window_size_ms` is the span the
    measure divides by."""

    def __init__(self, samples: int, window_ms: int) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError("a sampled rate needs at least one sample of at least 1 ms")
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
            self._current = 0
        sample = self._samples[self._current]
        if now_ms - sample.start_ms >= self.window_ms:  # complete: on to the next sample
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._samples):
                self._samples.append(_Sample(now_ms))
            else:
                self._samples[self._current] = _Sample(now_ms)
            sample = self._samples[self._current]
        sample.value += value

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples * self.window_ms
        for i, s in enumerate(self._samples):
            if now_ms - s.start_ms >= expire_ms:
                self._samples[i] = _Sample(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """The span of the kept samples, at least one window."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        return max(now_ms - oldest, self.window_ms)

    def total(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def measure(self, now_ms: int) -> float:
        """The recorded value per second."""
        size = self.window_size_ms(now_ms)
        return self.total(now_ms) * 1000.0 / size
