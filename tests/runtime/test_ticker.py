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


def test_an_earlier_deadline_wakes_only_when_it_comes_before_the_sleep_ends() -> None:
    class Source:
        def __init__(self) -> None:
            self.ticks = 0
            self.nxt: int | None = None

        def advance_clock(self, now_ms: int) -> None:
            self.ticks += 1
            if self.nxt is not None and self.nxt <= now_ms:
                self.nxt = None  # expired

        def next_expiration_ms(self) -> int | None:
            return self.nxt

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def now_ms() -> int:
            return int(loop.time() * 1000)

        ticker = PurgatoryTicker()
        src = Source()
        ticker.add(src, now_ms)
        task = asyncio.ensure_future(ticker.run())
        await asyncio.sleep(0.05)  # asleep for up to 1 s: nothing due
        before = src.ticks
        src.nxt = now_ms() + 30_000  # a session expiry far after the sleep ends
        ticker.earlier_deadline()
        await asyncio.sleep(0.05)
        assert src.ticks == before  # not woken for it
        src.nxt = now_ms() + 100  # due before the sleep ends
        ticker.earlier_deadline()
        await asyncio.sleep(0.02)
        assert src.ticks == before + 1  # woken at once, then asleep until the deadline
        await asyncio.sleep(0.3)
        assert src.nxt is None  # advanced on time, not a second later
        task.cancel()

    asyncio.run(main())
