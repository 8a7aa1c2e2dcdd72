"""Property test: random add / cancel / advance sequences against a simple model."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from wherry.purgatory import CallbackTimerTask, Timer

delays = st.one_of(
    st.integers(-3, 40),
    st.integers(0, 2_000),
    st.integers(0, 200_000),
    st.integers(0, 10**7),
)
advances = st.one_of(st.integers(0, 30), st.integers(0, 5_000), st.integers(0, 3 * 10**6))
steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), delays),
        st.tuples(st.just("cancel"), st.integers(0, 10**6)),
        st.tuples(st.just("advance"), advances),
        st.tuples(st.just("next"), st.just(0)),
    ),
    max_size=80,
)


@dataclass
class Model:
    now_ms: int
    deadlines: dict[int, int] = field(default_factory=dict)
    cancelled: set[int] = field(default_factory=set)
    fired: dict[int, list[int]] = field(default_factory=dict)
    tasks: list[CallbackTimerTask] = field(default_factory=list)

    def pending(self) -> list[int]:
        return [i for i in self.deadlines if i not in self.cancelled and i not in self.fired]


def check(model: Model, timer: Timer) -> None:
    tick = timer.tick_ms
    for i, times in model.fired.items():
        assert len(times) == 1, f"task {i} fired {len(times)} times"
        assert i not in model.cancelled, f"cancelled task {i} fired"
        assert times[0] >= model.deadlines[i], "fired before its deadline"
    pending = model.pending()
    for i in pending:
        # once the clock is a tick past the deadline, the task must have fired
        assert model.now_ms < model.deadlines[i] + tick - 1, f"task {i} is late"
    assert timer.size == len(pending)
    nxt = timer.next_expiration_ms()
    if pending:
        assert nxt is not None
        assert nxt > model.now_ms
        earliest = min(-(-model.deadlines[i] // tick) * tick for i in pending)
        assert nxt <= earliest
    else:
        assert nxt is None


@settings(max_examples=300, deadline=None)
@given(
    tick_ms=st.integers(1, 7),
    wheel_size=st.integers(2, 25),
    start_ms=st.integers(0, 10**9),
    script=steps,
)
def test_random_add_cancel_advance(
    tick_ms: int, wheel_size: int, start_ms: int, script: list[tuple[str, int]]
) -> None:
    timer = Timer(tick_ms=tick_ms, wheel_size=wheel_size, start_ms=start_ms)
    model = Model(now_ms=start_ms)

    def make(i: int, delay_ms: int) -> CallbackTimerTask:
        def fire() -> None:
            model.fired.setdefault(i, []).append(model.now_ms)

        return CallbackTimerTask(delay_ms, fire)

    for op, arg in script:
        if op == "add":
            i = len(model.tasks)
            task = make(i, arg)
            model.tasks.append(task)
            model.deadlines[i] = model.now_ms + arg
            scheduled = timer.add(task)
            assert scheduled == (arg > 0)
        elif op == "cancel" and model.tasks:
            i = arg % len(model.tasks)
            model.tasks[i].cancel()
            if i not in model.fired:
                model.cancelled.add(i)
        elif op == "advance":
            model.now_ms += arg
            timer.advance_clock(model.now_ms)
        elif op == "next":
            nxt = timer.next_expiration_ms()
            if nxt is not None:
                model.now_ms = nxt
                timer.advance_clock(nxt)
        check(model, timer)

    model.now_ms += 10**8
    timer.advance_clock(model.now_ms)
    check(model, timer)
    assert set(model.fired) == set(model.deadlines) - model.cancelled
    assert not (set(model.fired) & model.cancelled)
