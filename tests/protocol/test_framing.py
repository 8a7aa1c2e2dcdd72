import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wherry.protocol.framing import FrameDecoder, FrameError, FrameTooLarge, encode_frame


def test_frames_split_across_reads() -> None:
    data = encode_frame(b"hello") + encode_frame(b"") + encode_frame(b"world!")
    dec = FrameDecoder()
    out: list[bytes] = []
    for i in range(len(data)):
        out += dec.feed(data[i : i + 1])
    assert out == [b"hello", b"", b"world!"]
    assert dec.buffered_bytes == 0


def test_many_frames_in_one_read() -> None:
    frames = [bytes([i]) * i for i in range(50)]
    dec = FrameDecoder()
    assert dec.feed(b"".join(encode_frame(f) for f in frames)) == frames


def test_oversized_frame_rejected_before_buffering() -> None:
    dec = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(FrameTooLarge) as e:
        dec.feed(struct.pack(">i", 1025))
    assert "socket.request.max.bytes=1024" in str(e.value)


def test_negative_size_rejected() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">i", -5))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=10), st.integers(1, 64))
def test_any_chunking_yields_the_same_frames(frames: list[bytes], chunk: int) -> None:
    data = b"".join(encode_frame(f) for f in frames)
    dec = FrameDecoder()
    out: list[bytes] = []
    for i in range(0, len(data), chunk):
        out += dec.feed(data[i : i + chunk])
    assert out == frames


def test_large_frame_buffers_reused_only_once_released() -> None:
    """A held frame is never overwritten by later ones; a released buffer serves again."""
    dec = FrameDecoder()
    payloads = [bytes([i]) * (100_000 - i) for i in range(4)]
    (v1,) = dec.feed(encode_frame(payloads[0]))
    (v2,) = dec.feed(encode_frame(payloads[1]))
    assert v2.obj is not v1.obj  # v1 still held
    assert bytes(v1) == payloads[0] and bytes(v2) == payloads[1]
    buf2 = v2.obj
    del v2
    # in one feed: frame 3 reuses frame 2's buffer, frame 4 cannot (frames 1 and 3 are out)
    v3, v4 = dec.feed(encode_frame(payloads[2]) + encode_frame(payloads[3]))
    assert v3.obj is buf2 and v4.obj is not buf2 and v4.obj is not v1.obj
    assert [bytes(v) for v in (v1, v3, v4)] == [payloads[0], payloads[2], payloads[3]]
    # writable: the frame's own buffer (the produce path assigns offsets in place)
    assert len(v3) == len(payloads[2]) and not v3.readonly
    # small frames get their own buffers
    (s1,) = dec.feed(encode_frame(b"abc"))
    assert bytes(s1) == b"abc"


def test_several_large_buffers_kept_within_the_limit() -> None:
    """Requests in flight each hold a buffer; once released, all of them serve again (no new
    memory), and what is kept stays within 4 MiB."""
    dec = FrameDecoder()
    payloads = [bytes([i]) * 900_000 for i in range(3)]
    held = [v for p in payloads for v in dec.feed(encode_frame(p))]
    buffers = {id(v.obj) for v in held}
    assert len(buffers) == 3
    del held
    again = [v for p in payloads for v in dec.feed(encode_frame(p))]
    assert {id(v.obj) for v in again} == buffers
    assert [bytes(v) for v in again] == payloads
    del again
    big = [v for _ in range(6) for v in dec.feed(encode_frame(bytes(1_500_000)))]
    assert sum(len(b) for b in dec._spares) <= 4 * 1024 * 1024
    assert all(bytes(v) == bytes(1_500_000) for v in big)


def _receive(dec: FrameDecoder, data: bytes, chunk: int) -> list[memoryview]:
    """What a BufferedProtocol does: recv_into `get_buffer()`, at most `chunk` bytes a read."""
    out: list[memoryview] = []
    i = 0
    while i < len(data):
        buf = dec.get_buffer()
        n = min(len(buf), chunk, len(data) - i)
        buf[:n] = data[i : i + n]
        i += n
        out += dec.buffer_updated(n)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=10), st.integers(1, 64))
def test_receiving_into_the_decoder_yields_the_same_frames(
    frames: list[bytes], chunk: int
) -> None:
    data = b"".join(encode_frame(f) for f in frames)
    assert _receive(FrameDecoder(), data, chunk) == frames


def test_a_large_frame_is_received_into_its_own_buffer() -> None:
    """After the first read (prefix and start of the frame, into the scratch buffer), the
    rest of a large frame is received straight into the frame's buffer."""
    dec = FrameDecoder()
    payload = bytes(range(256)) * 4000
    data = encode_frame(payload) + encode_frame(b"next")
    first = dec.get_buffer()
    first[:1000] = data[:1000]
    assert dec.buffer_updated(1000) == []
    rest = dec.get_buffer()  # the frame's own buffer, from byte 996 of the payload
    assert len(rest) == len(payload) - 996
    rest[:] = data[1000 : 4 + len(payload)]
    (frame,) = dec.buffer_updated(len(rest))
    assert frame.obj is rest.obj and bytes(frame) == payload
    assert _receive(dec, data[4 + len(payload) :], 1 << 20) == [b"next"]


def test_oversized_frame_rejected_when_receiving_into_the_decoder() -> None:
    dec = FrameDecoder(max_frame_bytes=1024)
    buf = dec.get_buffer()
    buf[:4] = struct.pack(">i", 1025)
    with pytest.raises(FrameTooLarge):
        dec.buffer_updated(4)


def test_decoders_sharing_one_scratch_buffer() -> None:
    """A server's connections share one scratch buffer: streams received alternately, a
    read at a time, each into its own decoder, come out whole and unmixed."""
    scratch = bytearray(64 * 1024)
    streams = [
        [bytes([i]) * n for n in (0, 3, 70_000, 5, 200_000, 1)] for i in (1, 2, 3)
    ]
    data = [b"".join(encode_frame(f) for f in frames) for frames in streams]
    decoders = [FrameDecoder(scratch=scratch) for _ in streams]
    got: list[list[bytes]] = [[] for _ in streams]
    pos = [0] * len(streams)
    chunk = 30_000
    while any(p < len(d) for p, d in zip(pos, data, strict=True)):
        for k, dec in enumerate(decoders):
            if pos[k] >= len(data[k]):
                continue
            buf = dec.get_buffer()
            n = min(len(buf), chunk, len(data[k]) - pos[k])
            buf[:n] = data[k][pos[k] : pos[k] + n]
            pos[k] += n
            got[k] += [bytes(v) for v in dec.buffer_updated(n)]
    assert got == streams
    assert all(d._scratch is scratch for d in decoders)


def test_frames_of_varying_sizes_reuse_one_buffer() -> None:
    """A stream of large frames of somewhat different sizes (produce batches, fetch answers),
    each let go before the next: one buffer serves them all (a frame a little larger than
    the last gets no fresh memory, a smaller one takes a buffer it fits in)."""
    dec = FrameDecoder()
    sizes = [900_000, 950_000, 880_000, 990_000, 120_000, 1_000_000, 70_000]
    buffers = set()
    for i, size in enumerate(sizes):
        payload = bytes([i]) * size
        (view,) = dec.feed(encode_frame(payload))
        assert bytes(view) == payload
        buffers.add(id(view.obj))
        del view
    assert len(buffers) == 1


def test_a_frame_takes_the_smallest_free_buffer_it_fits_in() -> None:
    dec = FrameDecoder()
    held = [v for n in (2_000_000, 300_000) for v in dec.feed(encode_frame(bytes(n)))]
    large, small = (v.obj for v in held)
    del held
    (view,) = dec.feed(encode_frame(b"x" * 100_000))
    assert view.obj is small
    del view
    (view,) = dec.feed(encode_frame(b"y" * 1_500_000))
    assert view.obj is large and bytes(view) == b"y" * 1_500_000
