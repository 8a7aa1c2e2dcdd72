"""Encoded response bodies kept for answers that repeat.

Many answers are the same bytes request after request: a Heartbeat's or an EndTxn's
`{error_code: 0, throttle_time_ms: 0}`, AddPartitionsToTxn's per-partition NONE, ApiVersions.
(Metadata answers have a writer of their own, `metadata_response`, which keeps each topic's
part while the topic does not change.) kio walks the schema and checks every value's
type for each of them (about 30 Python calls per field), so `codec.encode_response` keeps the
bodies of the APIs listed in `CACHED_KEYS`, keyed by API key, version and the answer's value
(`frozen`: the mapping as nested tuples). A body holding anything but plain values (an entity
object, a buffer, a float, a file region) is encoded as before and not kept.

Encoding is a function of the schema and the values, so a kept body is the body kio would
write: the key holds every value, and values that compare equal -- `1`, `True` and
`ErrorCode.none`'s neighbours among ints, `[]` and `()` -- are written as the same bytes by
every kio writer that takes them. Produce and Fetch answers carry offsets that change with each
request, and SASL answers carry credentials' exchanges: they are not listed.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import uuid
from collections.abc import Callable
from typing import Any, Final

__all__ = ["CACHED_KEYS", "KeyedAnswer", "ResponseBodyCache", "frozen"]

# API keys whose answers repeat: OffsetCommit, FindCoordinator, Heartbeat, LeaveGroup,
# ApiVersions, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit,
# DescribeCluster, ConsumerGroupHeartbeat, ShareGroupHeartbeat
CACHED_KEYS: Final = frozenset((8, 10, 12, 13, 18, 24, 25, 26, 27, 28, 60, 68, 76))

MAX_ENTRIES: Final = 512
MAX_BODY_BYTES: Final = 4096

# Values kept as they are in a key: hashable, compared by value, and written the same by kio
# whenever they compare equal. Floats are left out (1.0 == 1, but an int field refuses 1.0).
_PLAIN: Final = frozenset(
    (int, str, bool, bytes, type(None), uuid.UUID, datetime.timedelta, datetime.datetime)
)


class _NotPlain(Exception):
    """A value `frozen` does not take: the answer is encoded and not kept."""


def _freeze(value: Any) -> Any:
    t = type(value)
    if t in _PLAIN:
        return value
    if t is dict:
        return tuple([(k, _freeze(v)) for k, v in value.items()])
    if t is list or t is tuple:
        return (list, *[_freeze(v) for v in value])
    if isinstance(value, enum.IntEnum):  # kio's ErrorCode: written as its int
        return int(value)
    raise _NotPlain


def frozen(value: Any) -> Any:
    """`value` (a mapping of mappings, lists and plain values) as nested tuples, equal for
    equal answers; None when it holds anything else."""
    try:
        return _freeze(value)
    except _NotPlain:
        return None


class KeyedAnswer(dict[str, Any]):
    """An answer given again and again unchanged (ApiVersions' for one version and feature
    set: 70 API keys): its cache key is made once, when it is built, not for every request
    (freezing that answer took longer than the rest of the request). Never changed once built;
    a change (a throttle time) makes a new dict."""

    __slots__ = ("key",)

    def __init__(self, value: dict[str, Any]) -> None:
        super().__init__(value)
        self.key = frozen(value)


class ResponseBodyCache:
    """Encoded bodies by (API key, version, frozen answer): at most `max_entries`, each at
    most `max_body_bytes` (the oldest goes first)."""

    def __init__(
        self, max_entries: int = MAX_ENTRIES, max_body_bytes: int = MAX_BODY_BYTES
    ) -> None:
        self.max_entries = max_entries
        self.max_body_bytes = max_body_bytes
        self._bodies: dict[tuple[int, int, Any], bytes] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._bodies)

    def clear(self) -> None:
        self._bodies.clear()

    def body(
        self, api_key: int, api_version: int, data: Any, encode: Callable[[], bytes]
    ) -> bytes:
        """The encoded body of `data`: kept, or `encode()`d (and kept when it may be)."""
        t = type(data)
        key_value = frozen(data) if t is dict else data.key if t is KeyedAnswer else None
        if key_value is None:
            return encode()
        key = (api_key, api_version, key_value)
        body = self._bodies.get(key)
        if body is not None:
            self.hits += 1
            return body
        self.misses += 1
        body = encode()
        if len(body) <= self.max_body_bytes:
            bodies = self._bodies
            if len(bodies) >= self.max_entries:
                # brokers on event loops in several threads of one process (tests) share it: a
                # concurrent insert or eviction at most leaves one entry more for the next one
                with contextlib.suppress(RuntimeError, KeyError, StopIteration):
                    del bodies[next(iter(bodies))]
            bodies[key] = body
        return body
