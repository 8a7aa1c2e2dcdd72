"""Wire codec for the controller → broker APIs kio lacks, sans-I/O.

LeaderAndIsr (key 4, v0–v7), StopReplica (key 5, v0–v4) and UpdateMetadata (key 6, v0–v8),
requests and responses: every version a Kafka 3.9 controller in ZooKeeper mode may send. The
layouts follow Kafka 3.9's message schemas (`LeaderAndIsrRequest.json` and friends); the
values are the version-neutral dataclasses of `wherry.protocol.interbroker`.

Flexible versions (compact strings and arrays, tagged fields, request header v2 / response
header v1) start at LeaderAndIsr v4, StopReplica v2 and UpdateMetadata v6. Unknown tagged fields
are skipped; the only known one is UpdateMetadata v8's top-level Type (tag 0).

How the version-neutral values map onto the versions:

* Partitions are flat lists in the dataclasses. Versions that group them by topic (LeaderAndIsr
  v2+, UpdateMetadata v5+, StopReplica v1+, LeaderAndIsr responses v5+) get one group per
  topic in order of first appearance; decoding flattens the groups again.
* Topic ids (LeaderAndIsr v5+, UpdateMetadata v7+) come from `topic_ids`; a topic without one
  is sent with the zero UUID, and a zero UUID is not put into `topic_ids` when decoding.
* `is_full` is the wire field Type: FULL (2) when set, else UNKNOWN (0) is sent (what a
  ZooKeeper controller sends); INCREMENTAL (1) decodes as not full.
* UpdateMetadata lists brokers with their endpoints; `live_brokers` has one `BrokerEndpoint`
  per (broker, endpoint), grouped back by broker id when encoding (the rack of a broker's first
  endpoint is used). v0 carries one PLAINTEXT host/port per broker and v1–v2 no listener name
  (it is the security protocol's name), so encoding those versions refuses other endpoints,
  like Kafka's request builder.
* StopReplica v0–v2 have one DeletePartitions flag for the whole request and no leader epochs:
  decoding gives leader epoch -1; encoding refuses partitions that disagree on the flag.
* Fields a version lacks get their schema default when decoding and are dropped when encoding,
  except values whose loss would change behaviour, which raise `InterbrokerEncodeError`:
  `is_kraft_controller` below its version and a non-zero `leader_recovery_state` below
  LeaderAndIsr v6.

Malformed input (truncated, negative or absurd lengths, over-long varints, bad UTF-8, trailing
bytes, nulls where the schema has no null) raises `wherry.protocol.wire.DecodeError`.
Every length is checked against the bytes left before anything is allocated, so decoding is
bounded by the input size.

This module holds the version table, the dispatch and the frames; the bodies are in
`leader_and_isr_codec.py`, `stop_replica_codec.py` and `update_metadata_codec.py`, what they
share in `interbroker_parts.py`, the primitives in `wire.py`.
"""


from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final, Generic, TypeAlias, TypeVar

from wherry.protocol.interbroker import (
    LEADER_AND_ISR_KEY,
    STOP_REPLICA_KEY,
    UPDATE_METADATA_KEY,
    LeaderAndIsrPartitionError,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wherry.protocol.interbroker_parts import (
    BodyCodec,
    InterbrokerEncodeError,
    finish_frame,
    start_request_frame,
    start_response_frame,
)
from wherry.protocol.leader_and_isr_codec import (
    read_leader_and_isr_request,
    read_leader_and_isr_response,
    write_leader_and_isr_request,
    write_leader_and_isr_response,
)
from wherry.protocol.stop_replica_codec import (
    read_stop_replica_request,
    read_stop_replica_response,
    write_stop_replica_request,
    write_stop_replica_response,
)
from wherry.protocol.update_metadata_codec import (
    read_update_metadata_request,
    read_update_metadata_response,
    write_update_metadata_request,
    write_update_metadata_response,
)
from wherry.protocol.wire import DecodeError, Reader

__all__ = [
    "DEFAULT_INTERBROKER_VERSIONS",
    "INTERBROKER_VERSIONS",
    "DecodeError",
    "InterbrokerEncodeError",
    "InterbrokerRequest",
    "InterbrokerRequestBody",
    "InterbrokerResponseBody",
    "decode_interbroker_request",
    "decode_interbroker_request_body",
    "decode_interbroker_response",
    "decode_interbroker_response_body",
    "encode_interbroker_request",
    "encode_interbroker_request_body",
    "encode_interbroker_response",
    "encode_interbroker_response_body",
    "is_flexible",
    "request_header_version",
    "response_header_version",
    "with_topic_ids",
]

InterbrokerRequestBody: TypeAlias = LeaderAndIsrRequest | StopReplicaRequest | UpdateMetadataRequest
_Bytes: TypeAlias = bytes | bytearray | memoryview
InterbrokerResponseBody: TypeAlias = (
    LeaderAndIsrResponse | StopReplicaResponse | UpdateMetadataResponse
)

# API key → (min, max) version this codec reads and writes (Kafka 3.9's validVersions).
INTERBROKER_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    LEADER_AND_ISR_KEY: (0, 7),
    STOP_REPLICA_KEY: (0, 4),
    UPDATE_METADATA_KEY: (0, 8),
}
# What our own controller sends: the newest versions.
DEFAULT_INTERBROKER_VERSIONS: Final[dict[int, int]] = {
    LEADER_AND_ISR_KEY: 7,
    STOP_REPLICA_KEY: 4,
    UPDATE_METADATA_KEY: 8,
}
_FIRST_FLEXIBLE: Final[dict[int, int]] = {
    LEADER_AND_ISR_KEY: 4,
    STOP_REPLICA_KEY: 2,
    UPDATE_METADATA_KEY: 6,
}


def is_flexible(api_key: int, version: int) -> bool:
    return version >= _FIRST_FLEXIBLE[api_key]


def request_header_version(api_key: int, version: int) -> int:
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    return 1 if is_flexible(api_key, version) else 0


def _check_version(api_key: int, version: int, error: type[Exception]) -> None:
    rng = INTERBROKER_VERSIONS.get(api_key)
    if rng is None:
        raise error(f"API key {api_key} is not LeaderAndIsr, StopReplica or UpdateMetadata")
    if not rng[0] <= version <= rng[1]:
        raise error(f"version {version} of API key {api_key} is not supported ({rng[0]}-{rng[1]})")


# --------------------------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------------------------


_Codec: TypeAlias = BodyCodec[Any]


def _by_key(
    *codecs: tuple[int, type, Callable[..., None], Callable[..., Any]],
) -> dict[int, _Codec]:
    """API key -> the codec of its body (class, writer, reader)."""
    return {key: BodyCodec(cls, w, r, f"API key {key}") for key, cls, w, r in codecs}


_REQUESTS: Final = _by_key(
    (LEADER_AND_ISR_KEY, LeaderAndIsrRequest, write_leader_and_isr_request,
     read_leader_and_isr_request),
    (STOP_REPLICA_KEY, StopReplicaRequest, write_stop_replica_request, read_stop_replica_request),
    (UPDATE_METADATA_KEY, UpdateMetadataRequest, write_update_metadata_request,
     read_update_metadata_request),
)
_RESPONSES: Final = _by_key(
    (LEADER_AND_ISR_KEY, LeaderAndIsrResponse, write_leader_and_isr_response,
     read_leader_and_isr_response),
    (STOP_REPLICA_KEY, StopReplicaResponse, write_stop_replica_response,
     read_stop_replica_response),
    (UPDATE_METADATA_KEY, UpdateMetadataResponse, write_update_metadata_response,
     read_update_metadata_response),
)


_Body = TypeVar("_Body", InterbrokerRequestBody, InterbrokerResponseBody)


class _Bodies(Generic[_Body]):
    """Bodies alone (no header, no size prefix) of the requests or of the responses."""

    __slots__ = ("_codecs",)

    def __init__(self, codecs: Mapping[int, _Codec]) -> None:
        self._codecs = codecs

    def encode(self, api_key: int, version: int, body: _Body) -> bytes:
        """The body's bytes."""
        _check_version(api_key, version, InterbrokerEncodeError)
        return self._codecs[api_key].encode(version, body)

    def decode(self, api_key: int, version: int, buf: _Bytes, offset: int = 0) -> _Body:
        """Parse a body that fills `buf[offset:]` exactly."""
        _check_version(api_key, version, DecodeError)
        body: _Body = self._codecs[api_key].decode(version, buf, offset)
        return body


_REQUEST_BODIES: Final = _Bodies[InterbrokerRequestBody](_REQUESTS)
_RESPONSE_BODIES: Final = _Bodies[InterbrokerResponseBody](_RESPONSES)
encode_interbroker_request_body = _REQUEST_BODIES.encode
decode_interbroker_request_body = _REQUEST_BODIES.decode
encode_interbroker_response_body = _RESPONSE_BODIES.encode
decode_interbroker_response_body = _RESPONSE_BODIES.decode


def encode_interbroker_request(
    api_key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    body: InterbrokerRequestBody,
) -> bytes:
    """A whole request frame: size prefix, header v1 (v2 when flexible), body."""
    _check_version(api_key, version, InterbrokerEncodeError)
    header = request_header_version(api_key, version)
    w = start_request_frame(api_key, version, correlation_id, client_id, header)
    _REQUESTS[api_key].write_into(w, version, body)
    return finish_frame(w)


@dataclass(frozen=True, slots=True)
class InterbrokerRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: InterbrokerRequestBody


def decode_interbroker_request(frame: bytes | bytearray | memoryview) -> InterbrokerRequest:
    """Parse a whole request frame (without its size prefix): header and body."""
    r = Reader(frame)
    api_key = r.int16()
    version = r.int16()
    correlation_id = r.int32()
    _check_version(api_key, version, DecodeError)
    client_id = r.nullable_string(False)
    if is_flexible(api_key, version):
        r.tagged_fields()
    body: InterbrokerRequestBody = _REQUESTS[api_key].read_whole(r, version)
    return InterbrokerRequest(api_key, version, correlation_id, client_id, body)


_PARTITION_ERROR_FIELDS: Final = frozenset(f.name for f in fields(LeaderAndIsrPartitionError))


def _coerce_response(api_key: int, body: object) -> object:
    """Accept a version-neutral mapping where a response dataclass is expected."""
    if not isinstance(body, Mapping):
        return body
    cls = _RESPONSES[api_key].body_type
    names = {f.name for f in fields(cls)}
    kwargs: dict[str, Any] = {k: v for k, v in body.items() if k in names}
    kwargs["error_code"] = int(kwargs.get("error_code", 0))
    if "partition_errors" in kwargs:
        kwargs["partition_errors"] = tuple(
            e
            if isinstance(e, LeaderAndIsrPartitionError)
            else LeaderAndIsrPartitionError(
                **{k: v for k, v in e.items() if k in _PARTITION_ERROR_FIELDS}
            )
            for e in kwargs["partition_errors"]
        )
    return cls(**kwargs)


def encode_interbroker_response(
    api_key: int,
    version: int,
    correlation_id: int,
    body: InterbrokerResponseBody | Mapping[str, Any],
) -> bytes:
    """A whole response frame: size prefix, header v0 (v1 when flexible), body.

    `body` is the response dataclass, or a mapping with its field names (`error_code`,
    `partition_errors`), for error answers built without one.
    """
    _check_version(api_key, version, InterbrokerEncodeError)
    w = start_response_frame(correlation_id, is_flexible(api_key, version))
    try:
        coerced = _coerce_response(api_key, body)
    except (TypeError, ValueError, AttributeError) as e:
        raise InterbrokerEncodeError(f"cannot build a response for API key {api_key}: {e}") from e
    _RESPONSES[api_key].write_into(w, version, coerced)
    return finish_frame(w)


def decode_interbroker_response(
    api_key: int, version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, InterbrokerResponseBody]:
    """Parse a whole response frame (without its size prefix): (correlation id, body)."""
    _check_version(api_key, version, DecodeError)
    r = Reader(frame)
    correlation_id = r.int32()
    if is_flexible(api_key, version):
        r.tagged_fields()
    body: InterbrokerResponseBody = _RESPONSES[api_key].read_whole(r, version)
    return correlation_id, body


def with_topic_ids(
    response: LeaderAndIsrResponse, topic_ids: Mapping[str, uuid.UUID]
) -> LeaderAndIsrResponse:
    """Fill the topic ids a LeaderAndIsr response v5+ needs from the request's `topic_ids`.

    Errors that already have an id, or whose topic has none, are left as they are.
    """
    errors = tuple(
        replace(e, topic_id=topic_ids[e.topic_name])
        if e.topic_id is None and e.topic_name in topic_ids
        else e
        for e in response.partition_errors
    )
    return replace(response, partition_errors=errors)
