"""OffsetFetch (key 9): a group's committed offsets (several groups per request from v8)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize, authorized_names
from wherry.server.handlers.topic_keys import TopicKey, topic_responses

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _fetch_group(
    broker: BrokerServices,
    group_id: str,
    topics: Sequence[Any] | None,
    require_stable: bool,
    v: int,
    member: tuple[str | None, int] = (None, -1),
) -> tuple[ErrorCode, list[dict[str, Any]]]:
    cache = broker.cache
    by_id = v >= 10
    wanted: list[tuple[TopicKey, str | None, int]] | None = None
    if topics is not None:
        wanted = []
        for t in topics:
            if by_id:
                key: TopicKey = t.topic_id
                name = cache.topic_name(t.topic_id)
            else:
                key = name = t.name
            wanted.extend((key, name, p) for p in t.partition_indexes)
    # Kafka: DESCRIBE on the group; the offsets of topics without DESCRIBE are left out of
    # all-partitions fetches and answered TOPIC_AUTHORIZATION_FAILED when asked for.
    group_ok = authorize(broker, AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
    describable: set[str] = set()
    if group_ok and wanted is not None:
        describable = authorized_names(
            broker, AclOperation.DESCRIBE, ResourceType.TOPIC, (n for _, n, _ in wanted if n)
        )
    partitions = (
        None
        if wanted is None
        else [TopicPartition(name, p) for _, name, p in wanted if name in describable]
    )
    if group_ok:
        err, found = broker.groups.coordinator.handle_fetch_offsets(
            group_id, require_stable, partitions, member[0], member[1]
        )
    else:
        err, found = ErrorCode.group_authorization_failed, {}
    if err != ErrorCode.none:
        if v < 2 and wanted is not None:
            # v0-1 carry errors per partition only.
            out: dict[TopicKey, list[dict[str, Any]]] = {}
            for key, _, p in wanted:
                out.setdefault(key, []).append(_partition(p, -1, -1, "", err))
            return err, _topics(out)
        return err, []
    out = {}
    if wanted is None:
        allowed = authorized_names(
            broker, AclOperation.DESCRIBE, ResourceType.TOPIC, (tp.topic for tp in found)
        )
        for tp, data in sorted(found.items()):
            if tp.topic not in allowed:
                continue
            key = tp.topic
            if by_id:
                tid = cache.topic_id(tp.topic)
                if tid is None:
                    continue
                key = tid
            out.setdefault(key, []).append(
                _partition(tp.partition, data.offset, data.leader_epoch, data.metadata, data.error)
            )
    else:
        for key, name, p in wanted:
            if name is None:
                out.setdefault(key, []).append(
                    _partition(p, -1, -1, "", ErrorCode.unknown_topic_id)
                )
                continue
            if name not in describable:
                out.setdefault(key, []).append(
                    _partition(p, -1, -1, "", ErrorCode.topic_authorization_failed)
                )
                continue
            data = found[TopicPartition(name, p)]
            out.setdefault(key, []).append(
                _partition(p, data.offset, data.leader_epoch, data.metadata, data.error)
            )
    return ErrorCode.none, _topics(out)


def _partition(
    index: int, offset: int, epoch: int, metadata: str, err: ErrorCode
) -> dict[str, Any]:
    return {
        "partition_index": index,
        "committed_offset": offset,
        "committed_leader_epoch": epoch,
        "metadata": metadata,
        "error_code": err,
    }


def _topics(parts: Mapping[TopicKey, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return topic_responses(
        parts, name_field="name", partitions_field="partitions", no_topic_id=None
    )


async def _stable(broker: BrokerServices, group_id: str) -> None:
    """Kafka 4: stable offsets are read after the commits being written (not refused with
    UNSTABLE_OFFSET_COMMIT, which only pending transactional offsets get)."""
    coordinator = broker.groups.coordinator

    def start(done: Callable[[bool], None]) -> None:
        coordinator.after_offset_writes(group_id, lambda: done(True))

    await answer_of(start)


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    v = req.api_version
    require_stable = getattr(body, "require_stable", False)
    if v >= 8:
        groups = []
        for g in body.groups:
            if require_stable:
                await _stable(broker, g.group_id)
            # v9+: a KIP-848 member's id and epoch, checked against its consumer group
            member = (getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            err, topics = _fetch_group(broker, g.group_id, g.topics, require_stable, v, member)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": err})
        return {"throttle_time": 0, "groups": groups}
    if require_stable:
        await _stable(broker, body.group_id)
    err, topics = _fetch_group(broker, body.group_id, body.topics, require_stable, v)
    return {"throttle_time": 0, "topics": topics, "error_code": err}
