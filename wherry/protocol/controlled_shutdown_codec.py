"""Wire codec for ControlledShutdown (API key 7, v0–v3), which kio lacks; sans-I/O.

Kafka 3.9's `ControlledShutdownRequest.json` / `ControlledShutdownResponse.json`:

* request: BrokerId int32; BrokerEpoch int64 from v2 (ignorable: encoding v0–v1 drops it,
  decoding them gives -1, Kafka's UNKNOWN_BROKER_EPOCH);
* response: ErrorCode int16; RemainingPartitions [TopicName string, PartitionIndex int32];
* v3 is flexible (compact strings and arrays, tagged fields; request header v2, response
  header v1). v0 has a non-standard request header *without* ClientId (header v0: api key,
  version, correlation id); v1–v2 use request header v1; responses below v3 use header v0.

The values are `wherry.protocol.interbroker`'s `ControlledShutdownRequest` /
`ControlledShutdownResponse`. The primitives are `wire.py`'s reader and writer and the frames
`interbroker_parts.py`'s, so malformed input (truncated, negative or absurd lengths, over-long
varints, bad UTF-8, trailing bytes) raises `wherry.protocol.wire.DecodeError` as the other
controller codecs do, and a value the wire cannot carry raises `InterbrokerEncodeError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from wherry.protocol.interbroker import (
    CONTROLLED_SHUTDOWN_KEY,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    RemainingPartition,
)
from wherry.protocol.interbroker_parts import (
    BodyCodec,
    InterbrokerEncodeError,
    finish_frame,
    start_request_frame,
    start_response_frame,
)
from wherry.protocol.wire import DecodeError, Reader, Writer

__all__ = [
    "CONTROLLED_SHUTDOWN_KEY",
    "CONTROLLED_SHUTDOWN_VERSIONS",
    "DEFAULT_CONTROLLED_SHUTDOWN_VERSION",
    "ControlledShutdownFrame",
    "decode_controlled_shutdown_request",
    "decode_controlled_shutdown_request_body",
    "decode_controlled_shutdown_response",
    "decode_controlled_shutdown_response_body",
    "encode_controlled_shutdown_request",
    "encode_controlled_shutdown_request_body",
    "encode_controlled_shutdown_response",
    "encode_controlled_shutdown_response_body",
    "request_header_version",
    "response_header_version",
]

_Bytes: TypeAlias = bytes | bytearray | memoryview

CONTROLLED_SHUTDOWN_VERSIONS: Final = (0, 3)  # Kafka 3.9's validVersions
DEFAULT_CONTROLLED_SHUTDOWN_VERSION: Final = 3  # what our brokers send
_FIRST_FLEXIBLE: Final = 3
_FIRST_WITH_EPOCH: Final = 2
_UNKNOWN_BROKER_EPOCH: Final = -1


def _flexible(version: int) -> bool:
    return version >= _FIRST_FLEXIBLE


def request_header_version(version: int) -> int:
    """0 for v0 (no ClientId), 1 for v1–v2, 2 for the flexible v3."""
    if version == 0:
        return 0
    return 2 if _flexible(version) else 1


def response_header_version(version: int) -> int:
    return 1 if _flexible(version) else 0


# --- bodies ---------------------------------------------------------------------------------


def _write_request(w: Writer, v: int, req: ControlledShutdownRequest) -> None:
    w.int32(req.broker_id)
    if v >= _FIRST_WITH_EPOCH:
        w.int64(req.broker_epoch)
    w.end_struct(_flexible(v))


def _read_request(r: Reader, v: int) -> ControlledShutdownRequest:
    broker_id = r.int32()
    epoch = r.int64() if v >= _FIRST_WITH_EPOCH else _UNKNOWN_BROKER_EPOCH
    r.end_struct(_flexible(v))
    return ControlledShutdownRequest(broker_id, epoch)


def _write_response(w: Writer, v: int, resp: ControlledShutdownResponse) -> None:
    flex = _flexible(v)
    w.int16(resp.error_code)
    w.array_length(len(resp.remaining_partitions), flex)
    for p in resp.remaining_partitions:
        w.string(p.topic_name, flex)
        w.int32(p.partition_index)
        w.end_struct(flex)
    w.end_struct(flex)


def _read_response(r: Reader, v: int) -> ControlledShutdownResponse:
    flex = _flexible(v)
    error_code = r.int16()
    # Each entry takes at least a string length (1 or 2 bytes) and a 4-byte index.
    n = r.array_length(flex, 5 if flex else 6)
    remaining: list[RemainingPartition] = []
    for _ in range(n):
        topic = r.string(flex)
        remaining.append(RemainingPartition(topic, r.int32()))
        r.end_struct(flex)
    r.end_struct(flex)
    return ControlledShutdownResponse(error_code, tuple(remaining))


_REQUEST: Final = BodyCodec(
    ControlledShutdownRequest,
    _write_request,
    _read_request,
    "ControlledShutdown",
    CONTROLLED_SHUTDOWN_VERSIONS,
)
_RESPONSE: Final = BodyCodec(
    ControlledShutdownResponse,
    _write_response,
    _read_response,
    "ControlledShutdown",
    CONTROLLED_SHUTDOWN_VERSIONS,
)
# Bodies alone (no header, no size prefix); decoding parses a body that fills
# `buf[offset:]` exactly.
encode_controlled_shutdown_request_body = _REQUEST.encode
decode_controlled_shutdown_request_body = _REQUEST.decode
encode_controlled_shutdown_response_body = _RESPONSE.encode
decode_controlled_shutdown_response_body = _RESPONSE.decode


# --- whole frames ---------------------------------------------------------------------------


def encode_controlled_shutdown_request(
    version: int, correlation_id: int, client_id: str | None, body: ControlledShutdownRequest
) -> bytes:
    """A whole request frame: size prefix, header (v0 without ClientId), body."""
    _REQUEST.check_version(version, InterbrokerEncodeError)
    w = start_request_frame(
        CONTROLLED_SHUTDOWN_KEY, version, correlation_id, client_id, request_header_version(version)
    )
    _REQUEST.write_into(w, version, body)
    return finish_frame(w)


@dataclass(frozen=True, slots=True)
class ControlledShutdownFrame:
    """A decoded request frame: its header fields and body."""

    api_version: int
    correlation_id: int
    client_id: str | None
    body: ControlledShutdownRequest
    api_key: int = CONTROLLED_SHUTDOWN_KEY


def decode_controlled_shutdown_request(frame: _Bytes) -> ControlledShutdownFrame:
    """Parse a whole request frame (without its size prefix): header and body."""
    r = Reader(frame)
    api_key = r.int16()
    version = r.int16()
    correlation_id = r.int32()
    if api_key != CONTROLLED_SHUTDOWN_KEY:
        raise DecodeError(f"API key {api_key} is not ControlledShutdown")
    _REQUEST.check_version(version, DecodeError)
    header = request_header_version(version)
    client_id = r.nullable_string(False) if header >= 1 else None
    if header >= 2:
        r.tagged_fields()
    body = _REQUEST.read_whole(r, version)
    return ControlledShutdownFrame(version, correlation_id, client_id, body)


def _coerce_response(body: object) -> object:
    """Accept a mapping of the response's fields (`error_code`, `remaining_partitions` of
    `RemainingPartition`s or mappings) where the dataclass is expected."""
    if not isinstance(body, Mapping):
        return body
    remaining = tuple(
        p
        if isinstance(p, RemainingPartition)
        else RemainingPartition(str(p["topic_name"]), int(p["partition_index"]))
        for p in body.get("remaining_partitions", ())
    )
    return ControlledShutdownResponse(int(body.get("error_code", 0)), remaining)


def encode_controlled_shutdown_response(
    version: int,
    correlation_id: int,
    body: ControlledShutdownResponse | Mapping[str, Any],
) -> bytes:
    """A whole response frame: size prefix, header v0 (v1 from v3), body."""
    _REQUEST.check_version(version, InterbrokerEncodeError)
    w = start_response_frame(correlation_id, response_header_version(version) >= 1)
    try:
        coerced = _coerce_response(body)
    except (TypeError, ValueError, KeyError) as e:
        raise InterbrokerEncodeError(f"cannot build a ControlledShutdownResponse: {e}") from e
    _RESPONSE.write_into(w, version, coerced)
    return finish_frame(w)


def decode_controlled_shutdown_response(
    version: int, frame: _Bytes
) -> tuple[int, ControlledShutdownResponse]:
    """Parse a whole response frame (without its size prefix): (correlation id, body)."""
    _REQUEST.check_version(version, DecodeError)
    r = Reader(frame)
    correlation_id = r.int32()
    if response_header_version(version) >= 1:
        r.tagged_fields()
    return correlation_id, _RESPONSE.read_whole(r, version)
