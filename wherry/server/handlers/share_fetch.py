"""ShareFetch (key 78): a share consumer's records and acknowledgements (KIP-932).

READ on the group (else the whole request fails with GROUP_AUTHORIZATION_FAILED), READ on
each topic. The share session (`share_session_epoch`: 0 opens one, -1 closes it, otherwise the
next epoch) says which partitions the member fetches; the acknowledgements ride along and are
applied (and persisted) first, then `coordinator/shares.py` acquires records for the member,
waiting up to `max_wait` for some. Each partition answers the batches it read plus the
offset ranges acquired (with their delivery counts): the client delivers only those.

`max_records` bounds the records acquired as the request's `share_acquire_mode` (v2) says:
0, `batch_optimized` (and every v1 request), at batch boundaries -- whole batches, so a
poll may hold more records than the consumer's `max.poll.records` --, listed in ranges of
about `batch_size` records; 1, `record_limit`, at exactly `max_records`. Another mode is
INVALID_REQUEST.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.codec import duration_ms
from wherry.server.handlers.share_common import (
    ack_batches,
    answer,
    leader_of,
    open_session,
    partitions_answer,
    resolve,
)
from wherry.share.partition import AcquireMode

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


# the answers to a named partition that still put it in the share session
IN_SESSION = (ErrorCode.none, ErrorCode.unknown_topic_id)


def _mode(body: Any) -> AcquireMode | None:
    """The request's acquire mode; None for a mode Kafka does not know."""
    code = getattr(body, "share_acquire_mode", 0)
    if code not in (0, 1):
        return None
    size = getattr(body, "batch_size", 0)
    return AcquireMode(batch_size=size if size > 0 else None, strict=code == 1)


def _part(index: int, **kw: Any) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": kw.get("error_code", ErrorCode.none),
        "error_message": None,
        "acknowledge_error_code": kw.get("ack", ErrorCode.none),
        "acknowledge_error_message": None,
        "current_leader": kw.get("leader", {"leader_id": -1, "leader_epoch": -1}),
        "records": kw.get("records", b""),
        "acquired_records": kw.get("acquired", []),
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    mode = _mode(body)
    if mode is None:
        return answer(ErrorCode.invalid_request, "Unknown share acquire mode.")
    opened = await open_session(broker, body, fetch=True)
    if isinstance(opened, dict):
        return opened
    settings, session = opened
    group, member, shares = body.group_id, body.member_id, broker.shares
    topics = resolve(
        broker,
        [t.topic_id for t in body.topics] + [t.topic_id for t in body.forgotten_topics_data],
    )
    # (topic id, partition) -> answer fields, in request order
    answers: dict[tuple[uuid.UUID | None, int], dict[str, Any]] = {}
    acks: list[tuple[TopicPartition, uuid.UUID, Any]] = []
    for t in body.topics:
        name, err = topics[t.topic_id]
        for p in t.partitions:
            key = (t.topic_id, p.partition_index)
            if session is not None and t.topic_id is not None and err in IN_SESSION:
                # a topic this broker does not know yet stays in the session, as the client
                # takes it to: it is fetched once the broker learns of it
                session.partitions.add(key)
            if err != ErrorCode.none or name is None:
                answers[key] = {"error_code": err}
                continue
            tp = TopicPartition(name, p.partition_index)
            answers[key] = {"leader": leader_of(broker, tp)}
            if p.acknowledgement_batches and t.topic_id is not None:
                acks.append((tp, t.topic_id, p.acknowledgement_batches))
    if session is not None:
        for f in body.forgotten_topics_data:
            name = topics[f.topic_id][0]
            for pi in f.partitions:
                if f.topic_id is not None:
                    session.partitions.discard((f.topic_id, pi))
                    if name is not None:  # what the member held there goes back
                        shares.release(group, member, TopicPartition(name, pi))
    for tp, tid, batches in acks:
        code = await shares.acknowledge(group, member, tp, tid, ack_batches(batches))
        answers[(tid, tp.partition)]["ack"] = code
    if session is None:  # the final epoch: acknowledgements only, then the session closes
        shares.close_session(group, member)
        wanted: list[tuple[TopicPartition, uuid.UUID]] = []
    else:
        wanted = []
        held = resolve(broker, {tid for tid, _ in session.partitions})
        for tid, pi in sorted(session.partitions, key=lambda x: (str(x[0]), x[1])):
            name, err = held[tid]
            if err != ErrorCode.none or name is None:
                answers.setdefault((tid, pi), {"error_code": err})
                continue
            a = answers.get((tid, pi))
            if a is not None and a.get("error_code", ErrorCode.none) != ErrorCode.none:
                continue
            wanted.append((TopicPartition(name, pi), tid))
    result = {}
    if wanted:
        result = await shares.fetch(
            group,
            member,
            wanted,
            max_wait_ms=0 if acks else duration_ms(body.max_wait),
            max_bytes=getattr(body, "max_bytes", 0x7FFFFFFF),
            max_records=max(1, getattr(body, "max_records", 500)),
            mode=mode,
        )
    for (tp, tid), pf in ((x, result[x[0]]) for x in wanted if x[0] in result):
        a = answers.setdefault((tid, tp.partition), {})
        a["leader"] = {"leader_id": pf.leader_id, "leader_epoch": pf.leader_epoch}
        if pf.error_code != ErrorCode.none:
            a["error_code"] = pf.error_code
        if pf.acquired:
            a["records"] = pf.records
            a["acquired"] = [
                {
                    "first_offset": r.first_offset,
                    "last_offset": r.last_offset,
                    "delivery_count": r.delivery_count,
                }
                for r in pf.acquired
            ]
    parts = ((topic_id, _part(pi, **a)) for (topic_id, pi), a in answers.items())
    return partitions_answer(broker, settings.record_lock_duration_ms, parts)
