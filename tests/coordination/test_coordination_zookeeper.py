"""ZooKeeper-only behaviour of `ZooKeeperStore`, against a real ZooKeeper server.

Faults are real: the server process is paused (SIGSTOP) for a connection loss, and a client
is put behind a `TcpProxy` that black-holes its traffic for a network partition, after which
ZooKeeper expires its session on its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from coord_helpers import Recorder, async_test

from tests.helpers import wait_until_async
from wherry.coordination import ZooKeeperStore, ZooKeeperUnavailableError, connect_zookeeper
from wherry.coordination.store import (
    BadVersionError,
    ConnectionLossError,
    EventType,
    NoNodeError,
    SessionExpiredError,
    SessionState,
    WatchEvent,
)
from wherry.testing.tcp_proxy import TcpProxy
from wherry.testing.zookeeper import ZooKeeperServer, find_free_port


@pytest.fixture
def proxy(zookeeper_server: ZooKeeperServer) -> Iterator[TcpProxy]:
    """A relay to the ZooKeeper server that a test can partition."""
    p = TcpProxy(zookeeper_server.address).start()
    try:
        yield p
    finally:
        p.stop()


@asynccontextmanager
async def session(
    connect_string: str, session_timeout_ms: int = 10_000
) -> AsyncIterator[ZooKeeperStore]:
    """A ZooKeeper session for the block, closed when it ends."""
    store = await connect_zookeeper(
        connect_string, session_timeout_ms=session_timeout_ms, connect_timeout_s=5.0
    )
    try:
        yield store
    finally:
        await store.close()


@async_test
async def test_partitioned_session_expires(
    proxy: TcpProxy, zk_chroot: str, zk_connect: str
) -> None:
    """A client cut off for longer than its session timeout: ZooKeeper expires the session
    (other sessions see its ephemeral node go), the client is told when it reconnects, and it
    does not come back with a new session on its own."""
    async with (
        session(proxy.connect_string + zk_chroot, 600) as owner,
        session(zk_connect) as other,
    ):
        states = Recorder()
        owner.add_state_listener(states)
        await owner.create("/controller", b"c", ephemeral=True)
        await owner.create("/data", b"d")
        own_watch = Recorder()
        await owner.get("/data", watch=own_watch)
        gone = Recorder()
        await other.exists("/controller", watch=gone)

        proxy.partition()
        assert await states.wait_for(1) == [SessionState.SUSPENDED]
        with pytest.raises(ConnectionLossError):
            await owner.get("/data")
        # The server expires the silent session by itself (after ~600 ms).
        assert await gone.wait_for(1) == [WatchEvent(EventType.DELETED, "/controller")]
        assert await other.exists("/controller") is None
        assert owner.state is SessionState.SUSPENDED  # it cannot know yet

        proxy.heal()
        assert await states.wait_for(2) == [SessionState.SUSPENDED, SessionState.EXPIRED]
        assert owner.state is SessionState.EXPIRED
        with pytest.raises(SessionExpiredError):
            await owner.get("/data")
        with pytest.raises(SessionExpiredError):
            await owner.create("/controller", b"again", ephemeral=True)
        await other.set("/data", b"changed")
        await asyncio.sleep(0.5)
        assert own_watch.items == []  # an expired session's watches are gone
        assert states.items == [SessionState.SUSPENDED, SessionState.EXPIRED]
        assert proxy.connection_count == 0  # no new session behind the owner's back
        await owner.close()
        assert owner.state is SessionState.EXPIRED


@async_test
async def test_connection_loss_keeps_session(
    zookeeper_server: ZooKeeperServer, zk_connect: str
) -> None:
    """The server stops answering for less than the session timeout: SUSPENDED, then
    CONNECTED with the same session, its ephemeral node and its watches intact."""
    timeout_ms = 3000
    async with session(zk_connect, timeout_ms) as s:
        await s.create("/broker", b"b", ephemeral=True)
        watch = Recorder()
        await s.get("/broker", watch=watch)
        states = Recorder()
        s.add_state_listener(states)
        session_id = s.session_id

        zookeeper_server.pause()
        try:
            # kazoo notices after 2/3 of the session timeout without a ping answer.
            assert await states.wait_for(1, timeout_s=timeout_ms / 1000) == [SessionState.SUSPENDED]
            with pytest.raises(ConnectionLossError):
                await s.exists("/broker")
        finally:
            zookeeper_server.resume()
        assert await states.wait_for(2) == [SessionState.SUSPENDED, SessionState.CONNECTED]
        assert s.session_id == session_id
        data, stat = await s.get("/broker")
        assert data == b"b" and stat.ephemeral_owner == session_id
        await s.set("/broker", b"b2")
        assert await watch.wait_for(1) == [WatchEvent(EventType.CHANGED, "/broker")]


@async_test
async def test_watches_rearmed_after_reconnect(
    proxy: TcpProxy, zk_chroot: str, zk_connect: str
) -> None:
    """Changes made while a session is disconnected fire its watches after it reconnects
    (after the CONNECTED notification); unchanged watches stay armed and fire later."""
    async with session(proxy.connect_string + zk_chroot) as owner, session(zk_connect) as other:
        await other.create("/d", b"0")
        await other.create("/p", b"")
        await other.create("/quiet", b"")
        await other.create("/doomed", b"")
        log = Recorder()  # states and events, in the order they arrive
        quiet = Recorder()
        await owner.get("/d", watch=log)
        await owner.get_children("/p", watch=log)
        await owner.exists("/later", watch=log)
        await owner.exists("/doomed", watch=log)
        await owner.get("/quiet", watch=quiet)
        owner.add_state_listener(log)

        proxy.partition()
        proxy.reset()  # the owner sees its connection close; reconnects are black-holed
        assert await log.wait_for(1) == [SessionState.SUSPENDED]
        await other.set("/d", b"1")
        await other.set("/d", b"2")
        await other.create("/p/c", b"")
        await other.create("/later", b"")
        await other.delete("/doomed")
        proxy.heal()

        items = await log.wait_for(6)
        assert items[:2] == [SessionState.SUSPENDED, SessionState.CONNECTED]
        assert sorted(items[2:], key=str) == sorted(
            [
                WatchEvent(EventType.CHANGED, "/d"),
                WatchEvent(EventType.CHILD, "/p"),
                WatchEvent(EventType.CREATED, "/later"),
                WatchEvent(EventType.DELETED, "/doomed"),
            ],
            key=str,
        )
        await other.set("/d", b"3")  # those watches were one-shot: consumed
        await other.set("/quiet", b"q")
        assert await quiet.wait_for(1) == [WatchEvent(EventType.CHANGED, "/quiet")]
        await asyncio.sleep(0.2)
        assert len(log.items) == 6
        assert quiet.items == [WatchEvent(EventType.CHANGED, "/quiet")]


@async_test
async def test_unreachable_connect_string_fails_fast() -> None:
    port = find_free_port()  # nothing listens there
    connect_string = f"127.0.0.1:{port}/wherry"
    start = time.monotonic()
    with pytest.raises(ZooKeeperUnavailableError, match=rf"127\.0\.0\.1:{port}/wherry"):
        await connect_zookeeper(connect_string, session_timeout_ms=4000, connect_timeout_s=1.0)
    assert time.monotonic() - start < 3.0


@async_test
async def test_silent_server_fails_fast(proxy: TcpProxy) -> None:
    """A server that accepts connections but never answers is unreachable too."""
    proxy.partition()
    start = time.monotonic()
    with pytest.raises(ZooKeeperUnavailableError, match=proxy.connect_string):
        await connect_zookeeper(
            proxy.connect_string, session_timeout_ms=4000, connect_timeout_s=1.0
        )
    assert time.monotonic() - start < 3.0


@async_test
async def test_chroot_is_created_and_isolates(
    zookeeper_server: ZooKeeperServer, zk_chroot: str
) -> None:
    chroot = zk_chroot + "/deep/er"
    async with (
        session(zookeeper_server.connect_string + chroot) as inside,
        session(zookeeper_server.connect_string) as outside,
    ):
        assert await inside.get_children("/") == []
        created = await inside.create("/brokers/ids/1", b"b", ephemeral=True, make_parents=True)
        assert created == "/brokers/ids/1"
        assert await inside.create("/seq-", b"", sequential=True) == "/seq-0000000001"
        data, stat = await outside.get(chroot + "/brokers/ids/1")
        assert data == b"b" and stat.ephemeral_owner == inside.session_id
        assert "zookeeper" in await outside.get_children("/")
        watch = Recorder()
        await inside.get_children("/brokers/ids", watch=watch)
        await outside.delete(chroot + "/brokers/ids/1")
        assert await watch.wait_for(1) == [WatchEvent(EventType.CHILD, "/brokers/ids")]
        await inside.delete("/brokers", recursive=True)
        assert await outside.get_children(chroot) == ["seq-0000000001"]


@async_test
async def test_close_deletes_ephemerals_and_notifies(zk_connect: str) -> None:
    async with session(zk_connect) as a, session(zk_connect) as b:
        await a.create("/e", b"", ephemeral=True)
        states = Recorder()
        a.add_state_listener(states)
        await a.close()
        assert await b.exists("/e") is None  # gone by the time close() returns
        assert await states.wait_for(1) == [SessionState.CLOSED]
        await wait_until_async(lambda: a.state is SessionState.CLOSED)


@async_test
async def test_one_callback_many_registrations_fires_once(zk_connect: str) -> None:
    async with session(zk_connect) as s, session(zk_connect) as other:
        await s.create("/n", b"")
        rec = Recorder()
        for _ in range(20):
            await s.get("/n", watch=rec)
            await s.exists("/n", watch=rec)
            await s.get_children("/n", watch=rec)
        await other.delete("/n")  # fires the data and the child watch: one event
        assert await rec.wait_for(1) == [WatchEvent(EventType.DELETED, "/n")]
        await other.create("/n", b"")
        await asyncio.sleep(0.2)
        assert rec.items == [WatchEvent(EventType.DELETED, "/n")]


@async_test
async def test_recursive_delete_of_a_big_subtree(zk_connect: str) -> None:
    """Subtrees above `max_atomic_delete` nodes go bottom-up in several multi-ops; the
    version of the top node is still checked before anything is deleted."""
    async with session(zk_connect) as s:
        s.max_atomic_delete = 4
        nodes = [f"/t/{a}/{b}" for a in "abc" for b in "xyz"]
        for p in nodes:
            await s.create(p, b"", make_parents=True)
        await s.create("/keep", b"")
        await s.set("/t", b"v1")
        with pytest.raises(BadVersionError):
            await s.delete("/t", version=0, recursive=True)
        assert len(await s.get_children("/t/b")) == 3
        await s.delete("/t", version=1, recursive=True)
        assert await s.get_children("/") == ["keep"]
        with pytest.raises(NoNodeError):
            await s.delete("/t", recursive=True)
