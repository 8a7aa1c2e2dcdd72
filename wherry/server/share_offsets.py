"""Share-group offsets for the admin APIs (KIP-932): DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92), on the group coordinator.

A share group's "offset" on a partition is its share-partition start offset (SPSO), which the
share coordinator holds (`coordinator/share_state.py`). Describe reads it
(ReadShareGroupStateSummary); alter starts the share-partition afresh at the given offset
with the next state epoch (InitializeShareGroupState: a leader still holding the old one is
fenced) and adds it to the group's initialized topics; delete deletes the states of whole
topics (DeleteShareGroupState) and drops them from the group. Alter and delete need an empty
group (NON_EMPTY_GROUP), as Kafka's GroupMetadataManager; a changed group is announced
(`groups/<group>`) so that partition leaders reload its idle share-partitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.outbound.client import RequestClient
from wherry.server.shares import ShareRuntime
from wherry.share.group import ShareGroup
from wherry.share.state import ShareKey, ShareState

__all__ = ["PartitionOffset", "alter_offsets", "delete_offsets", "describe_offsets", "find_group"]


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    partition: int
    start_offset: int = -1
    leader_epoch: int = -1
    lag: int = -1
    error_code: ErrorCode = ErrorCode.none


def find_group(rt: ShareRuntime, group_id: str) -> tuple[ErrorCode, ShareGroup | None]:
    """The share group this coordinator holds, or the error to answer."""
    err = rt.coordinator_error(group_id)
    if err != ErrorCode.none:
        return err, None
    g = rt.groups.groups.get(group_id)
    return (ErrorCode.none, g) if g is not None else (ErrorCode.group_id_not_found, None)


async def _summary(rt: ShareRuntime, key: ShareKey) -> tuple[ErrorCode, ShareState | None]:
    async def local() -> tuple[ErrorCode, ShareState | None]:
        return rt.coordinator.summary(key)

    async def remote(client: RequestClient) -> tuple[ErrorCode, ShareState | None]:
        r = await client.call(87, 0, {"group_id": key.group_id, "topics": [
            {"topic_id": key.topic_id, "partitions": [{"partition": key.partition,
                                                         "leader_epoch": -1}]}]})
        p = r.results[0].partitions[0]
        if p.error_code != ErrorCode.none:
            return ErrorCode(p.error_code), None
        if p.state_epoch < 0:
            return ErrorCode.none, None
        return ErrorCode.none, ShareState(p.state_epoch, p.leader_epoch, p.start_offset, ())

    result: tuple[ErrorCode, ShareState | None] = await rt.persister.with_coordinator(
        key, local, remote
    )
    return result


async def _initialize(rt: ShareRuntime, key: ShareKey, state_epoch: int, start: int) -> ErrorCode:
    async def local() -> tuple[ErrorCode, None]:
        return await rt.coordinator.write(key, ShareState(state_epoch, -1, start, ())), None

    async def remote(client: RequestClient) -> tuple[ErrorCode, None]:
        r = await client.call(83, 0, {"group_id": key.group_id, "topics": [
            {"topic_id": key.topic_id, "partitions": [
                {"partition": key.partition, "state_epoch": state_epoch,
                 "start_offset": start}]}]})
        return ErrorCode(r.results[0].partitions[0].error_code), None

    err, _ = await rt.persister.with_coordinator(key, local, remote)
    return ErrorCode(err)


def _lag(rt: ShareRuntime, tp: TopicPartition, start: int) -> int:
    """Records from the SPSO to the high watermark, when this broker leads the partition
    (else unknown: -1). Records acknowledged above the SPSO still count."""
    part = rt.node.replica_manager.get_partition(tp)
    if start < 0 or part is None or not part.is_leader:
        return -1
    return max(0, part.high_watermark - start)


async def describe_offsets(
    rt: ShareRuntime, group: ShareGroup, topic: str, topic_id: uuid.UUID, partitions: Sequence[int]
) -> list[PartitionOffset]:
    out = []
    initialized = group.state_topics.get(topic_id, ("", frozenset()))[1]
    for p in partitions:
        if p not in initialized:
            out.append(PartitionOffset(p))
            continue
        err, st = await _summary(rt, ShareKey(group.group_id, topic_id, p))
        if err != ErrorCode.none:
            out.append(PartitionOffset(p, error_code=err))
        elif st is None or st.start_offset < 0:
            out.append(PartitionOffset(p))
        else:
            lag = _lag(rt, TopicPartition(topic, p), st.start_offset)
            out.append(PartitionOffset(p, st.start_offset, st.leader_epoch, lag))
    return out


async def alter_offsets(
    rt: ShareRuntime, group: ShareGroup, topic: str, topic_id: uuid.UUID, offsets: dict[int, int]
) -> dict[int, ErrorCode]:
    """Start each share-partition afresh at its offset (the group is empty)."""
    out: dict[int, ErrorCode] = {}
    done: set[int] = set()
    for p, start in sorted(offsets.items()):
        if start < 0:
            out[p] = ErrorCode.invalid_request
            continue
        key = ShareKey(group.group_id, topic_id, p)
        err, st = await _summary(rt, key)
        if err == ErrorCode.none:
            err = await _initialize(rt, key, 0 if st is None else st.state_epoch + 1, start)
        out[p] = err
        if err == ErrorCode.none:
            done.add(p)
    if done:
        had = group.state_topics.get(topic_id, (topic, frozenset()))[1]
        group.state_topics[topic_id] = (topic, had | done)
        await _changed(rt, group)
    return out


async def delete_offsets(
    rt: ShareRuntime, group: ShareGroup, topic_id: uuid.UUID
) -> ErrorCode:
    """Delete the group's share-partition states of one topic (the group is empty)."""
    _name, parts = group.state_topics.get(topic_id, ("", frozenset()))
    for p in sorted(parts):
        err = await rt.persister.delete(ShareKey(group.group_id, topic_id, p))
        if err != ErrorCode.none:
            return err
    if topic_id in group.state_topics:
        del group.state_topics[topic_id]
        await _changed(rt, group)
    return ErrorCode.none


async def _changed(rt: ShareRuntime, group: ShareGroup) -> None:
    """Write the group's initialized topics, drop what leaders cached of it."""
    await rt.persist_group(group.group_id)
    rt.on_group_config_change(group.group_id)
    await paths.notify_config_change(rt.store(), f"groups/{paths.sanitize(group.group_id)}")
