"""The purgatory ticker: each source advanced on its own clock, then the earliest wait."""

from __future__ import annotations

import asyncio

from wherry.runtime.ticker import PurgatoryTicker


def test_a_tick_advances_each_source_on_its_own_clock_and_returns_the_earliest_wait() -> None:
    wait_ms = 1_000

    class Source:
        def __init__(self, nxt: int | None) -> None:
            self.nxt = nxt
            self.advanced: list[int] = []

        def advance_clock(self, now_ms: int) -> None:
            self.advanced.append(now_ms)

        def next_expiration_ms(self) -> int | None:
            return self.nxt

    ticker = PurgatoryTicker()
    a, b = Source(100 + wait_ms), Source(None)
    ticker.add(a, lambda: 100)
    ticker.add(b, lambda: 7)
    assert ticker.tick() == wait_ms
    assert a.advanced == [100] and b.advanced == [7]


def test_a_wake_cuts_the_sleep_short() -> None:
    class Source:
        def __init__(self) -> None:
            self.ticks = 0

        def advance_clock(self, now_ms: int) -> None:
            self.ticks += 1

        def next_expiration_ms(self) -> int | None:
            return None  # nothing due: the ticker would sleep its longest

    async def main() -> None:
        ticker = PurgatoryTicker()
        src = Source()
        ticker.add(src, lambda: 0)
        task = asyncio.ensure_future(ticker.run())
        await asyncio.sleep(0.05)
        before = src.ticks
        ticker.wake()
        await asyncio.sleep(0.05)
        assert src.ticks == before + 1  # woken well before its 1 s sleep ended
        task.cancel()

    asyncio.run(main())
