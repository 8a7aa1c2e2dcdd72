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
bytes, nulls where the schema has no null) raises `wherry.protocol.tolerant.DecodeError`.
Every length is checked against the bytes left before anything is allocated, so decoding is
bounded by the input size.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final, Generic, TypeAlias, TypedDict, TypeVar

from wherry.protocol.interbroker import (
    LEADER_AND_ISR_KEY,
    SECURITY_PROTOCOL_IDS,
    STOP_REPLICA_KEY,
    UPDATE_METADATA_KEY,
    BrokerEndpoint,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    PartitionLeadership,
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wherry.protocol.tolerant import DecodeError

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

_ZERO_UUID: Final = uuid.UUID(int=0)
_TYPE_UNKNOWN: Final = 0
_TYPE_FULL: Final = 2
_UPDATE_METADATA_TYPE_TAG: Final = 0
_MAX_STRING_BYTES: Final = 0x7FFF  # Kafka's limit for (compact) strings
# SecurityProtocol ids and their default listener names (UpdateMetadata v0–v2 have no listener).
_SECURITY_PROTOCOL_NAMES: Final[dict[int, str]] = {v: k for k, v in SECURITY_PROTOCOL_IDS.items()}

_I8: Final = struct.Struct(">b")
_U8: Final = struct.Struct(">B")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_SIZE: Final = _I32
_REQUEST_PREFIX: Final = struct.Struct(">hhi")  # api_key, api_version, correlation_id


class InterbrokerEncodeError(ValueError):
    """A value that the requested version cannot carry (or that is not a valid wire value)."""


def is_flexible(api_key: int, version: int) -> bool:
    return version >= _FIRST_FLEXIBLE[api_key]


def request_header_version(api_key: int, version: int) -> int:
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    return 1 if is_flexible(api_key, version) else 0


# --------------------------------------------------------------------------------------------
# Primitive reader and writer
# --------------------------------------------------------------------------------------------


def _fixed_reader(fmt: struct.Struct) -> Callable[[_Reader], int]:
    """A `_Reader` method reading one fixed-size integer."""
    return lambda r: r.fixed(fmt)


def _fixed_writer(fmt: struct.Struct) -> Callable[[_Writer, int], None]:
    """A `_Writer` method writing one fixed-size integer."""
    return lambda w, v: w.fixed(fmt, v)


class _Reader:
    """Reads Kafka primitives from `buf[pos:end]`; every read checks the bytes left."""

    __slots__ = ("_buf", "_end", "pos")

    def __init__(
        self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
    ) -> None:
        mv = memoryview(buf)
        if mv.ndim != 1 or mv.format != "B":
            mv = mv.cast("B")
        self._buf = mv
        self._end = len(mv) if end is None else end
        if not 0 <= pos <= self._end <= len(mv):
            raise DecodeError(f"offset {pos} outside a buffer of {len(mv)} bytes")
        self.pos = pos

    @property
    def remaining(self) -> int:
        return self._end - self.pos

    def _take(self, n: int) -> int:
        start = self.pos
        if n > self._end - start:
            raise DecodeError(
                f"truncated: need {n} bytes at offset {start}, {self._end - start} left"
            )
        self.pos = start + n
        return start

    def fixed(self, fmt: struct.Struct) -> int:
        """One fixed-size integer (``fmt`` is a one-field `struct.Struct`)."""
        value: int = fmt.unpack_from(self._buf, self._take(fmt.size))[0]
        return value

    int8 = _fixed_reader(_I8)
    int16 = _fixed_reader(_I16)
    int32 = _fixed_reader(_I32)
    int64 = _fixed_reader(_I64)

    def boolean(self) -> bool:
        return self.int8() != 0  # like Kafka: any non-zero byte is true

    def uuid(self) -> uuid.UUID:
        start = self._take(16)
        return uuid.UUID(bytes=bytes(self._buf[start : start + 16]))

    def uvarint(self) -> int:
        value = 0
        for i in range(5):
            b = self.fixed(_U8)
            value |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                if value > 0xFFFFFFFF:
                    raise DecodeError(f"unsigned varint {value} does not fit in 32 bits")
                return value
        raise DecodeError(f"unsigned varint longer than 5 bytes at offset {self.pos - 5}")

    def _string_length(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.int16()

    def string(self, flexible: bool) -> str:
        value = self.nullable_string(flexible)
        if value is None:
            raise DecodeError(f"null in a non-nullable string at offset {self.pos}")
        return value

    def nullable_string(self, flexible: bool) -> str | None:
        n = self._string_length(flexible)
        if n == -1:
            return None
        if n < 0:
            raise DecodeError(f"negative string length {n}")
        if n > _MAX_STRING_BYTES:
            raise DecodeError(f"string of {n} bytes exceeds the maximum of {_MAX_STRING_BYTES}")
        start = self._take(n)
        try:
            return str(self._buf[start : start + n], "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"invalid UTF-8 in a string at offset {start}: {e}") from e

    def array_length(self, flexible: bool, min_item_bytes: int = 1) -> int:
        """A non-nullable array's length, refused if its items cannot fit in the bytes left."""
        n = self.uvarint() - 1 if flexible else self.int32()
        if n < 0:
            raise DecodeError(f"null or negative length {n} for a non-nullable array")
        if n * min_item_bytes > self.remaining:
            raise DecodeError(f"array of {n} items cannot fit in the {self.remaining} bytes left")
        return n

    def int32_array(self, flexible: bool) -> tuple[int, ...]:
        n = self.array_length(flexible, 4)
        start = self._take(4 * n)
        return struct.unpack_from(f">{n}i", self._buf, start)

    def tagged_fields(self, known: Mapping[int, Callable[[_Reader], None]] | None = None) -> None:
        """Read a tagged-field section: known tags are handed to their reader, others skipped."""
        count = self.uvarint()
        if count * 2 > self.remaining:  # each field takes at least a tag and a size byte
            raise DecodeError(
                f"{count} tagged fields cannot fit in the {self.remaining} bytes left"
            )
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            start = self._take(size)
            read = known.get(tag) if known else None
            if read is not None:
                sub = _Reader(self._buf, start, start + size)
                read(sub)
                sub.expect_end(f"tagged field {tag}")

    def end_struct(self, flex: bool) -> None:
        """A struct's end: in flexible versions, its tagged fields."""
        if flex:
            self.tagged_fields()

    def expect_end(self, what: str) -> None:
        if self.pos != self._end:
            raise DecodeError(f"{self._end - self.pos} unexpected bytes after {what}")


class _Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def fixed(self, fmt: struct.Struct, v: int) -> None:
        self.out += fmt.pack(v)

    int8 = _fixed_writer(_I8)
    int16 = _fixed_writer(_I16)
    int32 = _fixed_writer(_I32)
    int64 = _fixed_writer(_I64)

    def boolean(self, v: bool) -> None:
        self.out.append(1 if v else 0)

    def uuid(self, v: uuid.UUID) -> None:
        self.out += v.bytes

    def uvarint(self, v: int) -> None:
        if not 0 <= v <= 0xFFFFFFFF:
            raise InterbrokerEncodeError(f"{v} does not fit in an unsigned varint")
        while v > 0x7F:
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7
        self.out.append(v)

    def string(self, v: str, flexible: bool) -> None:
        self.nullable_string(v, flexible)

    def nullable_string(self, v: str | None, flexible: bool) -> None:
        if v is None:
            if flexible:
                self.uvarint(0)
            else:
                self.int16(-1)
            return
        data = v.encode("utf-8")
        if len(data) > _MAX_STRING_BYTES:
            raise InterbrokerEncodeError(
                f"string of {len(data)} bytes exceeds the maximum of {_MAX_STRING_BYTES}"
            )
        if flexible:
            self.uvarint(len(data) + 1)
        else:
            self.int16(len(data))
        self.out += data

    def array_length(self, n: int, flexible: bool) -> None:
        if flexible:
            self.uvarint(n + 1)
        else:
            self.int32(n)

    def int32_array(self, values: tuple[int, ...] | list[int], flexible: bool) -> None:
        self.array_length(len(values), flexible)
        self.out += struct.pack(f">{len(values)}i", *values)

    def no_tagged_fields(self) -> None:
        self.out.append(0)

    def end_struct(self, flex: bool) -> None:
        """A struct's end: in flexible versions, an empty tagged-field section."""
        if flex:
            self.no_tagged_fields()


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


def _group(items: Iterable[T], key: Callable[[T], K]) -> list[tuple[K, list[T]]]:
    """Group items by key, groups and items in order of first appearance."""
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.items())


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InterbrokerEncodeError(message)


def _check_version(api_key: int, version: int, error: type[Exception]) -> None:
    rng = INTERBROKER_VERSIONS.get(api_key)
    if rng is None:
        raise error(f"API key {api_key} is not LeaderAndIsr, StopReplica or UpdateMetadata")
    if not rng[0] <= version <= rng[1]:
        raise error(f"version {version} of API key {api_key} is not supported ({rng[0]}-{rng[1]})")


# --------------------------------------------------------------------------------------------
# What the three requests share
# --------------------------------------------------------------------------------------------


class _Header(TypedDict):
    """The fields every controller request starts with, as decoded."""

    controller_id: int
    is_kraft_controller: bool
    controller_epoch: int
    broker_epoch: int


def _write_header(
    w: _Writer, v: int, req: InterbrokerRequestBody, api: str, *, kraft_from: int, epoch_from: int
) -> None:
    """ControllerId, IsKRaftController (from ``kraft_from``), ControllerEpoch, BrokerEpoch
    (from ``epoch_from``)."""
    w.int32(req.controller_id)
    if v >= kraft_from:
        w.boolean(req.is_kraft_controller)
    else:
        _require(not req.is_kraft_controller, f"{api} v{v} has no isKRaftController")
    w.int32(req.controller_epoch)
    if v >= epoch_from:
        w.int64(req.broker_epoch)


def _read_header(r: _Reader, v: int, *, kraft_from: int, epoch_from: int) -> _Header:
    controller_id = r.int32()
    is_kraft_controller = r.boolean() if v >= kraft_from else False
    controller_epoch = r.int32()
    broker_epoch = r.int64() if v >= epoch_from else -1
    return {
        "controller_id": controller_id,
        "is_kraft_controller": is_kraft_controller,
        "controller_epoch": controller_epoch,
        "broker_epoch": broker_epoch,
    }


_LeadingFields: TypeAlias = tuple[str, int, int, int, int, tuple[int, ...], int, tuple[int, ...]]
"""The first eight fields of both partition-state classes, in their order (see
`_write_leadership`)."""


def _write_leadership(
    w: _Writer,
    st: PartitionLeadership,
    epoch: int,
    replicas: tuple[int, ...],
    *,
    named: bool,
    flex: bool,
) -> None:
    """What LeaderAndIsr and UpdateMetadata partition states share, in wire order: the topic
    name (``named``: states not grouped by topic), index, controller epoch, leader, leader
    epoch, ISR, then the partition epoch (ZkVersion) and the replicas."""
    if named:
        w.string(st.topic_name, flex)
    w.int32(st.partition_index)
    w.int32(st.controller_epoch)
    w.int32(st.leader)
    w.int32(st.leader_epoch)
    w.int32_array(st.isr, flex)
    w.int32(epoch)
    w.int32_array(replicas, flex)


def _read_leadership(r: _Reader, topic_name: str, *, named: bool, flex: bool) -> _LeadingFields:
    """What `_write_leadership` writes (read in wire order, which is the fields' order)."""
    if named:
        topic_name = r.string(flex)
    index, controller_epoch, leader, leader_epoch = r.int32(), r.int32(), r.int32(), r.int32()
    isr = r.int32_array(flex)
    epoch = r.int32()
    replicas = r.int32_array(flex)
    return topic_name, index, controller_epoch, leader, leader_epoch, isr, epoch, replicas


_State = TypeVar("_State", LeaderAndIsrPartitionState, UpdateMetadataPartitionState)


def _write_partition_states(
    w: _Writer,
    v: int,
    states: tuple[_State, ...],
    write_state: Callable[[_Writer, int, _State], None],
    *,
    grouped: bool,
    topic_ids: Mapping[str, uuid.UUID] | None,
    flex: bool,
) -> None:
    """The partition states: one array, or (``grouped``) one entry per topic with its name,
    its id (when ``topic_ids`` is given; the zero UUID if unknown) and its states."""
    if not grouped:
        w.array_length(len(states), flex)
        for st in states:
            write_state(w, v, st)
        return
    groups = _group(states, lambda s: s.topic_name)
    w.array_length(len(groups), flex)
    for topic, topic_states in groups:
        w.string(topic, flex)
        if topic_ids is not None:
            w.uuid(topic_ids.get(topic, _ZERO_UUID))
        w.array_length(len(topic_states), flex)
        for st in topic_states:
            write_state(w, v, st)
        w.end_struct(flex)


def _read_partition_states(
    r: _Reader,
    v: int,
    read_state: Callable[[_Reader, int, str], _State],
    *,
    grouped: bool,
    with_ids: bool,
    flex: bool,
) -> tuple[tuple[_State, ...], dict[str, uuid.UUID]]:
    """What `_write_partition_states` writes: the states and the topics' non-zero ids."""
    states: list[_State] = []
    topic_ids: dict[str, uuid.UUID] = {}
    if not grouped:
        for _ in range(r.array_length(flex)):
            states.append(read_state(r, v, ""))
        return tuple(states), topic_ids
    for _ in range(r.array_length(flex)):
        topic = r.string(flex)
        if with_ids:
            topic_id = r.uuid()
            if topic_id != _ZERO_UUID:
                topic_ids[topic] = topic_id
        for _ in range(r.array_length(flex)):
            states.append(read_state(r, v, topic))
        r.end_struct(flex)
    return tuple(states), topic_ids


# --------------------------------------------------------------------------------------------
# LeaderAndIsr (key 4): flexible from v4
# --------------------------------------------------------------------------------------------


def _write_lai_partition(w: _Writer, v: int, st: LeaderAndIsrPartitionState) -> None:
    flex = v >= 4
    _write_leadership(w, st, st.partition_epoch, st.replicas, named=v <= 1, flex=flex)
    if v >= 3:
        w.int32_array(st.adding_replicas, flex)
        w.int32_array(st.removing_replicas, flex)
    if v >= 1:
        w.boolean(st.is_new)
    if v >= 6:
        w.int8(st.leader_recovery_state)
    else:
        _require(
            st.leader_recovery_state == 0,
            f"LeaderAndIsr v{v} cannot carry leader_recovery_state "
            f"{st.leader_recovery_state} ({st.topic_name}-{st.partition_index}); needs v6+",
        )
    w.end_struct(flex)


def _read_lai_partition(r: _Reader, v: int, topic_name: str) -> LeaderAndIsrPartitionState:
    flex = v >= 4
    leading = _read_leadership(r, topic_name, named=v <= 1, flex=flex)
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    if v >= 3:
        adding = r.int32_array(flex)
        removing = r.int32_array(flex)
    is_new = r.boolean() if v >= 1 else False
    leader_recovery_state = r.int8() if v >= 6 else 0
    r.end_struct(flex)
    return LeaderAndIsrPartitionState(
        *leading,
        adding_replicas=adding,
        removing_replicas=removing,
        is_new=is_new,
        leader_recovery_state=leader_recovery_state,
    )


def _write_leader_and_isr_request(w: _Writer, v: int, req: LeaderAndIsrRequest) -> None:
    flex = v >= 4
    _write_header(w, v, req, "LeaderAndIsr", kraft_from=7, epoch_from=2)
    if v >= 5:
        w.int8(_TYPE_FULL if req.is_full else _TYPE_UNKNOWN)
    ids = req.topic_ids if v >= 5 else None
    _write_partition_states(
        w, v, req.partition_states, _write_lai_partition, grouped=v >= 2, topic_ids=ids, flex=flex
    )
    w.array_length(len(req.live_leaders), flex)
    for leader in req.live_leaders:
        w.int32(leader.broker_id)
        w.string(leader.host, flex)
        w.int32(leader.port)
        w.end_struct(flex)
    w.end_struct(flex)


def _read_leader_and_isr_request(r: _Reader, v: int) -> LeaderAndIsrRequest:
    flex = v >= 4
    header = _read_header(r, v, kraft_from=7, epoch_from=2)
    is_full = (r.int8() == _TYPE_FULL) if v >= 5 else False
    states, topic_ids = _read_partition_states(
        r, v, _read_lai_partition, grouped=v >= 2, with_ids=v >= 5, flex=flex
    )
    leaders: list[BrokerEndpoint] = []
    for _ in range(r.array_length(flex)):
        broker_id = r.int32()
        host = r.string(flex)
        port = r.int32()
        r.end_struct(flex)
        leaders.append(BrokerEndpoint(broker_id, host, port))
    r.end_struct(flex)
    return LeaderAndIsrRequest(
        **header,
        partition_states=states,
        topic_ids=topic_ids,
        live_leaders=tuple(leaders),
        is_full=is_full,
    )


def _write_partition_error(
    w: _Writer, e: LeaderAndIsrPartitionError, *, name: bool, flex: bool
) -> None:
    if name:
        w.string(e.topic_name, flex)
    w.int32(e.partition_index)
    w.int16(e.error_code)
    w.end_struct(flex)


def _read_partition_error(
    r: _Reader, *, flex: bool, topic_name: str | None, topic_id: uuid.UUID | None
) -> LeaderAndIsrPartitionError:
    name = r.string(flex) if topic_name is None else topic_name
    partition_index = r.int32()
    error_code = r.int16()
    r.end_struct(flex)
    return LeaderAndIsrPartitionError(name, partition_index, error_code, topic_id)


def _write_leader_and_isr_response(w: _Writer, v: int, resp: LeaderAndIsrResponse) -> None:
    flex = v >= 4
    w.int16(resp.error_code)
    if v <= 4:
        w.array_length(len(resp.partition_errors), flex)
        for e in resp.partition_errors:
            _write_partition_error(w, e, name=True, flex=flex)
    else:
        groups = _group(
            resp.partition_errors, lambda e: e.topic_id if e.topic_id is not None else _ZERO_UUID
        )
        w.array_length(len(groups), flex)
        for topic_id, errors in groups:
            w.uuid(topic_id)
            w.array_length(len(errors), flex)
            for e in errors:
                _write_partition_error(w, e, name=False, flex=flex)
            w.no_tagged_fields()
    w.end_struct(flex)


def _read_leader_and_isr_response(r: _Reader, v: int) -> LeaderAndIsrResponse:
    flex = v >= 4
    error_code = r.int16()
    errors: list[LeaderAndIsrPartitionError] = []
    if v <= 4:
        for _ in range(r.array_length(flex)):
            errors.append(_read_partition_error(r, flex=flex, topic_name=None, topic_id=None))
    else:
        for _ in range(r.array_length(flex)):
            topic_id = r.uuid()
            for _ in range(r.array_length(flex)):
                errors.append(_read_partition_error(r, flex=flex, topic_name="", topic_id=topic_id))
            r.tagged_fields()
    r.end_struct(flex)
    return LeaderAndIsrResponse(error_code, tuple(errors))


# --------------------------------------------------------------------------------------------
# StopReplica (key 5): flexible from v2
# --------------------------------------------------------------------------------------------


def _write_stop_replica_request(w: _Writer, v: int, req: StopReplicaRequest) -> None:
    flex = v >= 2
    _write_header(w, v, req, "StopReplica", kraft_from=4, epoch_from=1)
    if v <= 2:
        flags = {p.delete_partition for p in req.partitions}
        _require(
            len(flags) <= 1,
            f"StopReplica v{v} has one DeletePartitions flag for all partitions; "
            "send deleted and kept partitions in separate requests",
        )
        w.boolean(flags.pop() if flags else False)
    if v == 0:
        w.array_length(len(req.partitions), flex)
        for p in req.partitions:
            w.string(p.topic_name, flex)
            w.int32(p.partition_index)
    elif v <= 2:
        groups = _group(req.partitions, lambda p: p.topic_name)
        w.array_length(len(groups), flex)
        for topic, parts in groups:
            w.string(topic, flex)
            w.int32_array([p.partition_index for p in parts], flex)
            w.end_struct(flex)
    else:
        groups = _group(req.partitions, lambda p: p.topic_name)
        w.array_length(len(groups), flex)
        for topic, parts in groups:
            w.string(topic, flex)
            w.array_length(len(parts), flex)
            for p in parts:
                w.int32(p.partition_index)
                w.int32(p.leader_epoch)
                w.boolean(p.delete_partition)
                w.no_tagged_fields()
            w.no_tagged_fields()
    w.end_struct(flex)


def _read_stop_replica_request(r: _Reader, v: int) -> StopReplicaRequest:
    flex = v >= 2
    header = _read_header(r, v, kraft_from=4, epoch_from=1)
    delete = r.boolean() if v <= 2 else False
    parts: list[StopReplicaPartition] = []
    if v == 0:
        for _ in range(r.array_length(flex)):
            topic = r.string(flex)
            parts.append(StopReplicaPartition(topic, r.int32(), -1, delete))
    elif v <= 2:
        for _ in range(r.array_length(flex)):
            topic = r.string(flex)
            for index in r.int32_array(flex):
                parts.append(StopReplicaPartition(topic, index, -1, delete))
            r.end_struct(flex)
    else:
        for _ in range(r.array_length(flex)):
            topic = r.string(flex)
            for _ in range(r.array_length(flex)):
                index = r.int32()
                leader_epoch = r.int32()
                delete_partition = r.boolean()
                r.tagged_fields()
                parts.append(StopReplicaPartition(topic, index, leader_epoch, delete_partition))
            r.tagged_fields()
    r.end_struct(flex)
    return StopReplicaRequest(**header, partitions=tuple(parts))


def _write_stop_replica_response(w: _Writer, v: int, resp: StopReplicaResponse) -> None:
    flex = v >= 2
    w.int16(resp.error_code)
    w.array_length(len(resp.partition_errors), flex)
    for e in resp.partition_errors:
        _write_partition_error(w, e, name=True, flex=flex)
    w.end_struct(flex)


def _read_stop_replica_response(r: _Reader, v: int) -> StopReplicaResponse:
    flex = v >= 2
    error_code = r.int16()
    errors = [
        _read_partition_error(r, flex=flex, topic_name=None, topic_id=None)
        for _ in range(r.array_length(flex))
    ]
    r.end_struct(flex)
    return StopReplicaResponse(error_code, tuple(errors))


# --------------------------------------------------------------------------------------------
# UpdateMetadata (key 6): flexible from v6
# --------------------------------------------------------------------------------------------


def _write_um_partition(w: _Writer, v: int, st: UpdateMetadataPartitionState) -> None:
    flex = v >= 6
    _write_leadership(w, st, st.zk_version, st.replicas, named=v <= 4, flex=flex)
    if v >= 4:
        w.int32_array(st.offline_replicas, flex)
    w.end_struct(flex)


def _read_um_partition(r: _Reader, v: int, topic_name: str) -> UpdateMetadataPartitionState:
    flex = v >= 6
    leading = _read_leadership(r, topic_name, named=v <= 4, flex=flex)
    offline = r.int32_array(flex) if v >= 4 else ()
    r.end_struct(flex)
    return UpdateMetadataPartitionState(*leading, offline_replicas=offline)


def _write_um_broker(w: _Writer, v: int, broker_id: int, endpoints: list[BrokerEndpoint]) -> None:
    flex = v >= 6
    w.int32(broker_id)
    if v == 0:
        ep = endpoints[0]
        _require(
            len(endpoints) == 1
            and ep.security_protocol == 0
            and ep.listener == _SECURITY_PROTOCOL_NAMES[0],
            f"UpdateMetadata v0 carries one PLAINTEXT endpoint per broker (broker {broker_id})",
        )
        w.string(ep.host, flex)
        w.int32(ep.port)
    else:
        w.array_length(len(endpoints), flex)
        for ep in endpoints:
            if v < 3:
                _require(
                    ep.listener == _SECURITY_PROTOCOL_NAMES.get(ep.security_protocol),
                    f"UpdateMetadata v{v} has no listener names: endpoint {ep.listener} of "
                    f"broker {broker_id} must be named for its security protocol",
                )
            w.int32(ep.port)
            w.string(ep.host, flex)
            if v >= 3:
                w.string(ep.listener, flex)
            w.int16(ep.security_protocol)
            w.end_struct(flex)
    if v >= 2:
        w.nullable_string(endpoints[0].rack, flex)
    w.end_struct(flex)


def _read_um_broker(r: _Reader, v: int) -> list[BrokerEndpoint]:
    flex = v >= 6
    broker_id = r.int32()
    raw: list[tuple[str, int, str, int]] = []  # host, port, listener, security protocol
    if v == 0:
        host = r.string(flex)
        raw.append((host, r.int32(), _SECURITY_PROTOCOL_NAMES[0], 0))
    else:
        for _ in range(r.array_length(flex)):
            port = r.int32()
            host = r.string(flex)
            listener = r.string(flex) if v >= 3 else None
            protocol = r.int16()
            if listener is None:
                listener = _SECURITY_PROTOCOL_NAMES.get(protocol)
                if listener is None:
                    raise DecodeError(f"unknown security protocol {protocol}")
            r.end_struct(flex)
            raw.append((host, port, listener, protocol))
    rack = r.nullable_string(flex) if v >= 2 else None
    r.end_struct(flex)
    return [BrokerEndpoint(broker_id, h, p, lst, sp, rack) for h, p, lst, sp in raw]


_UM_STATES_CACHED_FROM: Final = 100
"""UpdateMetadata partition-state arrays this long or longer are kept, encoded, for the next
request carrying the same states (`_um_states_bytes`)."""

_um_states_encoded: list[tuple[object, int, dict[str, uuid.UUID] | None, bytes]] = []


def _um_states_bytes(
    v: int, states: tuple[UpdateMetadataPartitionState, ...], ids: Mapping[str, uuid.UUID] | None
) -> bytes:
    """The encoded partition states of an UpdateMetadata. The controller sends the SAME states
    tuple to every live broker (only the broker epoch differs): with thousands of partitions
    the array is encoded once, not once per broker. The last two arrays are kept, with the
    tuple itself, so identity cannot be mistaken for another tuple's."""
    flex = v >= 6
    big = len(states) >= _UM_STATES_CACHED_FROM
    if big:
        for cached, cv, cids, data in _um_states_encoded:
            if cached is states and cv == v and cids == ids:
                return data
    sub = _Writer()
    _write_partition_states(
        sub, v, states, _write_um_partition, grouped=v >= 5, topic_ids=ids, flex=flex
    )
    data = bytes(sub.out)
    if big:
        _um_states_encoded.insert(0, (states, v, None if ids is None else dict(ids), data))
        del _um_states_encoded[2:]
    return data


def _write_update_metadata_request(w: _Writer, v: int, req: UpdateMetadataRequest) -> None:
    flex = v >= 6
    _write_header(w, v, req, "UpdateMetadata", kraft_from=8, epoch_from=5)
    ids = req.topic_ids if v >= 7 else None
    w.out += _um_states_bytes(v, req.partition_states, ids)
    brokers = _group(req.live_brokers, lambda b: b.broker_id)
    w.array_length(len(brokers), flex)
    for broker_id, endpoints in brokers:
        _write_um_broker(w, v, broker_id, endpoints)
    if flex:
        if v >= 8 and req.is_full:
            w.uvarint(1)  # one tagged field: Type (tag 0), an int8
            w.uvarint(_UPDATE_METADATA_TYPE_TAG)
            w.uvarint(1)
            w.int8(_TYPE_FULL)
        else:
            w.no_tagged_fields()


def _read_update_metadata_request(r: _Reader, v: int) -> UpdateMetadataRequest:
    flex = v >= 6
    header = _read_header(r, v, kraft_from=8, epoch_from=5)
    states, topic_ids = _read_partition_states(
        r, v, _read_um_partition, grouped=v >= 5, with_ids=v >= 7, flex=flex
    )
    brokers: list[BrokerEndpoint] = []
    for _ in range(r.array_length(flex)):
        brokers.extend(_read_um_broker(r, v))
    request_type = [_TYPE_UNKNOWN]
    if flex:

        def read_type(sub: _Reader) -> None:
            request_type[0] = sub.int8()

        r.tagged_fields({_UPDATE_METADATA_TYPE_TAG: read_type} if v >= 8 else None)
    return UpdateMetadataRequest(
        **header,
        partition_states=states,
        live_brokers=tuple(brokers),
        topic_ids=topic_ids,
        is_full=request_type[0] == _TYPE_FULL,
    )


def _write_update_metadata_response(w: _Writer, v: int, resp: UpdateMetadataResponse) -> None:
    w.int16(resp.error_code)
    if v >= 6:
        w.no_tagged_fields()


def _read_update_metadata_response(r: _Reader, v: int) -> UpdateMetadataResponse:
    error_code = r.int16()
    if v >= 6:
        r.tagged_fields()
    return UpdateMetadataResponse(error_code)


# --------------------------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Codec:
    body_type: type
    write: Callable[[_Writer, int, Any], None]
    read: Callable[[_Reader, int], Any]


_REQUESTS: Final[dict[int, _Codec]] = {
    LEADER_AND_ISR_KEY: _Codec(
        LeaderAndIsrRequest, _write_leader_and_isr_request, _read_leader_and_isr_request
    ),
    STOP_REPLICA_KEY: _Codec(
        StopReplicaRequest, _write_stop_replica_request, _read_stop_replica_request
    ),
    UPDATE_METADATA_KEY: _Codec(
        UpdateMetadataRequest, _write_update_metadata_request, _read_update_metadata_request
    ),
}
_RESPONSES: Final[dict[int, _Codec]] = {
    LEADER_AND_ISR_KEY: _Codec(
        LeaderAndIsrResponse, _write_leader_and_isr_response, _read_leader_and_isr_response
    ),
    STOP_REPLICA_KEY: _Codec(
        StopReplicaResponse, _write_stop_replica_response, _read_stop_replica_response
    ),
    UPDATE_METADATA_KEY: _Codec(
        UpdateMetadataResponse, _write_update_metadata_response, _read_update_metadata_response
    ),
}


def _encode_with(codec: _Codec, api_key: int, version: int, body: object, w: _Writer) -> None:
    if not isinstance(body, codec.body_type):
        raise InterbrokerEncodeError(
            f"API key {api_key} needs a {codec.body_type.__name__}, got {type(body).__name__}"
        )
    try:
        codec.write(w, version, body)
    except struct.error as e:  # an integer outside its wire type's range
        raise InterbrokerEncodeError(
            f"cannot encode {codec.body_type.__name__} v{version}: {e}"
        ) from e


def _decode_with(codec: _Codec, version: int, r: _Reader) -> Any:
    body = codec.read(r, version)
    r.expect_end(f"{codec.body_type.__name__} v{version}")
    return body


_Body = TypeVar("_Body", InterbrokerRequestBody, InterbrokerResponseBody)


class _Bodies(Generic[_Body]):
    """Bodies alone (no header, no size prefix) of the requests or of the responses."""

    __slots__ = ("_codecs",)

    def __init__(self, codecs: Mapping[int, _Codec]) -> None:
        self._codecs = codecs

    def encode(self, api_key: int, version: int, body: _Body) -> bytes:
        """The body's bytes."""
        _check_version(api_key, version, InterbrokerEncodeError)
        w = _Writer()
        _encode_with(self._codecs[api_key], api_key, version, body, w)
        return bytes(w.out)

    def decode(self, api_key: int, version: int, buf: _Bytes, offset: int = 0) -> _Body:
        """Parse a body that fills `buf[offset:]` exactly."""
        _check_version(api_key, version, DecodeError)
        body: _Body = _decode_with(self._codecs[api_key], version, _Reader(buf, offset))
        return body


_REQUEST_BODIES: Final = _Bodies[InterbrokerRequestBody](_REQUESTS)
_RESPONSE_BODIES: Final = _Bodies[InterbrokerResponseBody](_RESPONSES)
encode_interbroker_request_body = _REQUEST_BODIES.encode
decode_interbroker_request_body = _REQUEST_BODIES.decode
encode_interbroker_response_body = _RESPONSE_BODIES.encode
decode_interbroker_response_body = _RESPONSE_BODIES.decode


def _finish_frame(w: _Writer) -> bytes:
    _SIZE.pack_into(w.out, 0, len(w.out) - 4)
    return bytes(w.out)


def encode_interbroker_request(
    api_key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    body: InterbrokerRequestBody,
) -> bytes:
    """A whole request frame: size prefix, header v1 (v2 when flexible), body."""
    _check_version(api_key, version, InterbrokerEncodeError)
    w = _Writer()
    w.int32(0)  # size, patched below
    try:
        w.out += _REQUEST_PREFIX.pack(api_key, version, correlation_id)
    except struct.error as e:
        raise InterbrokerEncodeError(f"bad correlation id {correlation_id}: {e}") from e
    w.nullable_string(client_id, False)  # ClientId is never a compact string
    if is_flexible(api_key, version):
        w.no_tagged_fields()
    _encode_with(_REQUESTS[api_key], api_key, version, body, w)
    return _finish_frame(w)


@dataclass(frozen=True, slots=True)
class InterbrokerRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: InterbrokerRequestBody


def decode_interbroker_request(frame: bytes | bytearray | memoryview) -> InterbrokerRequest:
    """Parse a whole request frame (without its size prefix): header and body."""
    r = _Reader(frame)
    api_key = r.int16()
    version = r.int16()
    correlation_id = r.int32()
    _check_version(api_key, version, DecodeError)
    client_id = r.nullable_string(False)
    if is_flexible(api_key, version):
        r.tagged_fields()
    body: InterbrokerRequestBody = _decode_with(_REQUESTS[api_key], version, r)
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
    w = _Writer()
    w.int32(0)  # size, patched below
    try:
        w.int32(correlation_id)
    except struct.error as e:
        raise InterbrokerEncodeError(f"bad correlation id {correlation_id}: {e}") from e
    if is_flexible(api_key, version):
        w.no_tagged_fields()
    try:
        coerced = _coerce_response(api_key, body)
    except (TypeError, ValueError, AttributeError) as e:
        raise InterbrokerEncodeError(f"cannot build a response for API key {api_key}: {e}") from e
    _encode_with(_RESPONSES[api_key], api_key, version, coerced, w)
    return _finish_frame(w)


def decode_interbroker_response(
    api_key: int, version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, InterbrokerResponseBody]:
    """Parse a whole response frame (without its size prefix): (correlation id, body)."""
    _check_version(api_key, version, DecodeError)
    r = _Reader(frame)
    correlation_id = r.int32()
    if is_flexible(api_key, version):
        r.tagged_fields()
    body: InterbrokerResponseBody = _decode_with(_RESPONSES[api_key], version, r)
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
