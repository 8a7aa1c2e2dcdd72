"""ApiVersions (key 18) requests read and responses written by hand, sans-I/O, without kio.

A starting broker answers ApiVersions as soon as its listeners are bound, before the kio-based
codec (`codec.py`) is imported (docs/architecture.md, "Start"). This module reads the
requests of versions 0-4 (header v1, or v2 with tagged fields for the flexible v3+; the v3+
body's client software name and version) and writes the same bytes `codec.encode_response`
writes for the answer; `tests/protocol/test_api_versions_codec.py` compares the two for every
version. A version it does not serve gets the v0 answer with UNSUPPORTED_VERSION, as Kafka
does (KIP-511). Whatever it cannot read exactly (a truncated header, a null or non-UTF-8
string, a malformed tagged field) is left to the kio codec (`read_request` returns None), so
the broker's answer to bad input is the one it always gives.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final, NamedTuple

from wherry.protocol.primitives import INT16, INT32, INT64, REQUEST_PREFIX
from wherry.protocol.varint import VarintTooLongError, uvarint_at, uvarint_bytes

API_VERSIONS_KEY: Final = 18
FIRST_FLEXIBLE_VERSION: Final = 3  # header v2 and compact fields from here on
NONE: Final = 0
UNSUPPORTED_VERSION: Final = 35

_KEY: Final = struct.Struct(">hhh")  # api_key, min_version, max_version
_LEVELS: Final = struct.Struct(">hh")


class Features(NamedTuple):
    """The feature flags of a v3+ answer (KIP-584): supported (name, min, max) ranges, the
    finalized features' epoch and their (name, max level, min level)."""

    supported: tuple[tuple[str, int, int], ...] = ()
    finalized_epoch: int = -1
    finalized: tuple[tuple[str, int, int], ...] = ()

    def supported_for(self, api_version: int) -> tuple[tuple[str, int, int], ...]:
        """Before v4, features whose minimum supported version is 0 are left out (old clients
        refuse a range starting at 0)."""
        if api_version >= 4:
            return self.supported
        return tuple(f for f in self.supported if f[1] > 0)


NO_FEATURES: Final = Features()


class ApiVersionsRequest(NamedTuple):
    api_version: int
    correlation_id: int
    client_id: str | None
    # v3+: what the client says it is (empty before v3)
    client_software_name: str
    client_software_version: str


class _Short(Exception):
    """The frame ends, or holds something this reader leaves to the kio codec."""


# Not `wire.Reader`: this module is imported before the listeners are bound, when kio's
# serial package may not be (tests/test_import_hygiene.py), and `wire` builds its error on
# kio's; and what it cannot read it leaves to kio (`_Short`, and `uvarint_at`'s IndexError
# past the end or varint too long) rather than refusing.
_uvarint = uvarint_at


def _take(frame: memoryview, pos: int, n: int) -> tuple[str, int]:
    end = pos + n
    if n < 0 or end > len(frame):
        raise _Short
    try:
        return str(frame[pos:end], "utf-8"), end
    except UnicodeDecodeError:
        raise _Short from None


def _compact_string(frame: memoryview, pos: int) -> tuple[str, int]:
    n, pos = _uvarint(frame, pos)
    if n == 0:  # null: not allowed for these fields
        raise _Short
    return _take(frame, pos, n - 1)


def _skip_tagged_fields(frame: memoryview, pos: int) -> int:
    count, pos = _uvarint(frame, pos)
    for _ in range(count):
        _, pos = _uvarint(frame, pos)  # tag
        size, pos = _uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise _Short
    return pos


def read_request(
    frame: bytes | memoryview, versions: tuple[int, int]
) -> ApiVersionsRequest | None:
    """An ApiVersions request frame (without its size prefix). A version outside `versions`
    (the broker's min, max) is returned with its header's fixed part only: it is answered with
    the v0 error. None: not an ApiVersions request, or not one this reader takes exactly."""
    view = memoryview(frame)
    if len(view) < REQUEST_PREFIX.size:
        return None
    api_key, version, correlation_id = REQUEST_PREFIX.unpack_from(view, 0)
    if api_key != API_VERSIONS_KEY:
        return None
    if not versions[0] <= version <= versions[1]:
        return ApiVersionsRequest(version, correlation_id, None, "", "")
    try:
        pos = REQUEST_PREFIX.size
        if pos + 2 > len(view):
            raise _Short
        (n,) = INT16.unpack_from(view, pos)
        pos += 2
        client_id: str | None = None
        if n >= 0:
            client_id, pos = _take(view, pos, n)
        elif n != -1:
            raise _Short
        name = software = ""
        if version >= FIRST_FLEXIBLE_VERSION:
            pos = _skip_tagged_fields(view, pos)  # header v2
            name, pos = _compact_string(view, pos)
            software, pos = _compact_string(view, pos)
            _skip_tagged_fields(view, pos)
    except (_Short, IndexError, VarintTooLongError):
        return None
    return ApiVersionsRequest(version, correlation_id, client_id, name, software)


def encode_response(
    api_version: int,
    correlation_id: int,
    error_code: int,
    api_keys: Iterable[tuple[int, int, int]],
    throttle_time_ms: int = 0,
    features: Features = NO_FEATURES,
) -> bytes:
    """The response frame, size prefix included: header v0 (correlation id) for every version,
    then the body of `api_version` (0-4): the error code, (api_key, min, max) per API, the
    throttle time from v1, compact arrays and tagged fields from v3 -- the features, each of
    the three written only when it is not its default (empty, epoch -1), as kio writes them."""
    keys = list(api_keys)
    flexible = api_version >= FIRST_FLEXIBLE_VERSION
    parts = [INT32.pack(correlation_id), INT16.pack(error_code)]
    if flexible:
        parts.append(uvarint_bytes(len(keys) + 1))
        parts.extend(_KEY.pack(*k) + b"\x00" for k in keys)
    else:
        parts.append(INT32.pack(len(keys)))
        parts.extend(_KEY.pack(*k) for k in keys)
    if api_version >= 1:
        parts.append(INT32.pack(throttle_time_ms))
    if flexible:
        parts.append(_feature_tags(features, api_version))
    body = b"".join(parts)
    return INT32.pack(len(body)) + body


def _compact_str(text: str) -> bytes:
    data = text.encode()
    return uvarint_bytes(len(data) + 1) + data


def _feature_array(entries: tuple[tuple[str, int, int], ...]) -> bytes:
    items = [_compact_str(name) + _LEVELS.pack(a, b) + b"\x00" for name, a, b in entries]
    return uvarint_bytes(len(items) + 1) + b"".join(items)


def _feature_tags(features: Features, api_version: int) -> bytes:
    """The body's tagged fields: 0 supported features, 1 finalized epoch, 2 finalized."""
    tags: list[tuple[int, bytes]] = []
    supported = features.supported_for(api_version)
    if supported:
        tags.append((0, _feature_array(supported)))
    if features.finalized_epoch != -1:
        tags.append((1, INT64.pack(features.finalized_epoch)))
    if features.finalized:
        tags.append((2, _feature_array(features.finalized)))
    out = [uvarint_bytes(len(tags))]
    for tag, data in tags:
        out.append(uvarint_bytes(tag) + uvarint_bytes(len(data)) + data)
    return b"".join(out)
