"""Purgatory micro-benchmark: `python bench/purgatory.py [--ops N] [--json PATH]`.

One run parks the same workload in three purgatories: wherry's own
(`DelayedOperationPurgatory` on its hierarchical timing wheel, `wherry/purgatory/`) and the
same purgatory on two naive timers written here, the designs the timing wheel replaces:

  heap    a binary heap of (deadline, seq, entry) (`heapq`); a cancelled entry is only
          marked and stays in the heap until its deadline comes up (lazy deletion)
  sorted  a list kept sorted by deadline (`bisect.insort`); a cancelled entry is removed
          from the list at once (O(n) move of the tail)

Workload (seeded, identical for every design): `--ops` operations (100,000) are parked
over one simulated second (`try_complete_else_watch`, a timeout drawn from 1 ms .. 30 s,
watched under one of 1,000 keys, the clock advanced every millisecond like the broker's
ticker; the shortest timeouts expire meanwhile), then `--complete` of them (half; those
still pending) are completed through `check_and_complete` of their keys (which cancels
their timeouts), then the clock is driven from one
`next_expiration_ms` to the next until every other operation has expired. Every
operation must complete exactly once, and none may expire before its deadline.

Reported per design: the time of each phase and in total, operations per second over the
whole run, the timer entries held after the completions (the heap keeps cancelled ones
until their deadline), and the
ratio of each naive design's total time to the wheel's.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import heapq
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any, cast

if __package__ in (None, ""):  # run as a script: make `bench` and `wherry` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import env_line, environment, finish, log, print_table
from wherry.purgatory import DelayedOperation, DelayedOperationPurgatory, Timer
from wherry.purgatory.timing_wheel import TimerTask

KEYS = 1000
MAX_DELAY_MS = 30_000
PARK_WINDOW_MS = 1000


class BenchError(Exception):
    pass


# --------------------------------------------------------------------------------------------
# The naive timers (the Timer interface the purgatory uses: add, advance_clock,
# next_expiration_ms, size, clear; a task is cancelled through its entry's remove())
# --------------------------------------------------------------------------------------------


class _Entry:
    __slots__ = ("expiration_ms", "key", "live", "owner", "task")

    def __init__(self, owner: _NaiveTimer, task: TimerTask, expiration_ms: int, seq: int):
        self.owner = owner
        self.task = task
        self.expiration_ms = expiration_ms
        self.key = (expiration_ms, seq)
        self.live = True

    def remove(self) -> None:
        if self.live:
            self.live = False
            self.owner._cancelled(self)


class _NaiveTimer:
    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms
        self._seq = count()
        self.size = 0

    def add(self, task: TimerTask, *, now_ms: int | None = None) -> bool:
        base = self._now_ms if now_ms is None else now_ms
        expiration = base + task.delay_ms
        entry = _Entry(self, task, expiration, next(self._seq))
        old = task._timer_entry
        if old is not None:
            old.remove()
        task._timer_entry = entry  # type: ignore[assignment]
        if expiration <= max(self._now_ms, base):
            entry.live = False
            task._timer_entry = None
            task.run()
            return False
        self.size += 1
        self._insert(entry)
        return True

    def _fire(self, entry: _Entry, fired: list[TimerTask]) -> None:
        entry.live = False
        self.size -= 1
        entry.task._timer_entry = None
        entry.task.run()
        fired.append(entry.task)

    def _insert(self, entry: _Entry) -> None:
        raise NotImplementedError

    def _cancelled(self, entry: _Entry) -> None:
        raise NotImplementedError

    def clear(self) -> list[TimerTask]:
        raise NotImplementedError


class HeapTimer(_NaiveTimer):
    """heapq with lazy deletion: cancel marks the entry; it leaves at its deadline."""

    def __init__(self, start_ms: int = 0) -> None:
        super().__init__(start_ms)
        self._heap: list[tuple[tuple[int, int], _Entry]] = []

    def _insert(self, entry: _Entry) -> None:
        heapq.heappush(self._heap, (entry.key, entry))

    def held(self) -> int:
        return len(self._heap)

    def _cancelled(self, entry: _Entry) -> None:
        self.size -= 1

    def advance_clock(self, now_ms: int) -> list[TimerTask]:
        if now_ms < self._now_ms:
            return []
        self._now_ms = now_ms
        fired: list[TimerTask] = []
        heap = self._heap
        while heap and heap[0][0][0] <= now_ms:
            _, entry = heapq.heappop(heap)
            if entry.live:
                self._fire(entry, fired)
        return fired

    def next_expiration_ms(self) -> int | None:
        heap = self._heap
        while heap and not heap[0][1].live:
            heapq.heappop(heap)
        return heap[0][0][0] if heap else None

    def clear(self) -> list[TimerTask]:
        out = [e.task for _, e in self._heap if e.live]
        self._heap.clear()
        self.size = 0
        return out


class SortedListTimer(_NaiveTimer):
    """A list sorted by (deadline, seq): insort to add, bisect + del to cancel."""

    def __init__(self, start_ms: int = 0) -> None:
        super().__init__(start_ms)
        self._keys: list[tuple[int, int]] = []
        self._entries: list[_Entry] = []

    def _insert(self, entry: _Entry) -> None:
        i = bisect.bisect_right(self._keys, entry.key)
        self._keys.insert(i, entry.key)
        self._entries.insert(i, entry)

    def held(self) -> int:
        return len(self._keys)

    def _cancelled(self, entry: _Entry) -> None:
        i = bisect.bisect_left(self._keys, entry.key)
        del self._keys[i]
        del self._entries[i]
        self.size -= 1

    def advance_clock(self, now_ms: int) -> list[TimerTask]:
        if now_ms < self._now_ms:
            return []
        self._now_ms = now_ms
        fired: list[TimerTask] = []
        while self._keys and self._keys[0][0] <= now_ms:
            n = bisect.bisect_right(self._keys, (now_ms, sys.maxsize))
            due = self._entries[:n]
            del self._keys[:n]
            del self._entries[:n]
            for entry in due:
                if entry.live:  # a sibling's run() may have cancelled it meanwhile
                    self._fire(entry, fired)
        return fired

    def next_expiration_ms(self) -> int | None:
        return self._keys[0][0] if self._keys else None

    def clear(self) -> list[TimerTask]:
        out = [e.task for e in self._entries]
        self._keys.clear()
        self._entries.clear()
        self.size = 0
        return out


# --------------------------------------------------------------------------------------------
# Workload
# --------------------------------------------------------------------------------------------


class _Op(DelayedOperation):
    __slots__ = ("clock", "completions", "deadline_at", "ready")

    def __init__(self, delay_ms: int, clock: list[int]) -> None:
        super().__init__(delay_ms)
        self.ready = False
        self.clock = clock
        self.deadline_at = 0
        self.completions = 0

    def try_complete(self) -> bool:
        return self.force_complete() if self.ready else False

    def on_complete(self) -> None:
        self.completions += 1
        if self.is_expired and self.clock[0] < self.deadline_at:
            raise BenchError(f"expired at {self.clock[0]} before its deadline {self.deadline_at}")


@dataclass(frozen=True, slots=True)
class Workload:
    delays: list[int]
    keys: list[int]
    complete: list[int]  # indices of the operations completed through their key


def workload(ops: int, complete: int, seed: int) -> Workload:
    rng = random.Random(seed)
    delays = [rng.randint(1, MAX_DELAY_MS) for _ in range(ops)]
    keys = [rng.randrange(KEYS) for _ in range(ops)]
    return Workload(delays, keys, sorted(rng.sample(range(ops), complete)))


def run_design(name: str, make_timer: Callable[[], Any], w: Workload) -> dict[str, Any]:
    timer = make_timer()
    purgatory: DelayedOperationPurgatory[_Op] = DelayedOperationPurgatory(
        name, timer=cast(Timer, timer)
    )
    clock = [0]
    ops = [_Op(d, clock) for d in w.delays]
    n = len(ops)
    per_ms = max(1, n // PARK_WINDOW_MS)
    gc.collect()
    gc.disable()
    try:
        expired = 0
        t0 = time.perf_counter()
        for i, op in enumerate(ops):
            if i % per_ms == 0 and i:
                clock[0] += 1
                expired += purgatory.advance_clock(clock[0])
            op.deadline_at = clock[0] + op.delay_ms
            purgatory.try_complete_else_watch(op, (w.keys[i],), now_ms=clock[0])
        t1 = time.perf_counter()
        keys = set()
        for i in w.complete:
            ops[i].ready = True
            keys.add(w.keys[i])
        completed = sum(purgatory.check_and_complete(k) for k in sorted(keys))
        t2 = time.perf_counter()
        held = timer.held() if hasattr(timer, "held") else timer.size
        while (nxt := purgatory.next_expiration_ms()) is not None:
            clock[0] = max(clock[0], nxt)
            expired += purgatory.advance_clock(clock[0])
        t3 = time.perf_counter()
    finally:
        gc.enable()
    pending_marked = sum(1 for i in w.complete if not ops[i].is_expired)
    if completed != pending_marked or expired != n - completed:
        raise BenchError(f"{name}: {completed} completed, {expired} expired of {n}")
    if any(op.completions != 1 for op in ops) or purgatory.delayed:
        raise BenchError(f"{name}: an operation did not complete exactly once")
    return {
        "park_s": t1 - t0,
        "complete_s": t2 - t1,
        "expire_s": t3 - t2,
        "total_s": t3 - t0,
        "ops_s": n / (t3 - t0),
        "completed": completed,
        "expired": expired,
        "end_ms": clock[0],
        "held_after_completions": held,
    }


DESIGNS: dict[str, tuple[str, Callable[[], Any]]] = {
    "wheel": ("timing wheel (wherry/purgatory)", lambda: Timer(start_ms=0)),
    "heap": ("naive heap, lazy cancel (heapq)", lambda: HeapTimer(0)),
    "sorted": ("naive sorted list (bisect)", lambda: SortedListTimer(0)),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ops", type=int, default=100_000, help="operations parked (100,000)")
    ap.add_argument("--complete", type=float, default=0.5, help="share completed by key (0.5)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, help="also write the table as JSON to this path")
    args = ap.parse_args(argv)
    env = environment()
    t0 = time.monotonic()
    w = workload(args.ops, int(args.ops * args.complete), args.seed)
    results: dict[str, dict[str, Any]] = {}
    for key, (label, make) in DESIGNS.items():
        log(f"({key}) {label}: {args.ops:,} operations")
        results[key] = run_design(key, make, w)
    finish(env, t0)
    wheel = results["wheel"]["total_s"]
    cells = []
    for key, (label, _) in DESIGNS.items():
        r = results[key]
        r["ratio_to_wheel"] = r["total_s"] / wheel
        cells.append(
            (
                key,
                label,
                f"{r['total_s'] * 1000:,.0f} ms  {r['ops_s']:,.0f} ops/s  "
                f"({r['ratio_to_wheel']:.2f}x the wheel's time)",
                f"park {r['park_s'] * 1000:,.0f} ms, complete {r['complete_s'] * 1000:,.0f} ms, "
                f"expire {r['expire_s'] * 1000:,.0f} ms; {r['completed']:,} completed, "
                f"{r['expired']:,} expired; timer entries held after the completions "
                f"{r['held_after_completions']:,}",
            )
        )
    print(env_line(env))
    print_table(f"purgatory: {args.ops:,} parked operations (one run)", cells)
    if args.json:
        args.json.write_text(
            json.dumps({"env": env, "ops": args.ops, "results": results}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
