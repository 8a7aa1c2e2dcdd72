"""Kafka's fixed-size primitive types on the wire (big-endian, as Java's `ByteBuffer` writes
them), each one `struct.Struct` that every codec uses: `wire.Reader` and `wire.Writer`, the
lean request and answer codecs, record batches, frames' size prefixes, segment files. Also the
request header's fixed prefix. Free of kio, so the start can use it before kio is imported."""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "REQUEST_PREFIX",
    "UINT8",
    "UINT16",
    "UINT32",
]

INT8: Final = struct.Struct(">b")
UINT8: Final = struct.Struct(">B")
INT16: Final = struct.Struct(">h")
UINT16: Final = struct.Struct(">H")
INT32: Final = struct.Struct(">i")
UINT32: Final = struct.Struct(">I")
INT64: Final = struct.Struct(">q")
FLOAT64: Final = struct.Struct(">d")

REQUEST_PREFIX: Final = struct.Struct(">hhi")
"""A request header's api key, api version and correlation id."""
