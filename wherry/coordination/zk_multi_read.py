"""ZooKeeper's multiRead (op code 22, ZooKeeper 3.6+) as a kazoo request: the data and stat of
many nodes in one request and one answer, where kazoo would send one getData each.

kazoo (2.11) has no multiRead; it sends any object with ``type``, ``serialize()`` and
``deserialize(buffer, offset)`` through ``KazooClient._call``. The request is ZooKeeper's
``MultiOperationRecord`` of getData operations (no watches); the answer a ``MultiResponse``:
per node a ``MultiHeader`` then either a ``GetDataResponse`` (data, stat) or, for a node that
failed (missing, no read permission), an ``ErrorResult``. Unlike a write transaction the reads
are independent: one missing node does not fail the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeAlias

from kazoo.exceptions import EXCEPTIONS, KazooException
from kazoo.protocol.serialization import (
    int_struct,
    multiheader_struct,
    read_buffer,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat

__all__ = ["MULTI_READ_OP", "MultiRead", "NodeRead"]

MULTI_READ_OP: Final = 22
_GET_DATA_OP: Final = 4
_ERROR_OP: Final = -1

NodeRead: TypeAlias = "tuple[bytes, ZnodeStat] | KazooException"
"""One node's answer: its data and stat, or kazoo's exception for its error code."""


class MultiRead:
    """getData of every path in ``paths`` (absolute, chroot already prefixed), in one request;
    the answer is one `NodeRead` per path, in order."""

    type = MULTI_READ_OP

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)

    def __repr__(self) -> str:
        return f"MultiRead({len(self.paths)} paths)"

    def serialize(self) -> bytearray:
        b = bytearray()
        head = multiheader_struct.pack(_GET_DATA_OP, False, -1)
        for path in self.paths:
            b += head
            b += write_string(path)
            b.append(0)  # no watch
        b += multiheader_struct.pack(-1, True, -1)
        return b

    def deserialize(self, buffer: bytes, offset: int) -> list[NodeRead]:
        out: list[NodeRead] = []
        while True:
            op, done, _err = multiheader_struct.unpack_from(buffer, offset)
            offset += multiheader_struct.size
            if done:
                break
            if op == _GET_DATA_OP:
                data, offset = read_buffer(buffer, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buffer, offset))
                offset += stat_struct.size
                out.append((data or b"", stat))
            elif op == _ERROR_OP:
                code = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                out.append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"unexpected operation {op} in a multiRead answer")
        if len(out) != len(self.paths):
            raise ValueError(f"multiRead answered {len(out)} of {len(self.paths)} reads")
        return out
