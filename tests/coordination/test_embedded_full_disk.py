"""The embedded metadata store on a full disk (a small tmpfs): a write that fails leaves the
store unchanged, raises `StoreError` naming the file and calls the owner's hook once per
failure; a store whose disk is full opens on the space it keeps in reserve, and without one
fails with one line saying so; once space is freed it opens with everything written before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from wherry.coordination.embedded import METADATA_DIR, RESERVE_FILE, EmbeddedCoordinator
from wherry.coordination.store import NoNodeError, StoreError
from wherry.testing.tmpfs import fill_up


@pytest.fixture
def tmpfs(small_disk: Callable[[int], Path]) -> Path:
    return small_disk(2 << 20)


def test_full_store_disk_is_reported_and_recovers(tmpfs: Path) -> None:
    failures: list[str] = []
    coord = EmbeddedCoordinator(tmpfs, on_write_failure=failures.append)
    session = coord.session()

    async def write(path: str, size: int) -> None:
        await session.create(path, b"v" * size)

    asyncio.run(write("/kept", 100))
    filler = fill_up(tmpfs)
    with pytest.raises(StoreError) as raised:
        for i in range(1000):  # the WAL's preallocated pages absorb a few writes first
            asyncio.run(write(f"/big-{i}", 64 << 10))
    assert len(failures) == 1 and failures[0] == str(raised.value)
    assert str(tmpfs / METADATA_DIR / "metadata.db") in failures[0]
    assert "database or disk is full" in failures[0]
    assert raised.value.__cause__ is not None  # chained to the sqlite error
    coord.close()
    reserve = tmpfs / METADATA_DIR / RESERVE_FILE
    assert reserve.exists()
    # The disk is still full: the store releases its reserve and opens.
    with EmbeddedCoordinator(tmpfs) as reopened:
        assert not reserve.exists()

        async def read_kept(c: EmbeddedCoordinator) -> bytes:
            data, _ = await c.session().get("/kept")
            return data

        assert asyncio.run(read_kept(reopened)) == b"v" * 100
    more = fill_up(tmpfs, name="more.bin")
    # Full again, no reserve left: opening says so, in one line, naming the file.
    with pytest.raises(StoreError) as opening:
        EmbeddedCoordinator(tmpfs)
    message = str(opening.value)
    assert "\n" not in message and "its disk is full" in message
    assert str(tmpfs / METADATA_DIR / "metadata.db") in message
    assert "metadata.log.dir" in message
    filler.unlink()
    more.unlink()
    with EmbeddedCoordinator(tmpfs) as again:
        assert reserve.exists()  # allocated again
        assert asyncio.run(read_kept(again)) == b"v" * 100
        with pytest.raises(NoNodeError):
            asyncio.run(again.session().get(f"/big-{i}"))  # the failed write left no trace
