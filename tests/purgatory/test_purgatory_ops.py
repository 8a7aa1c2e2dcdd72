"""DelayedOperation / DelayedOperationPurgatory tests, after Kafka's DelayedOperationTest."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from wherry.purgatory import DelayedOperation, DelayedOperationPurgatory, Timer


class MockOp(DelayedOperation):
    """Completable once ``completable`` is set; records every callback."""

    def __init__(self, delay_ms: int, name: str = "op", log: list[str] | None = None) -> None:
        super().__init__(delay_ms)
        self.name = name
        self.completable = False
        self.try_calls = 0
        self.log: list[str] = log if log is not None else []
        self.hook: Callable[[], None] | None = None

    def try_complete(self) -> bool:
        self.try_calls += 1
        ready = self.completable
        if self.hook is not None:  # runs after the condition was evaluated
            self.hook()
        if ready:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.log.append(f"{self.name}:complete")

    def on_expiration(self) -> None:
        self.log.append(f"{self.name}:expire")


def make_purgatory(
    purge_interval: int = 1000, start_ms: int = 0
) -> DelayedOperationPurgatory[MockOp]:
    return DelayedOperationPurgatory("mock", Timer(start_ms=start_ms), purge_interval)


def test_request_satisfaction() -> None:
    p = make_purgatory()
    r1, r2 = MockOp(100_000, "r1"), MockOp(100_000, "r2")
    assert p.check_and_complete("test1") == 0
    assert p.try_complete_else_watch(r1, ["test1"]) is False
    assert p.check_and_complete("test1") == 0
    assert p.try_complete_else_watch(r2, ["test2"]) is False
    assert p.check_and_complete("test2") == 0
    assert p.delayed == 2
    r1.completable = True
    assert p.check_and_complete("test1") == 1
    assert p.check_and_complete("test2") == 0
    r2.completable = True
    assert p.check_and_complete("test2") == 1
    assert p.check_and_complete("test2") == 0
    assert r1.log == ["r1:complete"] and r2.log == ["r2:complete"]
    assert not r1.is_expired
    assert p.delayed == 0  # completion removed the timeouts
    assert p.watched() == 0
    assert p.watch_keys == 0  # empty watcher lists are dropped


def test_completes_immediately_without_watching() -> None:
    p = make_purgatory()
    op = MockOp(1_000)
    op.completable = True
    assert p.try_complete_else_watch(op, ["k"]) is True
    assert op.is_completed
    assert p.watched("k") == 0 and p.delayed == 0 and p.watch_keys == 0
    assert op.try_calls == 1


def test_request_expiry() -> None:
    p = make_purgatory(start_ms=1_000)
    log: list[str] = []
    r1, r2 = MockOp(50, "r1", log), MockOp(200, "r2", log)
    p.try_complete_else_watch(r1, ["test1"])
    p.try_complete_else_watch(r2, ["test1", "test2"])
    nxt = p.next_expiration_ms()
    assert nxt is not None and 1_000 < nxt <= 1_050  # a lower bound (may be a cascade time)
    assert p.advance_clock(1_049) == 0
    assert p.advance_clock(1_050) == 1
    assert r1.is_completed and r1.is_expired and not r2.is_completed
    assert log == ["r1:expire", "r1:complete"]
    assert p.advance_clock(1_200) == 1
    assert log == ["r1:expire", "r1:complete", "r2:expire", "r2:complete"]
    assert p.delayed == 0
    # Expired ops linger in watcher lists until a check or a purge removes them.
    assert p.check_and_complete("test1") == 0
    assert p.watched("test1") == 0


def test_zero_delay_expires_inside_try_complete_else_watch() -> None:
    p = make_purgatory()
    op = MockOp(0)
    assert p.try_complete_else_watch(op, ["k"]) is False
    assert op.is_expired
    assert op.log == ["op:expire", "op:complete"]
    assert p.delayed == 0


def test_timeout_relative_to_callers_now_when_timer_lags() -> None:
    p = make_purgatory(start_ms=0)
    op = MockOp(500)
    p.try_complete_else_watch(op, ["k"], now_ms=10_000_000)
    p.advance_clock(10_000_499)
    assert not op.is_completed
    p.advance_clock(10_000_500)
    assert op.is_expired


def test_force_complete_then_expiry_and_check_do_nothing() -> None:
    p = make_purgatory()
    op = MockOp(10)
    p.try_complete_else_watch(op, ["a", "b"])
    assert op.force_complete() is True
    assert op.force_complete() is False
    assert p.delayed == 0
    op.completable = True
    assert p.check_and_complete("a") == 0
    assert p.advance_clock(100) == 0
    op.run()  # a stray timer callback after completion is a no-op
    assert op.log == ["op:complete"]


def test_key_check_and_expiry_in_same_step_complete_once() -> None:
    """A completes by key check from inside B's expiry callback, in the same timer bucket."""
    p = make_purgatory()
    log: list[str] = []
    a, b = MockOp(10, "a", log), MockOp(10, "b", log)
    p.try_complete_else_watch(b, ["kb"])
    p.try_complete_else_watch(a, ["ka"])

    def b_expired() -> None:
        log.append("b:expire")
        a.completable = True
        assert p.check_and_complete("ka") == 1  # wins the race against a's own timeout

    b.on_expiration = b_expired  # type: ignore[method-assign]
    assert p.advance_clock(10) == 1  # only b expired; a's timer entry was dropped mid-flush
    assert log == ["b:expire", "a:complete", "b:complete"]
    assert a.is_completed and not a.is_expired
    assert b.is_expired
    assert p.delayed == 0


def test_expiry_before_key_check_in_same_step_complete_once() -> None:
    p = make_purgatory()
    op = MockOp(10)
    p.try_complete_else_watch(op, ["k"])
    op.completable = True  # satisfied, but the clock is advanced before anyone checks the key
    assert p.advance_clock(10) == 1
    assert p.check_and_complete("k") == 0
    assert op.log == ["op:expire", "op:complete"]


def test_update_between_the_two_checks_is_not_lost() -> None:
    """Kafka's check / watch / check order: the state changes (and the producer-side
    check_and_complete runs) after the first check but before the op is watched."""
    p = make_purgatory()
    op = MockOp(1_000)

    def concurrent_update() -> None:
        if op.try_calls == 1:
            op.completable = True
            assert p.check_and_complete("k") == 0  # nobody watching yet

    op.hook = concurrent_update
    assert p.try_complete_else_watch(op, ["k"]) is True
    assert op.try_calls == 2
    assert op.log == ["op:complete"]
    assert p.delayed == 0  # never scheduled


def test_request_purge() -> None:
    p = make_purgatory(purge_interval=2)
    r1, r2, r3 = MockOp(100_000, "r1"), MockOp(100_000, "r2"), MockOp(100_000, "r3")
    p.try_complete_else_watch(r1, ["test1"])
    p.try_complete_else_watch(r2, ["test1", "test2"])
    p.try_complete_else_watch(r3, ["test1", "test2", "test3"])
    assert p.delayed == 3
    assert p.watched() == 6
    r1.force_complete()
    assert p.delayed == 2
    assert p.watched() == 6
    r2.force_complete()
    assert p.delayed == 1
    assert p.watched() == 6
    p.advance_clock(1)  # 3 estimated - 1 delayed = 2, not above the interval: no purge
    assert p.watched() == 6
    r3.force_complete()
    assert p.delayed == 0
    p.advance_clock(2)  # 3 - 0 > 2: purge
    assert p.watched() == 0
    assert p.watch_keys == 0


def test_purge_keeps_pending_ops() -> None:
    p = make_purgatory()
    a, b = MockOp(1_000, "a"), MockOp(1_000, "b")
    p.try_complete_else_watch(a, ["x", "y"])
    p.try_complete_else_watch(b, ["y"])
    a.force_complete()
    assert p.purge_completed() == 2
    assert p.watched("x") == 0 and p.watched("y") == 1
    assert p.watch_keys == 1


def test_cancel_for_key_returns_pending_ops_uncompleted() -> None:
    p = make_purgatory()
    r1, r2, r3 = MockOp(10_000, "r1"), MockOp(10_000, "r2"), MockOp(10_000, "r3")
    p.try_complete_else_watch(r1, ["key"])
    p.try_complete_else_watch(r2, ["key"])
    p.try_complete_else_watch(r3, ["other", "key"])
    r2.force_complete()
    cancelled = p.cancel_for_key("key")
    assert cancelled == [r1, r3]
    assert not r1.is_completed and not r3.is_completed
    assert p.delayed == 0  # timeouts unscheduled
    assert p.watched("key") == 0
    assert p.watched("other") == 1  # still watched elsewhere
    p.advance_clock(20_000)
    assert r1.log == [] and r3.log == []


def test_cancel_for_missing_key() -> None:
    p = make_purgatory()
    assert p.cancel_for_key("nope") == []


def test_try_complete_exception_in_check_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    p = make_purgatory()
    bad, good = MockOp(1_000, "bad"), MockOp(1_000, "good")
    p.try_complete_else_watch(bad, ["k"])
    p.try_complete_else_watch(good, ["k"])

    def explode() -> None:
        raise RuntimeError("kaboom")

    bad.hook = explode
    good.completable = True
    with caplog.at_level(logging.ERROR, logger="wherry.purgatory.purgatory"):
        assert p.check_and_complete("k") == 1
    assert "kaboom" in caplog.text
    assert p.watched("k") == 1  # the failing op stays watched and will time out
    p.advance_clock(1_000)
    assert bad.is_expired


def test_on_complete_may_reenter_the_purgatory() -> None:
    p = make_purgatory()
    follow_up = MockOp(1_000, "follow")

    class Chaining(MockOp):
        def on_complete(self) -> None:
            super().on_complete()
            p.try_complete_else_watch(follow_up, ["k"])

    first = Chaining(1_000, "first")
    p.try_complete_else_watch(first, ["k"])
    first.completable = True
    assert p.check_and_complete("k") == 1
    assert p.watched("k") == 1  # the follow-up op, watched from inside the callback
    follow_up.completable = True
    assert p.check_and_complete("k") == 1
    assert p.watch_keys == 0


def test_duplicate_keys_watch_once() -> None:
    p = make_purgatory()
    op = MockOp(1_000)
    p.try_complete_else_watch(op, ["k", "k"])
    assert p.watched("k") == 1


def test_ops_with_value_equality_are_kept_apart() -> None:
    class EqOp(MockOp):
        def __eq__(self, other: object) -> bool:
            return isinstance(other, EqOp)

        __hash__ = object.__hash__

    p: DelayedOperationPurgatory[MockOp] = make_purgatory()
    a, b = EqOp(1_000, "a"), EqOp(1_000, "b")
    p.try_complete_else_watch(a, ["k"])
    p.try_complete_else_watch(b, ["k"])
    assert p.watched("k") == 2
    b.completable = True
    assert p.check_and_complete("k") == 1
    assert not a.is_completed


def test_shutdown_returns_pending_ops() -> None:
    p = make_purgatory()
    a, b, c = MockOp(1_000, "a"), MockOp(1_000, "b"), MockOp(1_000, "c")
    p.try_complete_else_watch(a, ["x"])
    p.try_complete_else_watch(b, [])  # timeout only, no key
    p.try_complete_else_watch(c, ["x"])
    c.force_complete()
    pending = p.shutdown()
    assert {op.name for op in pending} == {"a", "b"}
    assert p.delayed == 0 and p.watch_keys == 0
    p.advance_clock(10_000)
    assert a.log == [] and b.log == []
    with pytest.raises(RuntimeError):
        p.try_complete_else_watch(MockOp(10), ["x"])


def test_100k_ops_completed_by_one_key_are_purged_from_the_other() -> None:
    n = 100_000
    interval = 1_000
    p = make_purgatory(purge_interval=interval)
    ops = []
    for i in range(n):
        op = MockOp(60_000)
        p.try_complete_else_watch(op, [f"p{i % 100}", "shared"])
        ops.append(op)
        if i % 2 == 0:
            op.force_complete()  # e.g. completed by the partition it waits on
    # Purges run as operations are added, so completed entries cannot pile up without bound.
    completed_still_watched = p.watched("shared") - p.delayed
    assert completed_still_watched <= interval + 1
    assert p.delayed == n // 2
    p.advance_clock(60_000)
    assert p.delayed == 0
    assert all(op.is_completed for op in ops)
    assert sum(op.is_expired for op in ops) == n // 2
    assert p.watched() == 0 and p.watch_keys == 0  # all purged after the mass expiry


def test_asyncio_future_resolved_by_on_complete() -> None:
    """The intended broker pattern: the handler awaits a future that on_complete resolves."""

    class DelayedAck(DelayedOperation):
        def __init__(self, delay_ms: int, fut: asyncio.Future[str], state: dict[str, bool]):
            super().__init__(delay_ms)
            self.fut = fut
            self.state = state

        def try_complete(self) -> bool:
            return self.force_complete() if self.state["acked"] else False

        def on_complete(self) -> None:
            if not self.fut.done():
                self.fut.set_result("timeout" if self.is_expired else "acked")

    async def main() -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        p: DelayedOperationPurgatory[DelayedAck] = DelayedOperationPurgatory("acks", Timer())
        state = {"acked": False}
        f1: asyncio.Future[str] = loop.create_future()
        f2: asyncio.Future[str] = loop.create_future()
        p.try_complete_else_watch(DelayedAck(5, f1, state), ["tp"], now_ms=0)
        p.try_complete_else_watch(DelayedAck(10_000, f2, {"acked": False}), ["other"], now_ms=0)

        async def replicate() -> None:
            await asyncio.sleep(0)
            state["acked"] = True
            p.check_and_complete("tp")
            p.advance_clock(10_000)

        task = asyncio.create_task(replicate())
        r1, r2 = await asyncio.gather(f1, f2)
        await task
        return r1, r2

    assert asyncio.run(main()) == ("acked", "timeout")


def test_an_in_order_pass_stops_at_the_first_produce_still_waiting_on_its_key() -> None:
    """acks=all produces wait for a partition's high watermark in the order they appended:
    the pass stops at the first still short of it, but not at one that waits on another
    partition only."""
    from kio.schema.errors import ErrorCode

    from wherry.common.topic_partition import TopicPartition
    from wherry.replication.delayed import DelayedProduce, ProducePartitionStatus

    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    hw = {a: 0, b: 0}
    checks: list[tuple[TopicPartition, int]] = []
    answered: list[int] = []

    def check(tp: TopicPartition, st: ProducePartitionStatus) -> ErrorCode | None:
        checks.append((tp, st.required_offset))
        return ErrorCode.none if hw[tp] >= st.required_offset else None

    def produce(required: dict[TopicPartition, int]) -> DelayedProduce:
        statuses = {tp: ProducePartitionStatus(end, ErrorCode.none, end - 1, -1, 0)
                    for tp, end in required.items()}
        return DelayedProduce(30_000, statuses, check,
                              lambda s: answered.append(max(x.required_offset for x in s.values())))

    p: DelayedOperationPurgatory[DelayedProduce] = DelayedOperationPurgatory(
        "produce", Timer(start_ms=0), 1000
    )
    ops = [produce({a: 10, b: 5}), produce({a: 20}), produce({a: 30}), produce({a: 40})]
    for op in ops:
        assert not p.try_complete_else_watch(op, list(op.statuses))
    hw[a] = 25  # the first waits on b only now; the second completes; the third stops the pass
    checks.clear()
    assert p.check_and_complete(a, in_order=True) == 1
    assert answered == [20]
    assert checks == [(a, 10), (b, 5), (a, 20), (a, 30)]  # the fourth not asked
    hw[b] = 5
    assert p.check_and_complete(b, in_order=True) == 1 and answered == [20, 10]
    hw[a] = 40
    assert p.check_and_complete(a, in_order=True) == 2 and answered == [20, 10, 30, 40]
    assert p.delayed == 0
