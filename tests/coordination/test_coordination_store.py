"""`MetadataStore` contract tests, run against every implementation (see conftest.py)."""

from __future__ import annotations

import asyncio

import pytest
from coord_helpers import Recorder, StoreBackend, async_test

from wherry.coordination.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStore,
    MultiOp,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionClosedError,
    SessionExpiredError,
    SessionState,
    SetOp,
    Stat,
    WatchEvent,
)


@async_test
async def test_session_implements_protocol(store_backend: StoreBackend) -> None:
    a = await store_backend.new_session()
    b = await store_backend.new_session()
    assert isinstance(a, MetadataStore)
    assert a.session_id != 0 and b.session_id != 0 and a.session_id != b.session_id
    assert a.state is SessionState.CONNECTED


# ------------------------------------------------------------------------------ CRUD


@async_test
async def test_create_get_set_delete(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    assert await s.create("/a", b"hello") == "/a"
    data, stat = await s.get("/a")
    assert data == b"hello"
    assert isinstance(stat, Stat)
    assert (stat.version, stat.cversion, stat.num_children) == (0, 0, 0)
    assert stat.data_length == 5 and stat.ephemeral_owner == 0
    assert stat.ctime_ms == stat.mtime_ms and stat.czxid == stat.mzxid

    stat2 = await s.set("/a", b"world!")
    assert stat2.version == 1 and stat2.data_length == 6
    assert stat2.mzxid > stat.mzxid and stat2.czxid == stat.czxid
    assert stat2.mtime_ms >= stat.mtime_ms and stat2.ctime_ms == stat.ctime_ms
    assert await s.get("/a") == (b"world!", stat2)
    assert await s.exists("/a") == stat2

    await s.delete("/a")
    assert await s.exists("/a") is None
    with pytest.raises(NoNodeError):
        await s.get("/a")


@async_test
async def test_missing_nodes_and_parents(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    with pytest.raises(NoNodeError):
        await s.create("/x/y", b"")
    assert await s.exists("/x") is None
    with pytest.raises(NoNodeError):
        await s.set("/x", b"v")
    with pytest.raises(NoNodeError):
        await s.delete("/x")
    with pytest.raises(NoNodeError):
        await s.get_children("/x")

    assert await s.create("/x/y/z", b"leaf", make_parents=True) == "/x/y/z"
    for parent in ("/x", "/x/y"):
        data, stat = await s.get(parent)
        assert data == b"" and stat.ephemeral_owner == 0 and stat.num_children == 1
    assert (await s.get("/x/y/z"))[0] == b"leaf"


@async_test
async def test_create_existing_raises(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/a", b"1")
    with pytest.raises(NodeExistsError):
        await s.create("/a", b"2")
    with pytest.raises(NodeExistsError):
        await s.create("/a", b"2", make_parents=True)
    assert (await s.get("/a"))[0] == b"1"


@async_test
async def test_create_errors_name_no_multi_op(store_backend: StoreBackend) -> None:
    """A create (with its missing parents) is written as one multi, yet what it raises is the
    create's own error, with no ``op_index``."""
    s = await store_backend.new_session()
    await s.create("/e", b"", ephemeral=True)
    await s.create("/p/q", b"", make_parents=True)
    cases: list[tuple[str, bool, type[Exception]]] = [
        ("/p/q", False, NodeExistsError),
        ("/p/q", True, NodeExistsError),
        ("/m/n", False, NoNodeError),
        ("/e/c", False, NoChildrenForEphemeralsError),
        ("/e/c/d", True, NoChildrenForEphemeralsError),
    ]
    for path, make_parents, error in cases:
        with pytest.raises(error) as info:
            await s.create(path, b"x", make_parents=make_parents)
        assert info.value.op_index is None, (path, make_parents)
    assert await s.exists("/m") is None and await s.exists("/e/c") is None
    made = await s.create("/s/t/n-", b"", sequential=True, make_parents=True)
    assert made.startswith("/s/t/n-") and made[len("/s/t/n-") :].isdigit()
    assert await s.get_children("/s/t") == [made.rsplit("/", 1)[1]]


@async_test
async def test_invalid_paths_rejected(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    for bad in ("a", "/a/", "//a", "/a//b", "/a/./b", "/a/../b", ""):
        with pytest.raises(ValueError):
            await s.create(bad, b"")
        with pytest.raises(ValueError):
            await s.exists(bad)


@async_test
async def test_children_sorted_and_cversion(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/p", b"")
    for name in ("c", "a", "b10", "b2"):
        await s.create(f"/p/{name}", b"")
    assert await s.get_children("/p") == ["a", "b10", "b2", "c"]
    _, stat = await s.get("/p")
    assert (stat.cversion, stat.num_children, stat.version) == (4, 4, 0)
    await s.delete("/p/a")
    _, stat = await s.get("/p")
    assert (stat.cversion, stat.num_children) == (5, 3)
    await s.set("/p/c", b"x")  # a child's data change does not touch cversion
    assert (await s.get("/p"))[1].cversion == 5


# ------------------------------------------------------------------------------ versions


@async_test
async def test_conditional_set(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/c", b"v0")
    assert (await s.set("/c", b"v1", version=0)).version == 1
    with pytest.raises(BadVersionError):
        await s.set("/c", b"stale", version=0)
    data, stat = await s.get("/c")
    assert (data, stat.version) == (b"v1", 1)
    assert (await s.set("/c", b"v2", version=-1)).version == 2


@async_test
async def test_conditional_delete(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/c", b"")
    await s.set("/c", b"x")
    with pytest.raises(BadVersionError):
        await s.delete("/c", version=0)
    assert await s.exists("/c") is not None
    await s.delete("/c", version=1)
    assert await s.exists("/c") is None


@async_test
async def test_delete_non_empty_and_recursive(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    for p in ("/t/a/x", "/t/a/y", "/t/b"):
        await s.create(p, b"d", make_parents=True)
    await s.create("/keep", b"")
    with pytest.raises(NotEmptyError):
        await s.delete("/t")
    with pytest.raises(NotEmptyError):
        await s.delete("/t/a")
    assert await s.get_children("/t/a") == ["x", "y"]

    with pytest.raises(BadVersionError):
        await s.delete("/t", version=3, recursive=True)
    assert await s.exists("/t/a/x") is not None

    await s.delete("/t", recursive=True)
    for p in ("/t", "/t/a", "/t/a/x", "/t/a/y", "/t/b"):
        assert await s.exists(p) is None
    assert await s.exists("/keep") is not None
    with pytest.raises(NoNodeError):
        await s.delete("/t", recursive=True)
    await s.create("/leaf", b"")
    await s.delete("/leaf", recursive=True)  # a leaf is fine too
    assert await s.exists("/leaf") is None


# ------------------------------------------------------------------------------ sequential


@async_test
async def test_sequential_nodes(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/q", b"")
    first = await s.create("/q/item-", b"a", sequential=True)
    second = await s.create("/q/item-", b"b", sequential=True)
    assert first == "/q/item-0000000000"
    assert second == "/q/item-0000000001"
    await s.create("/q/plain", b"")  # the counter is the parent's cversion
    await s.delete(first)
    third = await s.create("/q/item-", b"c", sequential=True)
    eph = await s.create("/q/e-", b"", sequential=True, ephemeral=True)
    nameless = await s.create("/q/", b"", sequential=True)
    assert (await s.get(eph))[1].ephemeral_owner == s.session_id
    if store_backend.sequence_counts_deletes:
        assert third == "/q/item-0000000004"
        assert eph == "/q/e-0000000005"
        assert nameless == "/q/0000000006"
    else:
        # ZooKeeper 3.8 numbers from its request processor's record of the parent, which a
        # delete leaves at the old cversion: deletes need not advance the counter, but
        # numbers only grow and are never reused.
        paths = [second, third, eph, nameless]
        assert [p[:-10] for p in paths] == ["/q/item-", "/q/item-", "/q/e-", "/q/"]
        numbers = [int(p[-10:]) for p in paths]
        assert numbers == sorted(set(numbers)) and numbers[1] >= 3
    assert await s.get_children("/q") == sorted(
        name.rsplit("/", 1)[1] for name in (second, third, eph, nameless, "/q/plain")
    )


# ------------------------------------------------------------------------------ multi


@async_test
async def test_multi_commits_all_ops_in_order(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/controller_epoch", b"1")
    await s.create("/old", b"")
    results = await s.multi(
        [
            CheckOp("/controller_epoch", 0),
            CreateOp("/new", b"n"),
            SetOp("/new", b"n2", version=0),  # sees the create above
            CreateOp("/new/seq-", b"", sequential=True),
            DeleteOp("/old"),
            CreateOp("/eph", b"", ephemeral=True),
        ]
    )
    assert results[0] is True
    assert results[1] == "/new"
    assert isinstance(results[2], Stat) and results[2].version == 1
    assert results[3] == "/new/seq-0000000000"
    assert results[4] is True and results[5] == "/eph"
    data, stat = await s.get("/new")
    assert (data, stat.version, stat.num_children) == (b"n2", 1, 1)
    assert await s.exists("/old") is None
    assert (await s.get("/eph"))[1].ephemeral_owner == s.session_id
    # one transaction: every node it touched carries the same zxid
    assert (await s.get("/eph"))[1].czxid == results[2].mzxid == results[2].czxid
    assert await s.multi([]) == []


@async_test
async def test_multi_failing_check_rolls_back_everything(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/controller_epoch", b"5")
    await s.set("/controller_epoch", b"6")  # version 1
    await s.create("/state", b"s0")
    await s.create("/doomed", b"")
    _, parent_before = await s.get("/")
    watcher = Recorder()
    await s.get("/state", watch=watcher)

    ops: list[MultiOp] = [
        SetOp("/state", b"s1"),
        CreateOp("/fresh", b""),
        DeleteOp("/doomed"),
        CheckOp("/controller_epoch", 0),  # stale epoch version -> fails
    ]
    with pytest.raises(BadVersionError) as info:
        await s.multi(ops)
    assert info.value.op_index == 3
    data, stat = await s.get("/state")
    assert (data, stat.version) == (b"s0", 0)
    assert await s.exists("/fresh") is None
    assert await s.exists("/doomed") is not None
    _, parent_after = await s.get("/")
    assert parent_after.cversion == parent_before.cversion
    await store_backend.settle()
    assert watcher.items == []  # nothing committed, nothing fired

    with pytest.raises(NodeExistsError) as info2:
        await s.multi([CreateOp("/fresh", b""), CreateOp("/state", b"")])
    assert info2.value.op_index == 1
    assert await s.exists("/fresh") is None
    with pytest.raises(NoNodeError) as info3:
        await s.multi([CheckOp("/nope")])
    assert info3.value.op_index == 0


# ------------------------------------------------------------------------------ ephemerals


@async_test
async def test_ephemeral_removed_on_close(store_backend: StoreBackend) -> None:
    owner = await store_backend.new_session()
    other = await store_backend.new_session()
    await other.create("/brokers/ids", b"", make_parents=True)
    await owner.create("/brokers/ids/1", b"b1", ephemeral=True)
    stat = await other.exists("/brokers/ids/1")
    assert stat is not None and stat.ephemeral_owner == owner.session_id
    with pytest.raises(NoChildrenForEphemeralsError):
        await owner.create("/brokers/ids/1/child", b"")

    gone = Recorder()
    children = Recorder()
    await other.exists("/brokers/ids/1", watch=gone)
    await other.get_children("/brokers/ids", watch=children)
    await owner.close()
    await owner.close()  # idempotent
    assert owner.state is SessionState.CLOSED
    assert await other.exists("/brokers/ids/1") is None
    assert await gone.wait_for(1) == [WatchEvent(EventType.DELETED, "/brokers/ids/1")]
    assert await children.wait_for(1) == [WatchEvent(EventType.CHILD, "/brokers/ids")]
    with pytest.raises(SessionClosedError):
        await owner.create("/x", b"")
    with pytest.raises(SessionExpiredError):  # SessionClosedError is-a SessionExpiredError
        await owner.get("/brokers/ids")


@async_test
async def test_ephemeral_removed_on_expire(store_backend: StoreBackend) -> None:
    owner = await store_backend.new_session()
    other = await store_backend.new_session()
    states = Recorder()
    owner.add_state_listener(states)
    await owner.create("/controller", b"c", ephemeral=True)
    await owner.create("/persistent", b"p")
    own_watch = Recorder()
    await owner.exists("/persistent", watch=own_watch)
    seen = Recorder()
    await other.get("/controller", watch=seen)

    await store_backend.expire(owner)
    if store_backend.expiry_seen_after_disconnect:
        # ZooKeeper tells a client its session expired when it reconnects: SUSPENDED first.
        assert await states.wait_for(2) == [SessionState.SUSPENDED, SessionState.EXPIRED]
    else:
        assert await states.wait_for(1) == [SessionState.EXPIRED]
    assert owner.state is SessionState.EXPIRED
    assert await seen.wait_for(1) == [WatchEvent(EventType.DELETED, "/controller")]
    assert await other.exists("/controller") is None
    assert await other.exists("/persistent") is not None
    with pytest.raises(SessionExpiredError):
        await owner.set("/persistent", b"x")
    with pytest.raises(SessionExpiredError):
        await owner.create("/controller", b"again", ephemeral=True)
    await other.set("/persistent", b"changed")
    await store_backend.settle()
    assert own_watch.items == []  # an expired session's watches are gone


@async_test
async def test_ephemeral_deleted_by_another_session(store_backend: StoreBackend) -> None:
    owner = await store_backend.new_session()
    other = await store_backend.new_session()
    await owner.create("/controller", b"", ephemeral=True)
    await other.delete("/controller")
    await other.create("/controller", b"mine", ephemeral=True)
    await owner.close()  # must not remove the node now owned by `other`
    _, stat = await other.get("/controller")
    assert stat.ephemeral_owner == other.session_id


# ------------------------------------------------------------------------------ watches


@async_test
async def test_data_watch_fires_once(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/w", b"0")
    rec = Recorder()
    await s.get("/w", watch=rec)
    await s.set("/w", b"1")
    await s.set("/w", b"2")
    assert await rec.wait_for(1) == [WatchEvent(EventType.CHANGED, "/w")]
    await store_backend.settle()
    assert len(rec.items) == 1

    await s.get("/w", watch=rec)  # re-arm, then delete
    await s.delete("/w")
    assert (await rec.wait_for(2))[1] == WatchEvent(EventType.DELETED, "/w")


@async_test
async def test_watch_sees_committed_state(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/w", b"old")
    observed: asyncio.Queue[bytes] = asyncio.Queue()

    def on_change(event: WatchEvent) -> None:
        async def reread() -> None:
            observed.put_nowait((await s.get(event.path))[0])

        asyncio.get_running_loop().create_task(reread())

    await s.get("/w", watch=on_change)
    await s.set("/w", b"new")
    assert await asyncio.wait_for(observed.get(), 5) == b"new"


@async_test
async def test_exists_watch(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    rec = Recorder()
    assert await s.exists("/later", watch=rec) is None
    await s.create("/later", b"")
    assert await rec.wait_for(1) == [WatchEvent(EventType.CREATED, "/later")]
    assert await s.exists("/later", watch=rec) is not None
    await s.set("/later", b"x")
    assert (await rec.wait_for(2))[1] == WatchEvent(EventType.CHANGED, "/later")
    await s.exists("/later", watch=rec)
    await s.delete("/later")
    assert (await rec.wait_for(3))[2] == WatchEvent(EventType.DELETED, "/later")
    await store_backend.settle()
    assert len(rec.items) == 3


@async_test
async def test_get_on_missing_node_sets_no_watch(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    rec = Recorder()
    with pytest.raises(NoNodeError):
        await s.get("/m", watch=rec)
    with pytest.raises(NoNodeError):
        await s.get_children("/m", watch=rec)
    await s.create("/m", b"")
    await s.create("/m/c", b"")
    await store_backend.settle()
    assert rec.items == []


@async_test
async def test_child_watch(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/topics", b"")
    rec = Recorder()
    assert await s.get_children("/topics", watch=rec) == []
    await s.create("/topics/a", b"")
    await s.create("/topics/b", b"")
    assert await rec.wait_for(1) == [WatchEvent(EventType.CHILD, "/topics")]
    await s.set("/topics", b"data change is not a child event")
    await store_backend.settle()
    assert len(rec.items) == 1

    assert await s.get_children("/topics", watch=rec) == ["a", "b"]
    await s.set("/topics/a", b"grandchild data change is not a child event")
    await s.delete("/topics/a")
    assert (await rec.wait_for(2))[1] == WatchEvent(EventType.CHILD, "/topics")

    await s.get_children("/topics", watch=rec)
    await s.delete("/topics", recursive=True)
    events = await rec.wait_for(3)
    assert events[2] in (
        WatchEvent(EventType.CHILD, "/topics"),  # child b went first
        WatchEvent(EventType.DELETED, "/topics"),
    )
    await store_backend.settle()
    assert len(rec.items) == 3


@async_test
async def test_watches_are_per_session(store_backend: StoreBackend) -> None:
    a = await store_backend.new_session()
    b = await store_backend.new_session()
    await a.create("/shared", b"")
    rec_a, rec_b, both = Recorder(), Recorder(), Recorder()
    await a.get("/shared", watch=rec_a)
    await b.exists("/shared", watch=rec_b)
    await a.get("/shared", watch=both)
    await b.get("/shared", watch=both)
    await a.get("/shared", watch=both)  # same session + callback + path: fires once
    await b.set("/shared", b"x")
    changed = WatchEvent(EventType.CHANGED, "/shared")
    assert await rec_a.wait_for(1) == [changed]
    assert await rec_b.wait_for(1) == [changed]
    assert await both.wait_for(2) == [changed, changed]  # once for each session
    await store_backend.settle()
    assert len(both.items) == 2


@async_test
async def test_restart_keeps_persistent_drops_ephemeral(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await s.create("/brokers/ids", b"", make_parents=True)
    await s.create("/brokers/topics/t", b'{"version":2}', make_parents=True)
    await s.set("/brokers/topics/t", b'{"version":2,"partitions":{}}')
    await s.create("/brokers/ids/1", b"b1", ephemeral=True)
    first_seq = await s.create("/brokers/ids/seq-", b"", sequential=True)
    data_before, stat_before = await s.get("/brokers/topics/t")

    await store_backend.restart()

    s2 = await store_backend.new_session()
    data, stat = await s2.get("/brokers/topics/t")
    assert data == data_before
    assert (stat.version, stat.czxid, stat.mzxid) == (1, stat_before.czxid, stat_before.mzxid)
    assert await s2.exists("/brokers/ids/1") is None
    assert await s2.get_children("/brokers/ids") == [first_seq.rsplit("/", 1)[1]]
    # sequence numbers are never reused
    assert await s2.create("/brokers/ids/seq-", b"", sequential=True) > first_seq
    assert (await s2.create("/after", b"")) == "/after"
    assert (await s2.get("/after"))[1].czxid > stat_before.mzxid


@async_test
async def test_rolled_back_multi_keeps_ephemeral_ownership(store_backend: StoreBackend) -> None:
    owner = await store_backend.new_session()
    other = await store_backend.new_session()
    await owner.create("/mine", b"", ephemeral=True)
    with pytest.raises(NoNodeError):
        await owner.multi([CreateOp("/half", b"", ephemeral=True), CheckOp("/missing")])
    with pytest.raises(NoNodeError):
        await other.multi([DeleteOp("/mine"), CheckOp("/missing")])
    assert await other.exists("/half") is None
    await store_backend.expire(owner)
    assert await other.exists("/mine") is None
    assert await other.get_children("/") == []
