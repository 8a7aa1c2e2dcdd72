"""StopReplica (API key 5, v0–v4; flexible from v2) bodies on the wire, Kafka 3.9's
`StopReplicaRequest.json` / `StopReplicaResponse.json`. v0–v2 have one DeletePartitions flag
for the whole request and no leader epochs: decoding gives leader epoch -1; encoding refuses
partitions that disagree on the flag. `interbroker_codec.py` puts them in frames. Sans-I/O.
"""

from __future__ import annotations

from wherry.protocol.interbroker import (
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
)
from wherry.protocol.interbroker_parts import (
    group_by,
    read_controller_header,
    read_partition_error,
    require,
    write_controller_header,
    write_partition_error,
)
from wherry.protocol.wire import Reader, Writer

__all__ = [
    "read_stop_replica_request",
    "read_stop_replica_response",
    "write_stop_replica_request",
    "write_stop_replica_response",
]


def write_stop_replica_request(w: Writer, v: int, req: StopReplicaRequest) -> None:
    flex = v >= 2
    write_controller_header(w, v, req, "StopReplica", kraft_from=4, epoch_from=1)
    if v <= 2:
        flags = {p.delete_partition for p in req.partitions}
        require(
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
        groups = group_by(req.partitions, lambda p: p.topic_name)
        w.array_length(len(groups), flex)
        for topic, parts in groups:
            w.string(topic, flex)
            w.int32_array([p.partition_index for p in parts], flex)
            w.end_struct(flex)
    else:
        groups = group_by(req.partitions, lambda p: p.topic_name)
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


def read_stop_replica_request(r: Reader, v: int) -> StopReplicaRequest:
    flex = v >= 2
    header = read_controller_header(r, v, kraft_from=4, epoch_from=1)
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


def write_stop_replica_response(w: Writer, v: int, resp: StopReplicaResponse) -> None:
    flex = v >= 2
    w.int16(resp.error_code)
    w.array_length(len(resp.partition_errors), flex)
    for e in resp.partition_errors:
        write_partition_error(w, e, name=True, flex=flex)
    w.end_struct(flex)


def read_stop_replica_response(r: Reader, v: int) -> StopReplicaResponse:
    flex = v >= 2
    error_code = r.int16()
    errors = [
        read_partition_error(r, flex=flex, topic_name=None, topic_id=None)
        for _ in range(r.array_length(flex))
    ]
    r.end_struct(flex)
    return StopReplicaResponse(error_code, tuple(errors))
