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
    # in one feed: frame 3 reuses frame 2's buffer, frame 4 cannot (frame 3 is out)
    v3, v4 = dec.feed(encode_frame(payloads[2]) + encode_frame(payloads[3]))
    assert v3.obj is buf2 and v4.obj is not buf2
    assert [bytes(v) for v in (v1, v3, v4)] == [payloads[0], payloads[2], payloads[3]]
    assert len(v3) == len(payloads[2]) and v3.readonly
    # small frames get their own buffers
    (s1,) = dec.feed(encode_frame(b"abc"))
    assert bytes(s1) == b"abc"
