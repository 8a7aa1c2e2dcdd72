"""UpdateMetadata (API key 6, v0–v8; flexible from v6) bodies on the wire, Kafka 3.9's
`UpdateMetadataRequest.json` / `UpdateMetadataResponse.json`.

`live_brokers` has one `BrokerEndpoint` per (broker, endpoint), grouped back by broker id when
encoding (the rack of a broker's first endpoint is used). v0 carries one PLAINTEXT host/port
per broker and v1–v2 no listener name (it is the security protocol's name), so encoding those
versions refuses other endpoints, like Kafka's request builder. v8's top-level Type is tagged
field 0. `interbroker_codec.py` puts the bodies in frames. Sans-I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Final

from wherry.protocol.interbroker import (
    SECURITY_PROTOCOL_IDS,
    BrokerEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wherry.protocol.interbroker_parts import (
    TYPE_FULL,
    TYPE_UNKNOWN,
    group_by,
    read_controller_header,
    read_leadership,
    read_partition_states,
    require,
    write_controller_header,
    write_leadership,
    write_partition_states,
)
from wherry.protocol.wire import DecodeError, Reader, Writer

__all__ = [
    "read_update_metadata_request",
    "read_update_metadata_response",
    "write_update_metadata_request",
    "write_update_metadata_response",
]

_TYPE_TAG: Final = 0
# SecurityProtocol ids and their default listener names (UpdateMetadata v0–v2 have no listener).
_SECURITY_PROTOCOL_NAMES: Final[dict[int, str]] = {v: k for k, v in SECURITY_PROTOCOL_IDS.items()}


def _write_partition(w: Writer, v: int, st: UpdateMetadataPartitionState) -> None:
    flex = v >= 6
    write_leadership(w, st, st.zk_version, st.replicas, named=v <= 4, flex=flex)
    if v >= 4:
        w.int32_array(st.offline_replicas, flex)
    w.end_struct(flex)


def _read_partition(r: Reader, v: int, topic_name: str) -> UpdateMetadataPartitionState:
    flex = v >= 6
    leading = read_leadership(r, topic_name, named=v <= 4, flex=flex)
    offline = r.int32_array(flex) if v >= 4 else ()
    r.end_struct(flex)
    return UpdateMetadataPartitionState(*leading, offline_replicas=offline)


def _write_broker(w: Writer, v: int, broker_id: int, endpoints: list[BrokerEndpoint]) -> None:
    flex = v >= 6
    w.int32(broker_id)
    if v == 0:
        ep = endpoints[0]
        require(
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
                require(
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


def _read_broker(r: Reader, v: int) -> list[BrokerEndpoint]:
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


_STATES_CACHED_FROM: Final = 100
"""UpdateMetadata partition-state arrays this long or longer are kept, encoded, for the next
request carrying the same states (`_states_bytes`)."""

_states_encoded: list[tuple[object, int, dict[str, uuid.UUID] | None, bytes]] = []


def _states_bytes(
    v: int, states: tuple[UpdateMetadataPartitionState, ...], ids: Mapping[str, uuid.UUID] | None
) -> bytes:
    """The encoded partition states of an UpdateMetadata. The controller sends the SAME states
    tuple to every live broker (only the broker epoch differs): with thousands of partitions
    the array is encoded once, not once per broker. The last two arrays are kept, with the
    tuple itself, so identity cannot be mistaken for another tuple's."""
    flex = v >= 6
    big = len(states) >= _STATES_CACHED_FROM
    if big:
        for cached, cv, cids, data in _states_encoded:
            if cached is states and cv == v and cids == ids:
                return data
    sub = Writer()
    write_partition_states(
        sub, v, states, _write_partition, grouped=v >= 5, topic_ids=ids, flex=flex
    )
    data = bytes(sub.out)
    if big:
        _states_encoded.insert(0, (states, v, None if ids is None else dict(ids), data))
        del _states_encoded[2:]
    return data


def write_update_metadata_request(w: Writer, v: int, req: UpdateMetadataRequest) -> None:
    flex = v >= 6
    write_controller_header(w, v, req, "UpdateMetadata", kraft_from=8, epoch_from=5)
    ids = req.topic_ids if v >= 7 else None
    w.out += _states_bytes(v, req.partition_states, ids)
    brokers = group_by(req.live_brokers, lambda b: b.broker_id)
    w.array_length(len(brokers), flex)
    for broker_id, endpoints in brokers:
        _write_broker(w, v, broker_id, endpoints)
    if flex:
        if v >= 8 and req.is_full:
            w.uvarint(1)  # one tagged field: Type (tag 0), an int8
            w.uvarint(_TYPE_TAG)
            w.uvarint(1)
            w.int8(TYPE_FULL)
        else:
            w.no_tagged_fields()


def read_update_metadata_request(r: Reader, v: int) -> UpdateMetadataRequest:
    flex = v >= 6
    header = read_controller_header(r, v, kraft_from=8, epoch_from=5)
    states, topic_ids = read_partition_states(
        r, v, _read_partition, grouped=v >= 5, with_ids=v >= 7, flex=flex
    )
    brokers: list[BrokerEndpoint] = []
    for _ in range(r.array_length(flex)):
        brokers.extend(_read_broker(r, v))
    request_type = [TYPE_UNKNOWN]
    if flex:

        def read_type(sub: Reader) -> None:
            request_type[0] = sub.int8()

        r.tagged_fields({_TYPE_TAG: read_type} if v >= 8 else None)
    return UpdateMetadataRequest(
        **header,
        partition_states=states,
        live_brokers=tuple(brokers),
        topic_ids=topic_ids,
        is_full=request_type[0] == TYPE_FULL,
    )


def write_update_metadata_response(w: Writer, v: int, resp: UpdateMetadataResponse) -> None:
    w.int16(resp.error_code)
    if v >= 6:
        w.no_tagged_fields()


def read_update_metadata_response(r: Reader, v: int) -> UpdateMetadataResponse:
    error_code = r.int16()
    if v >= 6:
        r.tagged_fields()
    return UpdateMetadataResponse(error_code)
