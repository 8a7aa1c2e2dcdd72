"""The consumer protocol embedded in classic groups (protocol type "consumer"): Kafka's
ConsumerProtocolSubscription and ConsumerProtocolAssignment, as a classic member's JoinGroup
metadata and SyncGroup assignment carry them.

* Subscription: Version int16, Topics [string], UserData bytes?; v1+ OwnedPartitions [Topic
  string, Partitions [int32]]; v2+ GenerationId int32; v3+ RackId string?.
* Assignment: Version int16, AssignedPartitions [Topic string, Partitions [int32]],
  UserData bytes? (the same fields in v0-v3).

Not flexible. A version above the newest known is read as the newest (Kafka does the same:
later versions only add fields at the end). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from wherry.protocol.wire import DecodeError, Reader, Writer

__all__ = [
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "protocol_version",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
_MAX_ASSIGNMENT_VERSION = 3


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None
    owned: dict[str, frozenset[int]]
    generation_id: int = -1
    rack_id: str | None = None


def protocol_version(data: bytes) -> int:
    """The version at the head of an embedded subscription or assignment."""
    if len(data) < 2:
        raise DecodeError("no consumer protocol version")
    version = Reader(data).int16()
    if version < 0:
        raise DecodeError(f"invalid consumer protocol version {version}")
    return version


def _topic_partitions(r: Reader) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for _ in range(r.array_length(False, 6)):
        topic = r.string()
        out[topic] = out.get(topic, frozenset()) | frozenset(r.int32_array())
    return out


def decode_subscription(data: bytes) -> Subscription:
    """A classic member's subscription; DecodeError (a ValueError) when it does not parse."""
    version = protocol_version(data)
    r = Reader(data, 2)
    topics = tuple(r.string() for _ in range(r.array_length(False, 2)))
    user_data = r.nullable_bytes()
    owned: dict[str, frozenset[int]] = {}
    generation = -1
    rack: str | None = None
    if version >= 1:
        owned = _topic_partitions(r)
    if version >= 2:
        generation = r.int32()
    if version >= 3:
        rack = r.nullable_string()
    return Subscription(version, topics, user_data, owned, generation, rack)


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """The partitions of an embedded assignment (empty bytes: nothing assigned)."""
    if not data:
        return {}
    protocol_version(data)
    return _topic_partitions(Reader(data, 2))


def encode_assignment(partitions: Mapping[str, Iterable[int]], version: int) -> bytes:
    """An assignment in the version of the member's subscription (at most the newest)."""
    w = Writer()
    w.int16(max(0, min(version, _MAX_ASSIGNMENT_VERSION)))
    topics = sorted((t, sorted(ps)) for t, ps in partitions.items())
    w.array_length(len(topics))
    for topic, ps in topics:
        w.string(topic)
        w.int32_array(ps)
    w.nullable_bytes(None)
    return bytes(w.out)
