"""Metadata answers (v0-v13) written without kio, and their topics written once.

A Metadata answer for every topic of a large cluster is the biggest answer a broker writes
often: consumers with a pattern subscription, admin clients and `kcat -L` ask for it. Through
kio each of its values is built into an entity and type-checked, about 20 µs a partition, so
10,000 partitions held the event loop for a fifth of a second per request. Here the answer is
written with `wire.Writer`, byte for byte as kio writes it (the tests compare the two on every
version), and a topic's part can be written once (`encode_topic`) and given again as bytes
while the topic does not change (the Metadata handler keeps them; see `TopicParts`).

The mapping is the handler's: `throttle_time`, `brokers`, `cluster_id`, `controller_id`,
`topics`, `cluster_authorized_operations` (v8-v10) and `error_code` (v13); each topic a mapping
with `error_code`, `name`, `topic_id`, `is_internal`, `partitions` and
`topic_authorized_operations`, or the bytes `encode_topic` gave for the same version.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Final

from wherry.protocol.wire import Writer

__all__ = ["FIRST_FLEXIBLE", "TopicParts", "encode_metadata_body", "encode_topic"]

FIRST_FLEXIBLE: Final = 9
_ZERO_UUID: Final = uuid.UUID(int=0)
_PARTITION_HEAD: Final = struct.Struct(">hii")  # error code, index, leader
_PARTITION_HEAD_V7: Final = struct.Struct(">hiii")  # ... and the leader epoch
_AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)


def _ms(value: int | datetime.timedelta) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def _write_partition(w: Writer, version: int, flexible: bool, p: Mapping[str, Any]) -> None:
    if version >= 7:
        w.pack(
            _PARTITION_HEAD_V7,
            p["error_code"],
            p["partition_index"],
            p["leader_id"],
            p.get("leader_epoch", -1),
        )
    else:
        w.pack(_PARTITION_HEAD, p["error_code"], p["partition_index"], p["leader_id"])
    w.int32_array(tuple(p.get("replica_nodes", ())), flexible)
    w.int32_array(tuple(p.get("isr_nodes", ())), flexible)
    if version >= 5:
        w.int32_array(tuple(p.get("offline_replicas", ())), flexible)
    w.end_struct(flexible)


def write_topic(w: Writer, version: int, topic: Mapping[str, Any]) -> None:
    """One topic of a v`version` answer."""
    flexible = version >= FIRST_FLEXIBLE
    w.int16(topic["error_code"])
    if version >= 12:
        w.nullable_string(topic["name"], flexible)
    else:  # not nullable before v12: a topic asked by an unknown id gets ""
        w.string(topic["name"] or "", flexible)
    if version >= 10:
        w.uuid(topic.get("topic_id") or _ZERO_UUID)
    if version >= 1:
        w.boolean(topic.get("is_internal", False))
    partitions = topic.get("partitions", ())
    w.array_length(len(partitions), flexible)
    for p in partitions:
        _write_partition(w, version, flexible, p)
    if version >= 8:
        w.int32(topic.get("topic_authorized_operations", _AUTHORIZED_OPERATIONS_OMITTED))
    w.end_struct(flexible)


def encode_topic(version: int, topic: Mapping[str, Any]) -> bytes:
    """A topic's part of a v`version` answer, to be given back in `topics` as it is."""
    w = Writer()
    write_topic(w, version, topic)
    return w.getvalue()


def encode_metadata_body(version: int, data: Mapping[str, Any]) -> bytes:
    """The body of the v`version` Metadata answer `data` (see the module's docstring)."""
    flexible = version >= FIRST_FLEXIBLE
    w = Writer()
    if version >= 3:
        w.int32(_ms(data.get("throttle_time", 0)))
    brokers = data.get("brokers", ())
    w.array_length(len(brokers), flexible)
    for b in brokers:
        w.int32(b["node_id"])
        w.string(b["host"], flexible)
        w.int32(b["port"])
        if version >= 1:
            w.nullable_string(b.get("rack"), flexible)
        w.end_struct(flexible)
    if version >= 2:
        w.nullable_string(data.get("cluster_id"), flexible)
    if version >= 1:
        w.int32(data.get("controller_id", -1))
    topics = data.get("topics", ())
    w.array_length(len(topics), flexible)
    for t in topics:
        if type(t) is bytes:
            w.raw(t)
        else:
            write_topic(w, version, t)
    if 8 <= version <= 10:
        w.int32(data.get("cluster_authorized_operations", _AUTHORIZED_OPERATIONS_OMITTED))
    if version >= 13:
        w.int16(data.get("error_code", 0))
    w.end_struct(flexible)
    return w.getvalue()


class TopicParts:
    """Topics' parts of answers (`encode_topic`), each kept with the stamp of the state it was
    written from: given again while the caller's stamp for the topic is the same, written
    anew (by `build`) when it is not. One entry per topic, holding each version asked for."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: dict[str, tuple[Hashable, dict[Hashable, bytes]]] = {}

    def __len__(self) -> int:
        return len(self._parts)

    def get(
        self,
        name: str,
        stamp: Hashable,
        version: int,
        variant: Hashable,
        build: Callable[[], Mapping[str, Any]],
    ) -> bytes:
        """Topic `name`'s part of a v`version` answer; `variant` tells apart the parts of one
        version written from the same state in different ways."""
        entry = self._parts.get(name)
        if entry is None or entry[0] != stamp:
            entry = (stamp, {})
            self._parts[name] = entry
        key = (version, variant)
        part = entry[1].get(key)
        if part is None:
            part = entry[1][key] = encode_topic(version, build())
        return part

    def keep_only(self, names: Callable[[str], bool]) -> None:
        """Drop the parts of the topics `names` says are gone."""
        for name in [n for n in self._parts if not names(n)]:
            del self._parts[name]
