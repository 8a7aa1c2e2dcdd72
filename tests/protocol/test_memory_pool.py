"""The request memory pool and the frame decoder's use of it: a frame's bytes are reserved as
they arrive, a window at a time, never the size the frame announces; an exhausted pool makes
the decoder say it needs memory, and a release lets it go on; what a frame held goes back."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from wherry.protocol.framing import BufferRecycler, FrameDecoder, encode_frame
from wherry.protocol.memory_pool import UNBOUNDED_AVAILABLE, MemoryPool

MiB = 1 << 20


def test_unbounded_pool_grants_everything() -> None:
    for capacity in (None, -1, 0):
        pool = MemoryPool(capacity)
        assert not pool.bounded or capacity == 0
    pool = MemoryPool(None)
    assert pool.try_reserve(10 * MiB) and pool.available == UNBOUNDED_AVAILABLE
    assert not pool.exhausted


def test_bounded_pool_is_non_strict_and_wakes_waiters_in_order() -> None:
    pool = MemoryPool(100)
    assert pool.try_reserve(60)
    assert pool.try_reserve(60)  # granted while anything is left: 120 of 100
    pool.completed(120)  # whole frames: they will be released
    assert pool.exhausted and not pool.try_reserve(1)
    woken: list[tuple[str, bool]] = []

    def waiter(name: str) -> Callable[[bool], bool]:
        def call(overdraft: bool) -> bool:
            woken.append((name, overdraft))
            return overdraft or pool.try_reserve(30)
        return call

    a, b = waiter("a"), waiter("b")
    pool.wait(a)
    pool.wait(b)
    assert woken == []  # whole frames will be released: nobody goes over the bound
    pool.release(10)  # 110: still exhausted, nobody woken
    assert woken == [] and pool.waiting == 2
    pool.release(30)  # 80: a gets 30 (110), b is not asked
    assert woken == [("a", False)] and pool.waiting == 1
    pool.cancel(b)
    pool.release(80)
    assert pool.used == 30 and pool.waiting == 0 and pool.queued == 0
    pool.release(50, whole=False)
    assert pool.used == 0  # never below zero


def test_half_received_frames_filling_the_pool_let_the_oldest_waiter_over_it() -> None:
    """Without the overdraft nothing would complete: every frame waits for memory that only
    a completed frame would give back."""
    pool = MemoryPool(100)
    calls: list[tuple[str, bool]] = []

    def waiter(name: str) -> Callable[[bool], bool]:
        def call(overdraft: bool) -> bool:
            calls.append((name, overdraft))
            if overdraft:
                pool.force_reserve(500)  # the rest of its frame
                return True
            return pool.try_reserve(10)
        return call

    assert pool.try_reserve(60) and pool.try_reserve(60)  # two half frames
    first, second = waiter("first"), waiter("second")
    pool.wait(first)
    assert calls == [("first", True)]  # goes over the bound with its whole frame
    pool.wait(second)
    assert calls == [("first", True)]  # one overdraft at a time
    pool.completed(560)  # first's frame is whole...
    pool.end_overdraft()
    assert calls == [("first", True)]  # ...and will be released: second waits for that
    pool.release(560)
    assert calls == [("first", True), ("second", False)]


def test_empty_pool_grants_a_reservation_larger_than_itself() -> None:
    pool = MemoryPool(10)
    assert pool.try_reserve(1000)
    assert not pool.try_reserve(1)


def _announce(dec: FrameDecoder, size: int, body: bytes) -> None:
    buf = dec.get_buffer()
    data = struct.pack(">i", size) + body
    buf[: len(data)] = data
    assert dec.buffer_updated(len(data)) == []


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_an_announced_size_is_not_reserved_up_front() -> None:
    for p in (MemoryPool(None), MemoryPool(200 * MiB)):
        dec = FrameDecoder(max_frame_bytes=100 * MiB, pool=p, lazy=True)
        _announce(dec, 100 * MiB, b"x" * 20)
        assert p.used <= 64 * 1024  # what arrived and one window, not 100 MiB
        assert len(dec.get_buffer()) <= 64 * 1024
        dec.release()
        assert p.used == 0


def test_an_announced_size_takes_no_memory_without_a_pool() -> None:
    """Without a pool the whole frame is the window, but its memory is committed only as
    bytes arrive: five frames announcing 100 MiB each hold a few pages."""
    before = _rss_bytes()
    decoders = []
    for _ in range(5):
        dec = FrameDecoder(max_frame_bytes=100 * MiB, lazy=True)
        _announce(dec, 100 * MiB, b"x" * 20)
        assert len(dec.get_buffer()) == 100 * MiB - 20
        decoders.append(dec)
    assert _rss_bytes() - before < 20 * MiB


def test_windows_follow_the_bytes_and_the_frame_comes_out_whole() -> None:
    pool = MemoryPool(8 * MiB)
    dec = FrameDecoder(pool=pool, lazy=True)
    payload = os.urandom(3 * MiB + 123)
    data = encode_frame(payload)
    frames: list[memoryview] = []
    i = 0
    reserved_seen = []
    while i < len(data):
        buf = dec.get_buffer()
        n = min(len(buf), len(data) - i, 200_000)
        buf[:n] = data[i : i + n]
        i += n
        frames += dec.buffer_updated(n)
        reserved_seen.append(pool.used)
        if not frames:  # never more than twice what arrived, plus the first window
            assert pool.used <= 2 * i + 64 * 1024
    (frame,) = frames
    assert bytes(frame) == payload
    assert pool.used == len(payload)  # the handled frame gives it back
    pool.release(len(frame))
    assert pool.used == 0


def test_exhausted_pool_stops_the_decoder_until_memory_is_released() -> None:
    pool = MemoryPool(1 * MiB)
    assert pool.try_reserve(1 * MiB)  # someone else holds it all
    dec = FrameDecoder(pool=pool, lazy=True)
    payload = os.urandom(300_000)
    data = encode_frame(payload)
    buf = dec.get_buffer()
    buf[:50_000] = data[:50_000]
    assert dec.buffer_updated(50_000) == []
    assert dec.needs_memory  # the 50,000 bytes are counted; nothing more is granted
    assert pool.used == 1 * MiB + 50_000 - 4
    assert not dec.grow()
    pool.release(1 * MiB)
    assert dec.grow() and not dec.needs_memory
    i = 50_000
    frames: list[memoryview] = []
    while i < len(data):
        if dec.needs_memory:
            assert dec.grow()
        buf = dec.get_buffer()
        n = min(len(buf), len(data) - i)
        buf[:n] = data[i : i + n]
        i += n
        frames += dec.buffer_updated(n)
    assert [bytes(f) for f in frames] == [payload]
    assert pool.used == len(payload)


def test_between_frames_an_exhausted_pool_needs_memory() -> None:
    pool = MemoryPool(100)
    dec = FrameDecoder(pool=pool, lazy=True)
    (frame,) = dec.feed(encode_frame(b"y" * 150))
    assert pool.used == 150 and dec.needs_memory and not dec.grow()
    pool.release(len(frame))
    assert not dec.needs_memory and dec.grow()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.binary(max_size=3000), max_size=8),
    st.integers(1, 5000),
    st.integers(1, 4000),
)
def test_any_pool_and_chunking_yield_the_same_frames(
    frames: list[bytes], chunk: int, capacity: int
) -> None:
    """Whatever the pool's size, frames come out whole; handled frames give all back."""
    pool = MemoryPool(capacity)
    dec = FrameDecoder(pool=pool, lazy=True)
    data = b"".join(encode_frame(f) for f in frames)
    out: list[bytes] = []
    i = 0
    while i < len(data):
        if dec.needs_memory and not dec.grow():
            # handle (release) what came out so far, as a connection's requests are handled
            assert out or pool.used > 0
            pool.release(pool.used - dec.reserved_bytes)  # whole frames only
            if not dec.grow():
                # The frame being received alone fills the pool: only the overdraft (which
                # the network gives the oldest waiter) lets it finish.
                assert pool.used == dec.reserved_bytes and dec.grow(overdraft=True)
        buf = dec.get_buffer()
        n = min(len(buf), chunk, len(data) - i)
        buf[:n] = data[i : i + n]
        i += n
        out += [bytes(v) for v in dec.buffer_updated(n)]
    assert out == frames
    assert dec.reserved_bytes == 0


def test_buffers_let_go_serve_another_decoder_once_released() -> None:
    """Buffers a decoder drops from its spares (or leaves behind when its connection closes)
    go to the server's recycler; another decoder uses one once no view of it lives, instead
    of a fresh mapping."""
    recycler = BufferRecycler(limit=8 * MiB)
    first = FrameDecoder(recycler=recycler, lazy=True)
    payloads = [bytes([i]) * 1_500_000 for i in range(4)]
    held = [v for p in payloads for v in first.feed(encode_frame(p))]
    assert recycler.kept_bytes > 0  # 4 x 1.5 MB do not fit in 4 MiB of spares
    buffers = {id(v.obj) for v in held}
    second = FrameDecoder(recycler=recycler, lazy=True)
    (busy,) = second.feed(encode_frame(bytes(1_400_000)))
    assert id(busy.obj) not in buffers  # all still held: a fresh one
    del held
    (again,) = second.feed(encode_frame(bytes(1_400_000)))
    assert id(again.obj) in buffers and bytes(again) == bytes(1_400_000)
    first.release()  # its connection closed: its spares go to the recycler too
    assert recycler.kept_bytes <= 8 * MiB
