"""Tests specific to the SQLite-backed `EmbeddedCoordinator`."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from coord_helpers import Recorder, async_test

from wherry.coordination.embedded import METADATA_DIR, METADATA_FILE, EmbeddedCoordinator
from wherry.coordination.store import (
    ConnectionLossError,
    EventType,
    SessionClosedError,
    SessionState,
    StoreError,
    WatchEvent,
)


def test_database_location_and_durability_settings(tmp_path: Path) -> None:
    with EmbeddedCoordinator(tmp_path) as coord:
        assert coord.db_path == tmp_path / METADATA_DIR / METADATA_FILE
        assert coord.db_path.exists()
        conn = coord._conn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_second_opener_is_refused(tmp_path: Path) -> None:
    with EmbeddedCoordinator(tmp_path), pytest.raises(StoreError, match="in use"):
        EmbeddedCoordinator(tmp_path)
    EmbeddedCoordinator(tmp_path).close()  # free again once closed


def test_fake_clock_stamps_nodes(tmp_path: Path) -> None:
    now = [1_000]

    @async_test
    async def body() -> None:
        with EmbeddedCoordinator(tmp_path, clock_ms=lambda: now[0]) as coord:
            s = coord.session()
            await s.create("/n", b"")
            now[0] = 2_000
            stat = await s.set("/n", b"x")
            assert (stat.ctime_ms, stat.mtime_ms) == (1_000, 2_000)

    body()


@async_test
async def test_in_memory_coordinator() -> None:
    with EmbeddedCoordinator(None) as coord:
        assert coord.db_path is None
        s = coord.session()
        await s.create("/a/b", b"x", make_parents=True)
        assert await s.get_children("/") == ["a"]


@async_test
async def test_watch_is_not_delivered_inside_the_writers_call(tmp_path: Path) -> None:
    with EmbeddedCoordinator(tmp_path, commits_in_thread=False) as coord:
        s = coord.session()
        await s.create("/w", b"")
        rec = Recorder()
        await s.get("/w", watch=rec)
        await s.set("/w", b"x")
        assert rec.items == []  # scheduled with call_soon, not run yet
        await asyncio.sleep(0)
        assert rec.items == [WatchEvent(EventType.CHANGED, "/w")]


@async_test
async def test_a_write_committed_in_the_writer_thread_fires_its_watch_on_the_loop(
    tmp_path: Path,
) -> None:
    """As ZooKeeper does for a client, the watch event comes before the write's answer."""
    loop_thread = threading.get_ident()
    seen: list[tuple[WatchEvent, int]] = []
    with EmbeddedCoordinator(tmp_path) as coord:
        s = coord.session()
        await s.create("/w", b"")
        await s.get("/w", watch=lambda e: seen.append((e, threading.get_ident())))
        await s.set("/w", b"x")
        assert seen == [(WatchEvent(EventType.CHANGED, "/w"), loop_thread)]


def test_writes_are_durable_without_close(tmp_path: Path) -> None:
    """A process that dies right after a write returns (no close) loses nothing."""
    script = textwrap.dedent(
        f"""
        import asyncio, os
        from wherry.coordination.embedded import EmbeddedCoordinator

        async def main():
            coord = EmbeddedCoordinator({str(tmp_path)!r})
            s = coord.session()
            await s.create("/kept", b"durable")
            await s.set("/kept", b"durable2")
            await s.create("/eph", b"", ephemeral=True)
            os._exit(0)

        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=30)

    @async_test
    async def body() -> None:
        with EmbeddedCoordinator(tmp_path) as coord:
            s = coord.session()
            data, stat = await s.get("/kept")
            assert (data, stat.version) == (b"durable2", 1)
            assert await s.exists("/eph") is None
            assert await s.get_children("/") == ["kept"]

    body()
    # the purge of the leftover ephemeral node was itself made durable
    conn = sqlite3.connect(tmp_path / METADATA_DIR / METADATA_FILE)
    try:
        rows = conn.execute("SELECT path, ephemeral_owner FROM nodes ORDER BY path").fetchall()
    finally:
        conn.close()
    assert rows == [("/", 0), ("/kept", 0)]


def test_session_ids_and_zxids_are_unique_across_restarts(tmp_path: Path) -> None:
    seen_sessions: set[int] = set()
    zxids: list[int] = []

    @async_test
    async def run_once() -> None:
        with EmbeddedCoordinator(tmp_path) as coord:
            for _ in range(3):
                s = coord.session()
                assert s.session_id not in seen_sessions
                seen_sessions.add(s.session_id)
            await s.create(f"/n{len(zxids)}", b"", ephemeral=True)
            zxids.append((await s.get(f"/n{len(zxids)}"))[1].czxid)
            assert coord.last_zxid == zxids[-1]

    for _ in range(3):
        run_once()
    assert zxids == sorted(set(zxids))


@async_test
async def test_coordinator_close_ends_sessions_without_cleanup(tmp_path: Path) -> None:
    coord = EmbeddedCoordinator(tmp_path)
    s = coord.session()
    states = Recorder()
    s.add_state_listener(states)
    await s.create("/eph", b"", ephemeral=True)
    coord.close()
    assert coord.closed and s.state is SessionState.CLOSED
    assert await states.wait_for(1) == [SessionState.CLOSED]
    with pytest.raises(SessionClosedError):
        await s.get("/")
    with pytest.raises(StoreError):
        coord.session()
    with EmbeddedCoordinator(tmp_path) as again:  # the ephemeral is purged on reopen
        assert await again.session().exists("/eph") is None


@async_test
async def test_suspend_and_resume(tmp_path: Path) -> None:
    with EmbeddedCoordinator(tmp_path) as coord:
        s = coord.session()
        other = coord.session()
        states = Recorder()
        s.add_state_listener(states)
        await s.create("/eph", b"", ephemeral=True)
        await other.create("/data", b"")
        rec = Recorder()
        await s.get("/data", watch=rec)

        coord.suspend_session(s.session_id)
        assert s.state is SessionState.SUSPENDED
        assert await states.wait_for(1) == [SessionState.SUSPENDED]
        with pytest.raises(ConnectionLossError):
            await s.get("/data")
        assert await other.exists("/eph") is not None  # ephemerals survive a suspension
        await other.set("/data", b"x")
        await asyncio.sleep(0)
        assert rec.items == []  # held back while disconnected

        coord.resume_session(s.session_id)
        assert await states.wait_for(2) == [SessionState.SUSPENDED, SessionState.CONNECTED]
        assert await rec.wait_for(1) == [WatchEvent(EventType.CHANGED, "/data")]
        assert (await s.get("/data"))[0] == b"x"

        coord.suspend_session(s.session_id)
        assert coord.expire_session(s.session_id)
        assert not coord.expire_session(s.session_id)
        assert await states.wait_for(4) == [
            SessionState.SUSPENDED,
            SessionState.CONNECTED,
            SessionState.SUSPENDED,
            SessionState.EXPIRED,
        ]
        assert await other.exists("/eph") is None
        assert coord.session_ids == frozenset({other.session_id})
        with pytest.raises(KeyError):
            coord.resume_session(s.session_id)


def test_expire_outside_any_event_loop_calls_back_directly(tmp_path: Path) -> None:
    with EmbeddedCoordinator(tmp_path) as coord:
        s = coord.session()
        watcher = coord.session()
        states: list[SessionState] = []
        events: list[WatchEvent] = []

        @async_test
        async def setup() -> None:
            s.add_state_listener(states.append)
            await s.create("/eph", b"", ephemeral=True)
            await watcher.exists("/eph", watch=events.append)

        setup()  # that loop is closed now
        coord.expire_session(s.session_id)
        assert states == [SessionState.EXPIRED]
        assert events == [WatchEvent(EventType.DELETED, "/eph")]


@async_test
async def test_failing_callback_does_not_break_delivery(tmp_path: Path) -> None:
    with EmbeddedCoordinator(tmp_path) as coord:
        s = coord.session()
        await s.create("/n", b"")

        def boom(event: WatchEvent) -> None:
            raise RuntimeError("callback bug")

        rec = Recorder()
        await s.get("/n", watch=boom)
        await s.get("/n", watch=rec)
        await s.set("/n", b"x")
        assert await rec.wait_for(1) == [WatchEvent(EventType.CHANGED, "/n")]
        assert (await s.get("/n"))[0] == b"x"


@async_test
async def test_root_and_data_type_checks(tmp_path: Path) -> None:
    with EmbeddedCoordinator(tmp_path) as coord:
        s = coord.session()
        with pytest.raises(ValueError):
            await s.delete("/")
        with pytest.raises(TypeError):
            await s.create("/s", "text")  # type: ignore[arg-type]
        assert await s.create("/b", bytearray(b"ok")) == "/b"  # type: ignore[arg-type]
        assert (await s.get("/b"))[0] == b"ok"


def _sync_settings(coord: EmbeddedCoordinator) -> tuple[int, int]:
    conn = coord._conn
    return (
        conn.execute("PRAGMA synchronous").fetchone()[0],
        conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0],
    )


def test_deferred_syncs_until_sync(tmp_path: Path) -> None:
    """`defer_syncs`: commits without fsync and no checkpoint (its database writes would not be
    synced) until `sync`, which makes them durable and restores FULL and the checkpoints."""

    @async_test
    async def body() -> None:
        coord = EmbeddedCoordinator(tmp_path, defer_syncs=True)
        try:
            assert _sync_settings(coord) == (0, 0)  # OFF, no checkpoint
            s = coord.session()
            await s.create("/a/b", b"x", make_parents=True)
            assert (await s.get("/a/b"))[0] == b"x"
            await asyncio.get_running_loop().run_in_executor(None, coord.sync)
            assert _sync_settings(coord) == (2, 1000)  # FULL, SQLite's default
            assert (tmp_path / METADATA_DIR / (METADATA_FILE + "-wal")).exists()
            coord.sync()  # once is enough: nothing more to do
            await s.set("/a/b", b"y")
        finally:
            coord.close()
        with EmbeddedCoordinator(tmp_path) as again:
            assert (await again.session().get("/a/b"))[0] == b"y"
            assert _sync_settings(again) == (2, 1000)  # no deferral unless asked

    body()


def test_deferred_writes_are_kept_by_a_close_without_sync(tmp_path: Path) -> None:
    """Closed before `sync` (a start that failed after writing): the close syncs as ever."""

    @async_test
    async def body() -> None:
        with EmbeddedCoordinator(tmp_path, defer_syncs=True) as coord:
            await coord.session().create("/kept", b"v")
        with EmbeddedCoordinator(tmp_path) as again:
            assert (await again.session().get("/kept"))[0] == b"v"

    body()
    assert not (tmp_path / METADATA_DIR / (METADATA_FILE + "-wal")).exists()  # checkpointed
