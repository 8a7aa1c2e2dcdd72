"""Timing wheel / timer tests, in the spirit of Kafka's TimingWheel and SystemTimer tests."""

from __future__ import annotations

import logging
import random

import pytest

from wherry.purgatory import CallbackTimerTask, Timer


class Recorder:
    """Creates tasks that record (task id, time fired) into a shared list."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.fired: list[tuple[int, int]] = []

    def task(self, ident: int, delay_ms: int) -> CallbackTimerTask:
        return CallbackTimerTask(
            delay_ms, lambda: self.fired.append((ident, self.timer.current_ms))
        )

    def ids(self) -> list[int]:
        return [i for i, _ in self.fired]


def drive_by_next_expiration(timer: Timer, limit: int = 100_000) -> int:
    """Advance only to the times the timer asks for; return the number of wake-ups."""
    wakeups = 0
    while (nxt := timer.next_expiration_ms()) is not None:
        assert nxt > timer.current_ms
        timer.advance_clock(nxt)
        wakeups += 1
        assert wakeups < limit
    return wakeups


DEADLINES = [1, 2, 19, 20, 21, 399, 400, 401, 7_999, 8_000, 8_001, 123_456, 10**6, 10**7]


@pytest.mark.parametrize("deadline_ms", DEADLINES)
def test_expires_exactly_at_deadline_across_levels(deadline_ms: int) -> None:
    timer = Timer(tick_ms=1, wheel_size=20, start_ms=0)
    rec = Recorder(timer)
    assert timer.add(rec.task(1, deadline_ms)) is True
    assert timer.size == 1
    assert timer.advance_clock(deadline_ms - 1) == []
    assert rec.fired == []
    assert timer.size == 1
    fired = timer.advance_clock(deadline_ms)
    assert len(fired) == 1
    assert rec.fired == [(1, deadline_ms)]
    assert timer.size == 0
    assert timer.next_expiration_ms() is None


@pytest.mark.parametrize("deadline_ms", DEADLINES)
def test_one_big_jump_fires_once(deadline_ms: int) -> None:
    timer = Timer(start_ms=5)
    rec = Recorder(timer)
    timer.add(rec.task(1, deadline_ms))
    timer.advance_clock(5 + deadline_ms + 10**7)
    assert rec.ids() == [1]
    timer.advance_clock(5 + deadline_ms + 2 * 10**7)
    assert rec.ids() == [1]


def test_overflow_wheels_created_lazily() -> None:
    timer = Timer(tick_ms=1, wheel_size=20)
    assert timer.stats().levels == 1
    timer.add(CallbackTimerTask(19, lambda: None))
    assert timer.stats().levels == 1
    timer.add(CallbackTimerTask(20, lambda: None))
    assert timer.stats().levels == 2
    # intervals: 20, 400, 8_000, 160_000, 3_200_000, 64_000_000
    timer.add(CallbackTimerTask(10**7, lambda: None))
    assert timer.stats().levels == 6


def test_driving_by_next_expiration_hits_every_deadline_exactly() -> None:
    rng = random.Random(7)
    start = 1_000_003
    timer = Timer(tick_ms=1, wheel_size=20, start_ms=start)
    rec = Recorder(timer)
    deadlines = {
        i: rng.choice([rng.randint(1, 50), rng.randint(1, 10**4), rng.randint(1, 10**7)])
        for i in range(500)
    }
    for i, d in deadlines.items():
        timer.add(rec.task(i, d))
    wakeups = drive_by_next_expiration(timer)
    assert sorted(rec.ids()) == sorted(deadlines)
    for i, at in rec.fired:
        assert at == start + deadlines[i]
    # fired in deadline order
    assert [at for _, at in rec.fired] == sorted(at for _, at in rec.fired)
    # wake-ups are bounded by deadlines plus cascades, not by elapsed milliseconds (10^7)
    assert wakeups <= len(deadlines) + 6 * 20 * 6


def test_advance_with_nothing_due_does_no_bucket_work() -> None:
    timer = Timer()
    timer.add(CallbackTimerTask(10**7, lambda: None))
    before = timer.stats()
    for t in range(1, 2_000):
        assert timer.advance_clock(t) == []
    after = timer.stats()
    assert after.buckets_flushed == before.buckets_flushed == 0
    assert after.cascaded == 0


def test_cancel_before_expiry() -> None:
    timer = Timer()
    rec = Recorder(timer)
    tasks = [rec.task(i, 10 + i) for i in range(10)]
    for t in tasks:
        timer.add(t)
    for t in tasks[::2]:
        t.cancel()
        t.cancel()  # idempotent
        assert not t.is_scheduled
    assert timer.size == 5
    timer.advance_clock(100)
    assert rec.ids() == [1, 3, 5, 7, 9]
    assert timer.size == 0
    tasks[1].cancel()  # after firing: no-op
    assert timer.size == 0


def test_cancel_all_makes_next_expiration_none() -> None:
    timer = Timer()
    tasks = [CallbackTimerTask(d, lambda: None) for d in (5, 500, 50_000)]
    for t in tasks:
        timer.add(t)
    assert timer.next_expiration_ms() == 5
    tasks[0].cancel()
    nxt = timer.next_expiration_ms()
    assert nxt is not None and nxt <= 500
    for t in tasks:
        t.cancel()
    assert timer.next_expiration_ms() is None
    assert timer.size == 0


def test_next_expiration_is_lower_bound_of_deadlines() -> None:
    timer = Timer(start_ms=0)
    assert timer.next_expiration_ms() is None
    timer.add(CallbackTimerTask(12_345, lambda: None))
    nxt = timer.next_expiration_ms()
    assert nxt is not None and 0 < nxt <= 12_345
    timer.add(CallbackTimerTask(3, lambda: None))
    assert timer.next_expiration_ms() == 3


def test_already_due_tasks_run_on_add() -> None:
    timer = Timer(start_ms=100)
    rec = Recorder(timer)
    assert timer.add(rec.task(1, 0)) is False
    assert timer.add(rec.task(2, -5)) is False
    assert rec.ids() == [1, 2]
    assert timer.size == 0
    # Deadline relative to a caller's now_ms that lags the timer: already passed.
    timer.advance_clock(200)
    assert timer.add(rec.task(3, 50), now_ms=120) is False
    assert rec.ids() == [1, 2, 3]


def test_add_relative_to_callers_now_when_timer_lags() -> None:
    timer = Timer(start_ms=0)
    rec = Recorder(timer)
    assert timer.add(rec.task(1, 100), now_ms=1_000_000) is True
    assert rec.fired == []
    timer.advance_clock(1_000_099)
    assert rec.fired == []
    timer.advance_clock(1_000_100)
    assert rec.fired == [(1, 1_000_100)]


def test_readding_a_task_moves_it() -> None:
    timer = Timer()
    rec = Recorder(timer)
    t = rec.task(1, 10)
    timer.add(t)
    assert t.deadline_ms == 10
    t.delay_ms = 50
    timer.add(t)
    assert timer.size == 1
    assert t.deadline_ms == 50
    timer.advance_clock(10)
    assert rec.fired == []
    timer.advance_clock(50)
    assert rec.fired == [(1, 50)]


def test_cancelled_task_can_be_added_again() -> None:
    timer = Timer()
    rec = Recorder(timer)
    t = rec.task(1, 10)
    timer.add(t)
    t.cancel()
    timer.add(t)
    timer.advance_clock(10)
    assert rec.ids() == [1]


@pytest.mark.parametrize("tick_ms", [2, 3, 10])
def test_coarse_tick_never_early_at_most_one_tick_late(tick_ms: int) -> None:
    timer = Timer(tick_ms=tick_ms, wheel_size=8, start_ms=7)
    rec = Recorder(timer)
    deadlines = {i: 7 + d for i, d in enumerate(range(1, 300, 7))}
    for i, d in deadlines.items():
        timer.add(rec.task(i, d - 7))
    for t in range(8, 400):
        timer.advance_clock(t)
        fired = dict(rec.fired)
        for i, d in deadlines.items():
            if i in fired:
                assert fired[i] >= d
            if t >= d + tick_ms - 1:
                assert i in fired, (i, d, t)
    assert len(rec.fired) == len(deadlines)


def test_task_exception_is_logged_and_others_still_fire(caplog: pytest.LogCaptureFixture) -> None:
    timer = Timer()
    rec = Recorder(timer)

    def boom() -> None:
        raise RuntimeError("boom")

    timer.add(rec.task(1, 5))
    timer.add(CallbackTimerTask(5, boom))
    timer.add(rec.task(2, 5))
    with caplog.at_level(logging.ERROR, logger="wherry.purgatory.timing_wheel"):
        fired = timer.advance_clock(5)
    assert len(fired) == 3
    assert rec.ids() == [1, 2]
    assert "boom" in caplog.text


def test_task_may_add_and_cancel_from_run() -> None:
    timer = Timer()
    rec = Recorder(timer)
    victim = rec.task(99, 10)  # same bucket as the canceller, later in FIFO order

    def chain() -> None:
        rec.fired.append((0, timer.current_ms))
        victim.cancel()
        timer.add(rec.task(1, 0))  # already due: runs inside this add
        timer.add(rec.task(2, 5))

    timer.add(CallbackTimerTask(10, chain))
    timer.add(victim)
    timer.advance_clock(12)
    assert rec.fired == [(0, 12), (1, 12)]
    timer.advance_clock(16)
    assert rec.fired == [(0, 12), (1, 12)]
    timer.advance_clock(17)
    assert rec.fired == [(0, 12), (1, 12), (2, 17)]


def test_clear_unschedules_without_running() -> None:
    timer = Timer()
    rec = Recorder(timer)
    tasks = [rec.task(i, 10**i) for i in range(7)]
    for t in tasks:
        timer.add(t)
    removed = timer.clear()
    assert {id(t) for t in removed} == {id(t) for t in tasks}
    assert timer.size == 0
    assert timer.next_expiration_ms() is None
    timer.advance_clock(10**8)
    assert rec.fired == []


def test_invalid_parameters() -> None:
    with pytest.raises(ValueError):
        Timer(tick_ms=0)
    with pytest.raises(ValueError):
        Timer(wheel_size=1)


def test_clock_does_not_go_backwards() -> None:
    timer = Timer(start_ms=1_000)
    rec = Recorder(timer)
    timer.add(rec.task(1, 10))
    assert timer.advance_clock(500) == []
    assert timer.current_ms == 1_000
    timer.advance_clock(1_010)
    assert rec.ids() == [1]


def test_100k_added_and_cancelled_is_cheap() -> None:
    n = 100_000
    timer = Timer(start_ms=0)
    rng = random.Random(1)
    tasks = [CallbackTimerTask(rng.randint(1, 10**7), lambda: None) for _ in range(n)]
    for t in tasks:
        timer.add(t)
    assert timer.size == n
    stats = timer.stats()
    # At most one queued bucket per bucket slot: the heap does not grow with the task count.
    assert stats.heap_len <= stats.levels * timer.wheel_size
    for t in tasks:
        t.cancel()
    assert timer.size == 0
    assert timer.next_expiration_ms() is None
    assert timer.stats().heap_len == 0
    fired = timer.advance_clock(2 * 10**7)
    after = timer.stats()
    assert fired == []
    assert after.run == 0
    assert after.cascaded == 0  # cancelled entries left their buckets immediately


def test_100k_expirations_do_bounded_work_per_task() -> None:
    n = 100_000
    timer = Timer(start_ms=0)
    rng = random.Random(2)
    count = [0]

    def bump() -> None:
        count[0] += 1

    for _ in range(n):
        timer.add(CallbackTimerTask(rng.randint(1, 10**7), bump))
    levels = timer.stats().levels
    # Advance in coarse steps, like a broker waking up every 50 ms.
    for t in range(0, 10**7 + 50, 50_000):
        timer.advance_clock(t)
    timer.advance_clock(10**7 + 1)
    stats = timer.stats()
    assert count[0] == n
    assert timer.size == 0
    assert stats.cascaded <= n * (levels - 1)  # each entry moves down at most once per level
    # No cancellations, so every flushed bucket held at least one entry that then ran or moved.
    assert stats.buckets_flushed <= stats.run + stats.cascaded
