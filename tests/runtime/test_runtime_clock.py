"""Clock tests."""

from __future__ import annotations

import time

import pytest

from wherry.runtime import Clock, ManualClock, SystemClock


def test_system_clock_tracks_real_time() -> None:
    clock = SystemClock()
    assert isinstance(clock, Clock)
    assert abs(clock.now_ms() - time.time() * 1000) < 1_000
    m1 = clock.monotonic_ms()
    time.sleep(0.02)
    m2 = clock.monotonic_ms()
    assert 15 <= m2 - m1 < 2_000
    assert isinstance(clock.now_ms(), int) and isinstance(m1, int)


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(1_700_000_000_000)
    assert isinstance(clock, Clock)
    assert clock.now_ms() == clock.monotonic_ms() == 1_700_000_000_000
    time.sleep(0.01)
    assert clock.now_ms() == 1_700_000_000_000
    assert clock.advance(250) == 1_700_000_000_250
    assert clock.now_ms() == clock.monotonic_ms() == 1_700_000_000_250
    clock.advance(0)
    assert clock.now_ms() == 1_700_000_000_250
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_manual_clock_separate_monotonic_origin() -> None:
    clock = ManualClock(1_000_000, monotonic_start_ms=5)
    assert clock.monotonic_ms() == 5
    clock.advance(10)
    assert clock.now_ms() == 1_000_010
    assert clock.monotonic_ms() == 15
