"""Once a Produce request's records are in the log, the handler lets go of their views of
the request's receive buffer (Kafka clears a produce request's records once appended), so a
request whose acks=all answer is parked does not keep that buffer from being reused."""

from __future__ import annotations

import ctypes

from wherry.common.topic_partition import TopicPartition
from wherry.server.handlers.produce import _release_records


def _resizable(buf: bytearray) -> bool:
    try:
        buf.append(0)
    except BufferError:
        return False
    del buf[-1]
    return True


def test_views_of_the_receive_buffer_are_let_go() -> None:
    frame = bytearray(b"x" * 64)
    view = memoryview(frame)
    records = view[8:40]
    del view
    entries: dict[TopicPartition, object] = {
        TopicPartition("t", 0): records,
        TopicPartition("t", 1): b"copied",
        TopicPartition("t", 2): None,
    }
    assert not _resizable(frame)  # the records' view holds the buffer
    _release_records(entries)
    assert _resizable(frame)
    assert entries[TopicPartition("t", 1)] == b"copied"


def test_another_reader_of_the_records_keeps_its_bytes() -> None:
    frame = bytearray(b"abcdefgh" * 4)
    records = memoryview(frame)[4:20]
    reader = (ctypes.c_char * 16).from_buffer(records)  # a view of its own
    _release_records({TopicPartition("t", 0): records})
    assert reader.raw == bytes(frame[4:20])
    assert not _resizable(frame)  # the reader still holds the buffer
    del reader
    assert _resizable(frame)
