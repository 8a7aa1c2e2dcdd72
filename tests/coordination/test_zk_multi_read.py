"""`ZooKeeperStore.get_many` (ZooKeeper's multiRead, `coordination/zk_multi_read.py`) against a
real ZooKeeper server: what it answers must be what one getData per node answers."""

from __future__ import annotations

import pytest
from coord_helpers import async_test

from wherry.coordination import connect_zookeeper
from wherry.coordination import zookeeper as zk_module
from wherry.coordination.store import BatchReader, CreateOp, SessionClosedError


@async_test
async def test_get_many_answers_as_get_does_missing_nodes_none_in_several_requests(
    zk_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(zk_module, "MULTI_READ_CHUNK", 7)  # 25 paths: four requests
    s = await connect_zookeeper(zk_connect, session_timeout_ms=10_000, connect_timeout_s=5.0)
    try:
        assert isinstance(s, BatchReader)
        await s.create("/p", b"")
        await s.multi([CreateOp(f"/p/{i}", f"state {i}".encode() * i) for i in range(20)])
        await s.set("/p/3", b"changed")  # version 1
        paths = [f"/p/{i}" for i in range(20)] + [f"/p/missing-{i}" for i in range(4)] + ["/p"]
        paths.insert(5, "/p/missing-x")
        got = await s.get_many(paths)
        assert len(got) == len(paths)
        for path, read in zip(paths, got, strict=True):
            if "missing" in path:
                assert read is None, path
                continue
            assert read is not None, path
            assert read == await s.get(path), path  # data and the whole stat
        assert got[paths.index("/p/3")] is not None
        assert got[paths.index("/p/3")][1].version == 1  # type: ignore[index]
        assert await s.get_many([]) == []
    finally:
        await s.close()
    with pytest.raises(SessionClosedError):
        await s.get_many(["/p/1"])


@async_test
async def test_get_many_reads_the_session_chroot(zk_connect: str, zk_chroot: str) -> None:
    """Paths are the session's (chrooted) ones, as for `get`."""
    outer = zk_connect[: -len(zk_chroot)]
    s = await connect_zookeeper(zk_connect, session_timeout_ms=10_000, connect_timeout_s=5.0)
    root = await connect_zookeeper(outer, session_timeout_ms=10_000, connect_timeout_s=5.0)
    try:
        await s.create("/a", b"inside")
        assert (await root.get(f"{zk_chroot}/a"))[0] == b"inside"
        [inside] = await s.get_many(["/a"])
        assert inside is not None and inside[0] == b"inside"
        assert await root.get_many(["/a"]) == [None]
    finally:
        await s.close()
        await root.close()
