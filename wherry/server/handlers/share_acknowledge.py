"""ShareAcknowledge (key 79): acknowledgements outside a fetch (KIP-932).

READ on the group, READ on each topic. The share session must exist and the epoch be its
next one (0 is refused with INVALID_SHARE_SESSION_EPOCH: acknowledging opens no session; -1
closes it after these acknowledgements, releasing what the member still holds). Each
partition's acknowledgements are applied all or nothing and persisted before the answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.server.handlers.share_common import (
    ack_batches,
    leader_of,
    open_session,
    partitions_answer,
    resolve,
)

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    opened = await open_session(broker, body, fetch=False)
    if isinstance(opened, dict):
        return opened
    settings, session = opened
    group, member, shares = body.group_id, body.member_id, broker.shares
    topics = resolve(broker, [t.topic_id for t in body.topics])
    parts: list[tuple[uuid.UUID | None, dict[str, Any]]] = []
    for t in body.topics:
        name, err = topics[t.topic_id]
        for p in t.partitions:
            leader = {"leader_id": -1, "leader_epoch": -1}
            if err == ErrorCode.none and name is not None and t.topic_id is not None:
                tp = TopicPartition(name, p.partition_index)
                leader = leader_of(broker, tp)
                code = await shares.acknowledge(
                    group, member, tp, t.topic_id, ack_batches(p.acknowledgement_batches)
                )
            else:
                code = err
            part = {
                "partition_index": p.partition_index,
                "error_code": code,
                "error_message": None,
                "current_leader": leader,
            }
            parts.append((t.topic_id, part))
    if session is None:
        shares.close_session(group, member)
    return partitions_answer(broker, settings.record_lock_duration_ms, parts)
