"""The embedded store's writes commit in its writer thread: a slow commit (a slow fsync) holds
no event loop, readers see the tree as it was until the write is durable, a failed commit
leaves no trace any reader could have seen, writes keep the order they were called in, and
closing waits for a write under way."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from coord_helpers import async_test

from wherry.coordination.embedded import EmbeddedCoordinator
from wherry.coordination.store import SessionClosedError, Stat, StoreError

COMMIT_S = 0.4


class SlowConnection:
    """``coord``'s SQLite connection whose commits take ``COMMIT_S`` (as a slow disk's fsync
    would), and then fail with SQLite's I/O error if ``fail``."""

    def __init__(self, conn: sqlite3.Connection, fail: bool) -> None:
        self.conn, self.fail = conn, fail
        self.began: list[float] = []  # when each commit began

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT":
            self.began.append(time.monotonic())
            time.sleep(COMMIT_S)
            if self.fail:
                raise sqlite3.OperationalError("disk I/O error")
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def slow_commits(coord: EmbeddedCoordinator, fail: bool = False) -> list[float]:
    """Slow (and fail) ``coord``'s commits (`SlowConnection`); returns when each began."""
    slow = SlowConnection(coord._conn, fail)
    coord._conn = slow  # type: ignore[assignment]
    return slow.began


async def largest_gap_while(work: asyncio.Task[Any], probe: Callable[[], object]) -> float:
    """Run ``probe`` every 5 ms until ``work`` is done; the largest gap between two runs."""
    last, gap = time.monotonic(), 0.0
    while not work.done():
        await asyncio.sleep(0.005)
        now = time.monotonic()
        gap, last = max(gap, now - last), now
        probe()
    return gap


@async_test
async def test_a_slow_commit_holds_no_loop_and_readers_see_the_tree_as_it_was(
    tmp_path: Path,
) -> None:
    with EmbeddedCoordinator(tmp_path) as coord:
        s = coord.session()
        await s.create("/n", b"old")
        began = slow_commits(coord)
        seen: list[bytes] = []
        loop = asyncio.get_running_loop()

        def read() -> None:  # the tree, as a handler on the loop would read it
            seen.append(coord._nodes["/n"].data)

        write = loop.create_task(s.set("/n", b"new"))
        gap = await largest_gap_while(write, read)
        stat = await write
        assert began and gap < COMMIT_S / 4, f"the loop was held {gap * 1000:.0f} ms"
        assert len(seen) > 10 and set(seen[:-1]) == {b"old"}  # the last read may follow it
        assert (await s.get("/n")) == (b"new", stat) and stat.version == 1


@async_test
async def test_in_line_commits_hold_the_loop(tmp_path: Path) -> None:
    """The measure above sees a hold: a store that commits in-line holds its loop."""
    with EmbeddedCoordinator(tmp_path, commits_in_thread=False) as coord:
        s = coord.session()
        await s.create("/n", b"old")
        slow_commits(coord)
        write = asyncio.get_running_loop().create_task(s.set("/n", b"new"))
        gap = await largest_gap_while(write, lambda: None)
        await write
        assert gap >= COMMIT_S * 0.9


@async_test
async def test_a_failed_commit_leaves_no_trace_a_reader_saw(tmp_path: Path) -> None:
    failures: list[str] = []
    with EmbeddedCoordinator(tmp_path, on_write_failure=failures.append) as coord:
        s = coord.session()
        await s.create("/n", b"old")
        zxid = coord.last_zxid
        slow_commits(coord, fail=True)
        seen: set[bytes] = set()
        write = asyncio.get_running_loop().create_task(s.set("/n", b"new"))
        await largest_gap_while(write, lambda: seen.add(coord._nodes["/n"].data))
        with pytest.raises(StoreError, match="disk I/O error") as raised:
            await write
        assert seen == {b"old"}
        assert failures == [str(raised.value)]
        data, stat = await s.get("/n")
        assert (data, stat.version, coord.last_zxid) == (b"old", 0, zxid)
    with EmbeddedCoordinator(tmp_path) as again:
        assert (await again.session().get("/n"))[0] == b"old"


@async_test
async def test_writes_keep_the_order_they_were_called_in(tmp_path: Path) -> None:
    with EmbeddedCoordinator(tmp_path) as coord:
        s = coord.session()
        await s.create("/q", b"")
        made = await asyncio.gather(
            *(s.create("/q/n-", str(i).encode(), sequential=True) for i in range(30)),
            *(s.set("/q", str(i).encode()) for i in range(30)),
        )
        for i, path in enumerate(made[:30]):
            assert path == f"/q/n-{i:010d}"
            assert (await s.get(path))[0] == str(i).encode()
        assert [cast(Stat, stat).version for stat in made[30:]] == list(range(1, 31))
        assert (await s.get("/q"))[0] == b"29"


@async_test
async def test_close_waits_for_a_write_under_way_and_fails_those_queued(
    tmp_path: Path,
) -> None:
    coord = EmbeddedCoordinator(tmp_path)
    s = coord.session()
    began = slow_commits(coord)
    loop = asyncio.get_running_loop()
    under_way = loop.create_task(s.create("/a", b"1"))
    queued = loop.create_task(s.create("/b", b"2"))
    while not began:
        await asyncio.sleep(0.005)
    coord.close()  # returns once the commit under way has completed
    assert await under_way == "/a"
    with pytest.raises(SessionClosedError):
        await queued
    with EmbeddedCoordinator(tmp_path) as again:
        kept = again.session()
        assert (await kept.get("/a"))[0] == b"1"
        assert await kept.exists("/b") is None
