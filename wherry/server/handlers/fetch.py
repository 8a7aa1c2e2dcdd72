"""Fetch (key 1) for consumers and followers.

Fetch sessions (KIP-227, v7+; `replication/fetch_session.py`): a request with session epoch 0
gets a new session id (when the cache has room), later requests name only the partitions that
changed and `forgotten_topics_data`, and the answer holds only partitions with something new.
An unknown session id is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH,
both with session id 0 and no partitions, as Kafka.

A consumer's partitions of topics it may not Read are answered TOPIC_AUTHORIZATION_FAILED
(with an empty record set, as Kafka); a session keeps them, as Kafka's does, and answers them
again in every incremental answer until Read is allowed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.codec import duration_ms
from wherry.replication.fetch_reads import (
    FetchPartition,
    FetchPartitionResult,
    FetchResult,
    session_partitions,
)
from wherry.replication.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    ContextKind,
    FetchContext,
)
from wherry.replication.replica_selector import ClientMetadata, replica_selector
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize_cluster, authorized_names
from wherry.server.handlers.topic_keys import TopicKey, resolve_topic, topic_responses
from wherry.server.request_session import current_session

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.replication.fetch_session import FetchSession
    from wherry.server.services import BrokerServices

_ZERO_UUID = uuid.UUID(int=0)
CONSUMER_REPLICA_ID = -1
_SESSIONLESS = FetchContext(ContextKind.SESSIONLESS)


@dataclass
class _Requested:
    """What a Fetch request asks, checked against the ACLs."""

    replica_id: int  # >= 0 for a follower; -1 for a consumer, -2 for the debugging one
    replica_epoch: int
    follower_ok: bool  # a follower with CLUSTER_ACTION (always True for a consumer)
    wanted: list[FetchPartition] = field(default_factory=list)
    fetch_data: dict[TopicPartition, CachedPartition] = field(default_factory=dict)
    # The answer's skeleton in request order: (topic key, name or None, partition)
    order: list[tuple[TopicKey, str | None, int]] = field(default_factory=list)
    denied: set[tuple[TopicKey, int]] = field(default_factory=set)
    refused: set[TopicPartition] = field(default_factory=set)  # a consumer's denied ones

    @property
    def follower(self) -> bool:
        return self.replica_id >= 0


@dataclass
class _SessionExtras:
    """An incremental request's session, and its partitions the request did not name but
    that changed (their topic keys), with who may read them."""

    session: FetchSession
    keys: dict[TopicPartition, TopicKey]
    allowed: Callable[[TopicPartition], bool]


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    session_id = getattr(body, "session_id", INVALID_SESSION_ID)
    sessions = broker.replica_manager.fetch_sessions
    if sessions is None and session_id != INVALID_SESSION_ID:
        return _session_error(ErrorCode.fetch_session_id_not_found)
    asked = _requested(broker, body)
    ctx = _SESSIONLESS
    if sessions is not None and req.api_version >= 7:
        ctx = sessions.new_context(
            session_id=session_id,
            epoch=getattr(body, "session_epoch", FINAL_EPOCH),
            fetch_data=asked.fetch_data,
            forgotten=_forgotten(broker, body),
            privileged=asked.follower,
            now_ms=broker.clock.monotonic_ms(),
        )
        if ctx.kind is ContextKind.ERROR:
            return _session_error(ctx.error)
    incremental = ctx.kind is ContextKind.INCREMENTAL
    if ctx.session is not None and not asked.follower:
        _note_refused(asked, ctx.session, incremental)
    extras = None
    if incremental and ctx.session is not None:
        extras = _session_extras(broker, asked, ctx.session)
    result: FetchResult = {}
    if asked.wanted or incremental:
        max_bytes, min_bytes = _byte_limits(broker, req, asked)
        result = await broker.node.fetch(
            asked.wanted,
            replica_id=asked.replica_id,
            replica_epoch=asked.replica_epoch,
            max_wait_ms=duration_ms(body.max_wait),
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=getattr(body, "isolation_level", 0),
            zero_copy=True,  # records as file regions: network.py sends them from the files
            session=ctx.session,
            incremental=incremental,
            allowed=extras.allowed if extras is not None else None,
            client=_client_metadata(broker, req, asked),
        )
    if extras is not None:
        _add_session_answers(asked, extras, result)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": ctx.session_id,
        "responses": topic_responses(
            _answers(broker, asked, result, incremental),
            name_field="topic",
            partitions_field="partitions",
            no_topic_id=_ZERO_UUID,
        ),
    }


def _requested(broker: BrokerServices, body: Any) -> _Requested:
    """Who fetches, and the request's partitions: those it may read (`wanted`, and the
    session's view of them, `fetch_data`), those refused (`denied`), all in `order`."""
    replica_state = getattr(body, "replica_state", None)
    if replica_state is not None:
        replica_id, replica_epoch = replica_state.replica_id, replica_state.replica_epoch
    else:
        replica_id = getattr(body, "replica_id", -1)
        replica_epoch = getattr(body, "replica_epoch", -1)
    resolved = [
        (t, *resolve_topic(broker.cache, getattr(t, "topic", None), getattr(t, "topic_id", None)))
        for t in body.topics
    ]
    # Kafka: a follower (replica id >= 0) needs CLUSTER_ACTION on the cluster, else every
    # partition is refused; consumers, the debugging one (-2) included, READ on each topic.
    if replica_id >= 0:
        follower_ok = authorize_cluster(broker, AclOperation.CLUSTER_ACTION)
        readable = {n for _, _, n in resolved if n} if follower_ok else set()
    else:
        follower_ok = True
        readable = authorized_names(
            broker, AclOperation.READ, ResourceType.TOPIC, (n for _, _, n in resolved if n)
        )
    asked = _Requested(replica_id, replica_epoch, follower_ok)
    for t, key, name in resolved:
        for p in t.partitions:
            asked.order.append((key, name, p.partition))
            if not follower_ok or (name is not None and name not in readable):
                asked.denied.add((key, p.partition))
                if name is not None and follower_ok:  # a consumer's: kept in its session
                    tp = TopicPartition(name, p.partition)
                    asked.refused.add(tp)
                    asked.fetch_data[tp] = CachedPartition(
                        p.fetch_offset,
                        p.partition_max_bytes,
                        getattr(p, "current_leader_epoch", -1),
                        getattr(p, "log_start_offset", -1),
                        key,
                    )
            elif name is not None:
                fp = FetchPartition(
                    TopicPartition(name, p.partition),
                    p.fetch_offset,
                    p.partition_max_bytes,
                    getattr(p, "current_leader_epoch", -1),
                    getattr(p, "log_start_offset", -1),
                )
                asked.wanted.append(fp)
                asked.fetch_data[fp.tp] = CachedPartition(
                    fp.fetch_offset, fp.max_bytes, fp.current_leader_epoch, fp.log_start_offset, key
                )
    return asked


def _session_extras(
    broker: BrokerServices, asked: _Requested, session: FetchSession
) -> _SessionExtras:
    """The session's partitions that changed since its last answer (and now and then those
    drifted from it) but that the request did not name, checked against the ACLs as the
    request's own are; those allowed join `asked.wanted`."""
    manager = broker.replica_manager
    named = {fp.tp for fp in asked.wanted}
    changed = session.take_dirty()
    if asked.follower:
        # A follower outside the ISR: its partitions are read (its fetch state moves)
        # every time, as Kafka reads every partition of the session, so it can rejoin.
        held = session.partitions
        changed += [tp for tp in manager.lagging(asked.replica_id) if tp in held]
    if session.rescan_due(broker.clock.monotonic_ms()):
        changed = list(dict.fromkeys(changed + manager.drifted(session)))
    # Kafka answers a session's refused partitions in every answer, and reads them again
    # once allowed.
    changed += [tp for tp in session.refused if tp not in asked.refused]
    extra = [tp for tp in dict.fromkeys(changed) if tp not in named]
    allowed = _allowed(broker, asked.follower_ok, asked.follower)
    readable = [tp for tp in extra if allowed(tp)]
    session.refused.difference_update(readable)
    asked.wanted += session_partitions(session, readable)
    return _SessionExtras(session, {tp: session.partitions[tp].key for tp in extra}, allowed)


def _note_refused(asked: _Requested, session: FetchSession, incremental: bool) -> None:
    """The session's partitions its consumer may not read: those this request was refused,
    and (incremental) those refused before that it did not name again."""
    if incremental:
        named = {fp.tp for fp in asked.wanted}
        session.refused = {
            tp for tp in session.refused if tp in session.partitions and tp not in named
        }
        session.refused |= asked.refused
    else:
        session.refused = set(asked.refused)


def _client_metadata(
    broker: BrokerServices, req: Request, asked: _Requested
) -> ClientMetadata | None:
    """A consumer's Fetch v11+ carries its rack (KIP-392): it may then read followers, and
    the leader's `replica.selector.class` may send it to one (Kafka gives followers and
    older versions no client metadata)."""
    if req.api_version < 11 or asked.replica_id != CONSUMER_REPLICA_ID:
        return None
    listener = current_session().listener
    cache = broker.cache

    def node_rack(broker_id: int) -> tuple[bool, str | None]:
        ep = cache.endpoint(broker_id, listener)
        return (ep is not None, ep.rack if ep is not None else None)

    return ClientMetadata(
        getattr(req.body, "rack_id", "") or "",
        replica_selector(broker.config.replica_selector_class),
        node_rack,
    )


def _byte_limits(broker: BrokerServices, req: Request, asked: _Requested) -> tuple[int, int]:
    """The answer's (max_bytes, min_bytes): a consumer under a byte-rate quota gets at most a
    window's worth (as Kafka caps it)."""
    body = req.body
    max_bytes, min_bytes = getattr(body, "max_bytes", 0x7FFFFFFF), body.min_bytes
    if not asked.follower and (quota_bytes := broker.client_quotas.fetch_max_bytes(req)):
        max_bytes = min(max_bytes, quota_bytes)
        min_bytes = min(min_bytes, max_bytes)
    return max_bytes, min_bytes


def _add_session_answers(asked: _Requested, extras: _SessionExtras, result: FetchResult) -> None:
    """An incremental answer: the session's changed partitions follow the request's, under
    the topic key the client used for them; those it may not read are refused."""
    listed = {TopicPartition(name, index) for _, name, index in asked.order if name is not None}
    for tp in result:
        if tp not in listed:
            cached = extras.session.partitions.get(tp)
            key = cached.key if cached is not None else tp.topic
            asked.order.append((key, tp.topic, tp.partition))
    for tp, key in extras.keys.items():
        if tp not in result and not extras.allowed(tp):
            asked.order.append((key, tp.topic, tp.partition))
            asked.denied.add((key, tp.partition))


def _answers(
    broker: BrokerServices, asked: _Requested, result: FetchResult, incremental: bool
) -> dict[TopicKey, list[dict[str, Any]]]:
    """Each partition's answer, by topic key in `asked.order`; an incremental answer leaves
    out the named partitions without news."""
    topics: dict[TopicKey, list[dict[str, Any]]] = {}
    for key, name, index in asked.order:
        r = None
        if name is not None and (key, index) not in asked.denied:
            r = result.get(TopicPartition(name, index))
            if r is None and incremental:
                continue  # nothing new for it
        if (
            r is not None
            and r.error_code == ErrorCode.unknown_topic_or_partition
            and name is not None
            and broker.cache.partition(name, index) is not None
        ):
            # The partition exists but has no replica here: the client's metadata is stale
            # (Kafka's ReplicaManager.getPartitionOrError).
            r.error_code = ErrorCode.not_leader_or_follower
        if r is not None:
            part = _read_answer(index, r)
        elif (key, index) in asked.denied:
            part = _error_answer(index, ErrorCode.topic_authorization_failed)
        elif name is None:
            part = _error_answer(index, ErrorCode.unknown_topic_id)
        else:
            part = _error_answer(index, ErrorCode.unknown_topic_or_partition)
        topics.setdefault(key, []).append(part)
    return topics


def _read_answer(index: int, r: FetchPartitionResult) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": r.error_code,
        "high_watermark": r.high_watermark,
        "last_stable_offset": r.last_stable_offset,
        "log_start_offset": r.log_start_offset,
        "aborted_transactions": (
            None
            if r.aborted_transactions is None
            else [
                {"producer_id": pid, "first_offset": first}
                for pid, first in r.aborted_transactions
            ]
        ),
        "preferred_read_replica": r.preferred_read_replica,
        "records": r.records,
    }


def _error_answer(index: int, code: ErrorCode) -> dict[str, Any]:
    # Empty records, not null: Kafka answers every partition with a record set (its
    # `recordsOrFail`), and librdkafka refuses a null one as a malformed response and asks
    # again at once, forever.
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _session_error(code: ErrorCode) -> Mapping[str, Any]:
    return {
        "error_code": code,
        "session_id": INVALID_SESSION_ID,
        "responses": [],
        "throttle_time": 0,
    }


def _forgotten(broker: BrokerServices, body: Any) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for t in getattr(body, "forgotten_topics_data", None) or ():
        _, name = resolve_topic(
            broker.cache, getattr(t, "topic", None), getattr(t, "topic_id", None)
        )
        if name is not None:
            out.extend(TopicPartition(name, int(p)) for p in t.partitions)
    return out


def _allowed(
    broker: BrokerServices, follower_ok: bool, follower: bool
) -> Callable[[TopicPartition], bool]:
    """Whether a session partition the request did not name may be read: a follower with
    CLUSTER_ACTION, a consumer with READ on its topic (decided once per topic and request)."""
    if follower:
        return lambda _tp: follower_ok
    verdicts: dict[str, bool] = {}

    def allowed(tp: TopicPartition) -> bool:
        v = verdicts.get(tp.topic)
        if v is None:
            v = verdicts[tp.topic] = bool(
                authorized_names(broker, AclOperation.READ, ResourceType.TOPIC, [tp.topic])
            )
        return v

    return allowed
