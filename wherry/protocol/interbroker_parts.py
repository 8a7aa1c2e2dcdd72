"""What the controller → broker codecs share (LeaderAndIsr, StopReplica, UpdateMetadata in
`interbroker_codec.py` and its per-API modules, ControlledShutdown in
`controlled_shutdown_codec.py`): the request and response frames around a body, the fields
every controller request starts with, the partition leadership LeaderAndIsr and
UpdateMetadata both carry, and a partition's error in a LeaderAndIsr or StopReplica answer.

The primitives are `wherry.protocol.wire`'s `Reader` and `Writer`: malformed input raises
its `DecodeError`, a value the wire cannot carry its `EncodeError` (here called
`InterbrokerEncodeError`). Sans-I/O.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Generic, TypeAlias, TypedDict, TypeVar

from wherry.protocol.interbroker import (
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    PartitionLeadership,
    StopReplicaRequest,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from wherry.protocol.primitives import INT32 as _SIZE
from wherry.protocol.primitives import REQUEST_PREFIX
from wherry.protocol.wire import Buffer, DecodeError, EncodeError, Reader, Writer

__all__ = [
    "TYPE_FULL",
    "TYPE_UNKNOWN",
    "ZERO_UUID",
    "BodyCodec",
    "ControllerHeader",
    "InterbrokerEncodeError",
    "finish_frame",
    "group_by",
    "read_controller_header",
    "read_leadership",
    "read_partition_error",
    "read_partition_states",
    "require",
    "start_request_frame",
    "start_response_frame",
    "write_controller_header",
    "write_leadership",
    "write_partition_error",
    "write_partition_states",
]

InterbrokerEncodeError = EncodeError
"""A value that the requested version cannot carry (or that is not a valid wire value)."""

ZERO_UUID: Final = uuid.UUID(int=0)
TYPE_UNKNOWN: Final = 0
"""The request Type (LeaderAndIsr v5+, UpdateMetadata v8+) a ZooKeeper controller sends."""
TYPE_FULL: Final = 2
_FOUR_INT32: Final = struct.Struct(">iiii")

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
B = TypeVar("B")


def group_by(items: Iterable[T], key: Callable[[T], K]) -> list[tuple[K, list[T]]]:
    """Group items by key, groups and items in order of first appearance."""
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.items())


def require(condition: bool, message: str) -> None:
    if not condition:
        raise InterbrokerEncodeError(message)


# --- frames ---------------------------------------------------------------------------------


def start_request_frame(
    api_key: int, version: int, correlation_id: int, client_id: str | None, header_version: int
) -> Writer:
    """A writer holding a request's size prefix (patched by `finish_frame`) and its header:
    v0 (no ClientId), v1, or v2 (with tagged fields)."""
    w = Writer()
    w.out += b"\0\0\0\0"
    try:
        w.out += REQUEST_PREFIX.pack(api_key, version, correlation_id)
    except struct.error as e:
        raise InterbrokerEncodeError(f"bad correlation id {correlation_id}: {e}") from e
    if header_version >= 1:
        w.nullable_string(client_id)  # ClientId is never a compact string
    if header_version >= 2:
        w.no_tagged_fields()
    return w


def start_response_frame(correlation_id: int, flexible: bool) -> Writer:
    """A writer holding a response's size prefix and its header (v1 when `flexible`)."""
    w = Writer()
    w.out += b"\0\0\0\0"
    try:
        w.out += _SIZE.pack(correlation_id)
    except struct.error as e:
        raise InterbrokerEncodeError(f"bad correlation id {correlation_id}: {e}") from e
    w.end_struct(flexible)
    return w


def finish_frame(w: Writer) -> bytes:
    _SIZE.pack_into(w.out, 0, len(w.out) - 4)
    return bytes(w.out)


@dataclass(frozen=True, slots=True)
class BodyCodec(Generic[B]):
    """One request's or response's body: its class, writer and reader (`what` names it in
    errors); with `versions` (min, max), `encode` and `decode` refuse other versions."""

    body_type: type[B]
    write: Callable[[Writer, int, B], None]
    read: Callable[[Reader, int], B]
    what: str
    versions: tuple[int, int] | None = None

    def check_version(self, version: int, error: type[Exception]) -> None:
        if self.versions is not None:
            lo, hi = self.versions
            if not lo <= version <= hi:
                raise error(f"version {version} of {self.what} is not supported ({lo}-{hi})")

    def write_into(self, w: Writer, version: int, body: object) -> None:
        """The body, once checked to be a `body_type`."""
        if not isinstance(body, self.body_type):
            raise InterbrokerEncodeError(
                f"{self.what} needs a {self.body_type.__name__}, got {type(body).__name__}"
            )
        try:
            self.write(w, version, body)
        except struct.error as e:  # an integer outside its wire type's range
            raise InterbrokerEncodeError(
                f"cannot encode {self.body_type.__name__} v{version}: {e}"
            ) from e

    def encode(self, version: int, body: B) -> bytes:
        """The body alone (no header, no size prefix)."""
        self.check_version(version, InterbrokerEncodeError)
        w = Writer()
        self.write_into(w, version, body)
        return bytes(w.out)

    def read_whole(self, r: Reader, version: int) -> B:
        """The body, which must end where `r` does."""
        body = self.read(r, version)
        r.expect_end(f"{self.body_type.__name__} v{version}")
        return body

    def decode(self, version: int, buf: Buffer, offset: int = 0) -> B:
        """A body that fills `buf[offset:]` exactly."""
        self.check_version(version, DecodeError)
        return self.read_whole(Reader(buf, offset), version)


# --- what the three controller requests start with -----------------------------------------


class ControllerHeader(TypedDict):
    """The fields every controller request starts with, as decoded."""

    controller_id: int
    is_kraft_controller: bool
    controller_epoch: int
    broker_epoch: int


def write_controller_header(
    w: Writer,
    v: int,
    req: LeaderAndIsrRequest | StopReplicaRequest | UpdateMetadataRequest,
    api: str,
    *,
    kraft_from: int,
    epoch_from: int,
) -> None:
    """ControllerId, IsKRaftController (from ``kraft_from``), ControllerEpoch, BrokerEpoch
    (from ``epoch_from``)."""
    w.int32(req.controller_id)
    if v >= kraft_from:
        w.boolean(req.is_kraft_controller)
    else:
        require(not req.is_kraft_controller, f"{api} v{v} has no isKRaftController")
    w.int32(req.controller_epoch)
    if v >= epoch_from:
        w.int64(req.broker_epoch)


def read_controller_header(
    r: Reader, v: int, *, kraft_from: int, epoch_from: int
) -> ControllerHeader:
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


# --- partition leadership (LeaderAndIsr and UpdateMetadata) ---------------------------------

LeadingFields: TypeAlias = tuple[str, int, int, int, int, tuple[int, ...], int, tuple[int, ...]]
"""The first eight fields of both partition-state classes, in their order (see
`write_leadership`)."""


def write_leadership(
    w: Writer,
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
    w.pack(_FOUR_INT32, st.partition_index, st.controller_epoch, st.leader, st.leader_epoch)
    w.int32_array(st.isr, flex)
    w.int32(epoch)
    w.int32_array(replicas, flex)


def read_leadership(r: Reader, topic_name: str, *, named: bool, flex: bool) -> LeadingFields:
    """What `write_leadership` writes (read in wire order, which is the fields' order)."""
    if named:
        topic_name = r.string(flex)
    index, controller_epoch, leader, leader_epoch = r.unpack(_FOUR_INT32)
    isr = r.int32_array(flex)
    epoch = r.int32()
    replicas = r.int32_array(flex)
    return topic_name, index, controller_epoch, leader, leader_epoch, isr, epoch, replicas


_State = TypeVar("_State", LeaderAndIsrPartitionState, UpdateMetadataPartitionState)


def write_partition_states(
    w: Writer,
    v: int,
    states: tuple[_State, ...],
    write_state: Callable[[Writer, int, _State], None],
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
    groups = group_by(states, lambda s: s.topic_name)
    w.array_length(len(groups), flex)
    for topic, topic_states in groups:
        w.string(topic, flex)
        if topic_ids is not None:
            w.uuid(topic_ids.get(topic, ZERO_UUID))
        w.array_length(len(topic_states), flex)
        for st in topic_states:
            write_state(w, v, st)
        w.end_struct(flex)


def read_partition_states(
    r: Reader,
    v: int,
    read_state: Callable[[Reader, int, str], _State],
    *,
    grouped: bool,
    with_ids: bool,
    flex: bool,
) -> tuple[tuple[_State, ...], dict[str, uuid.UUID]]:
    """What `write_partition_states` writes: the states and the topics' non-zero ids."""
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
            if topic_id != ZERO_UUID:
                topic_ids[topic] = topic_id
        for _ in range(r.array_length(flex)):
            states.append(read_state(r, v, topic))
        r.end_struct(flex)
    return tuple(states), topic_ids


# --- a partition's error (LeaderAndIsr and StopReplica answers) -----------------------------


def write_partition_error(
    w: Writer, e: LeaderAndIsrPartitionError, *, name: bool, flex: bool
) -> None:
    if name:
        w.string(e.topic_name, flex)
    w.int32(e.partition_index)
    w.int16(e.error_code)
    w.end_struct(flex)


def read_partition_error(
    r: Reader, *, flex: bool, topic_name: str | None, topic_id: uuid.UUID | None
) -> LeaderAndIsrPartitionError:
    name = r.string(flex) if topic_name is None else topic_name
    partition_index = r.int32()
    error_code = r.int16()
    r.end_struct(flex)
    return LeaderAndIsrPartitionError(name, partition_index, error_code, topic_id)
