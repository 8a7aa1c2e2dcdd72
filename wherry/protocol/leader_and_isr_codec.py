"""LeaderAndIsr (API key 4, v0–v7; flexible from v4) bodies on the wire, Kafka 3.9's
`LeaderAndIsrRequest.json` / `LeaderAndIsrResponse.json`. `interbroker_codec.py` puts them
in frames; the mapping of the version-neutral values onto the versions is described there.
Sans-I/O.
"""

from __future__ import annotations

from wherry.protocol.interbroker import (
    BrokerEndpoint,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)
from wherry.protocol.interbroker_parts import (
    TYPE_FULL,
    TYPE_UNKNOWN,
    ZERO_UUID,
    group_by,
    read_controller_header,
    read_leadership,
    read_partition_error,
    read_partition_states,
    require,
    write_controller_header,
    write_leadership,
    write_partition_error,
    write_partition_states,
)
from wherry.protocol.wire import Reader, Writer

__all__ = [
    "read_leader_and_isr_request",
    "read_leader_and_isr_response",
    "write_leader_and_isr_request",
    "write_leader_and_isr_response",
]

def _write_partition(w: Writer, v: int, st: LeaderAndIsrPartitionState) -> None:
    flex = v >= 4
    write_leadership(w, st, st.partition_epoch, st.replicas, named=v <= 1, flex=flex)
    if v >= 3:
        w.int32_array(st.adding_replicas, flex)
        w.int32_array(st.removing_replicas, flex)
    if v >= 1:
        w.boolean(st.is_new)
    if v >= 6:
        w.int8(st.leader_recovery_state)
    else:
        require(
            st.leader_recovery_state == 0,
            f"LeaderAndIsr v{v} cannot carry leader_recovery_state "
            f"{st.leader_recovery_state} ({st.topic_name}-{st.partition_index}); needs v6+",
        )
    w.end_struct(flex)


def _read_partition(r: Reader, v: int, topic_name: str) -> LeaderAndIsrPartitionState:
    flex = v >= 4
    leading = read_leadership(r, topic_name, named=v <= 1, flex=flex)
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


def write_leader_and_isr_request(w: Writer, v: int, req: LeaderAndIsrRequest) -> None:
    flex = v >= 4
    write_controller_header(w, v, req, "LeaderAndIsr", kraft_from=7, epoch_from=2)
    if v >= 5:
        w.int8(TYPE_FULL if req.is_full else TYPE_UNKNOWN)
    ids = req.topic_ids if v >= 5 else None
    write_partition_states(
        w, v, req.partition_states, _write_partition, grouped=v >= 2, topic_ids=ids, flex=flex
    )
    w.array_length(len(req.live_leaders), flex)
    for leader in req.live_leaders:
        w.int32(leader.broker_id)
        w.string(leader.host, flex)
        w.int32(leader.port)
        w.end_struct(flex)
    w.end_struct(flex)


def read_leader_and_isr_request(r: Reader, v: int) -> LeaderAndIsrRequest:
    flex = v >= 4
    header = read_controller_header(r, v, kraft_from=7, epoch_from=2)
    is_full = (r.int8() == TYPE_FULL) if v >= 5 else False
    states, topic_ids = read_partition_states(
        r, v, _read_partition, grouped=v >= 2, with_ids=v >= 5, flex=flex
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


def write_leader_and_isr_response(w: Writer, v: int, resp: LeaderAndIsrResponse) -> None:
    flex = v >= 4
    w.int16(resp.error_code)
    if v <= 4:
        w.array_length(len(resp.partition_errors), flex)
        for e in resp.partition_errors:
            write_partition_error(w, e, name=True, flex=flex)
    else:
        groups = group_by(
            resp.partition_errors, lambda e: e.topic_id if e.topic_id is not None else ZERO_UUID
        )
        w.array_length(len(groups), flex)
        for topic_id, errors in groups:
            w.uuid(topic_id)
            w.array_length(len(errors), flex)
            for e in errors:
                write_partition_error(w, e, name=False, flex=flex)
            w.no_tagged_fields()
    w.end_struct(flex)


def read_leader_and_isr_response(r: Reader, v: int) -> LeaderAndIsrResponse:
    flex = v >= 4
    error_code = r.int16()
    errors: list[LeaderAndIsrPartitionError] = []
    if v <= 4:
        for _ in range(r.array_length(flex)):
            errors.append(read_partition_error(r, flex=flex, topic_name=None, topic_id=None))
    else:
        for _ in range(r.array_length(flex)):
            topic_id = r.uuid()
            for _ in range(r.array_length(flex)):
                errors.append(read_partition_error(r, flex=flex, topic_name="", topic_id=topic_id))
            r.tagged_fields()
    r.end_struct(flex)
    return LeaderAndIsrResponse(error_code, tuple(errors))
