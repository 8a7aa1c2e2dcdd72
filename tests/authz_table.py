"""Kafka's authorization checks, one row per (API, resource, operation), as data.

Each row says: send `build(ctx)` as API `api_key` v`version`; the principal holds the ACLs of
`grants(ctx)` (what the request needs besides the operation under test) and, in the allowed
case, `operation` on (`resource_type`, `resource(ctx)`) too. `outcome(response)` reads what
the check decides — usually an error code — and must equal `denied` without the operation;
with it, `allowed` when given, else anything but `denied`.

Bodies are version-neutral mappings (`wherry.protocol.codec.encode_request` fits them to the
version) or, for keys 4-7, the `wherry.protocol.interbroker` dataclasses. Requests that would
change the cluster when allowed are built to be harmless then (validate-only, stale controller
epochs, unknown names), so the same table can run against any broker, in process (tests/server/
test_authorization_table.py) or over the wire with real ACLs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.protocol.interbroker import (
    ControlledShutdownRequest,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from wherry.protocol.records import build_batch
from wherry.security.acl import CLUSTER_NAME, AclOperation, ResourceType

Op = AclOperation
RT = ResourceType

# API keys that need no authorization (ApiVersions; ListTransactions, which only leaves out
# the transactional ids the caller may not DESCRIBE) or whose checks others own (ACLs, SCRAM).
EXEMPT_API_KEYS = frozenset({17, 18, 29, 30, 31, 36, 50, 51, 66})

TOPIC_DENIED = int(ErrorCode.topic_authorization_failed)
GROUP_DENIED = int(ErrorCode.group_authorization_failed)
CLUSTER_DENIED = int(ErrorCode.cluster_authorization_failed)
TXN_DENIED = int(ErrorCode.transactional_id_authorization_failed)
NONE = int(ErrorCode.none)


def _txn_partition_answer(r: Any) -> int:
    if hasattr(r, "results_by_transaction") and not r.results_by_transaction:
        return int(r.error_code)
    topics = (
        r.results_by_topic_v3_and_below
        if hasattr(r, "results_by_topic_v3_and_below")
        else r.results_by_transaction[0].topic_results
    )
    return int(topics[0].results_by_partition[0].partition_error_code)


def _add_partitions(c: AuthzContext) -> dict[str, Any]:
    return {"v3_and_below_transactional_id": c.transactional_id,
            "v3_and_below_producer_id": 1_000_000, "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": c.txn_topic, "partitions": [0]}]}


@dataclass(frozen=True)
class AuthzContext:
    """The names and epochs the rows use; the harness creates `topic`, `txn_topic`, `group`
    and `offsets_group` (each with a committed offset of `topic`-0) before running the table.
    The allowed OffsetDelete row deletes `offsets_group`'s offset."""

    topic: str
    topic_id: uuid.UUID
    txn_topic: str
    group: str
    broker_id: int
    broker_epoch: int
    controller_epoch: int
    new_topic: str = "authz-new-topic"
    missing_topic: str = "authz-missing-topic"
    missing_group: str = "authz-missing-group"
    auto_topic: str = "authz-auto-topic"
    transactional_id: str = "authz-txn"
    offsets_group: str = "authz-offsets-group"  # has a committed offset of `topic`-0 too


Grant = tuple[AclOperation, ResourceType, str]


@dataclass(frozen=True)
class AuthzRow:
    label: str
    api_key: int
    version: int
    build: Callable[[AuthzContext], Any]
    operation: AclOperation
    resource_type: ResourceType
    resource: Callable[[AuthzContext], str]
    outcome: Callable[[Any], int]
    denied: int
    allowed: int | None = None
    grants: Callable[[AuthzContext], Sequence[Grant]] = field(default=lambda ctx: ())

    @property
    def id(self) -> str:
        return f"{self.api_key}-{self.label}"

    def tested_grant(self, ctx: AuthzContext) -> Grant:
        return (self.operation, self.resource_type, self.resource(ctx))


# --- readers --------------------------------------------------------------------------------
def _top(r: Any) -> int:
    return int(r.error_code)


def _first_partition(topics: str, partitions: str) -> Callable[[Any], int]:
    def read(r: Any) -> int:
        listed = getattr(r, topics)
        if not listed:  # a request-level error (e.g. the group is gone): no partitions
            return int(r.error_code)
        return int(getattr(listed[0], partitions)[0].error_code)

    return read


def _topic_listed(r: Any) -> int:
    """Metadata for all topics leaves out what may not be described: report that as the
    authorization failure it stands for."""
    return NONE if any(t.name == _LISTED[0] for t in r.topics) else TOPIC_DENIED


def _group_listed(r: Any) -> int:
    return NONE if any(g.group_id == _LISTED[1] for g in r.groups) else GROUP_DENIED


_LISTED = ["", ""]  # (topic, group) the two listing readers look for; set by `rows()`


# --- request bodies -------------------------------------------------------------------------
def _produce(topic: str, *, transactional_id: str | None = None) -> dict[str, Any]:
    txn = transactional_id is not None
    batch = build_batch(
        [(None, b"authz")],
        producer_id=1_000_000 if txn else -1,
        producer_epoch=0 if txn else -1,
        base_sequence=0 if txn else -1,
        is_transactional=txn,
    )
    return {
        "transactional_id": transactional_id,
        "acks": 1,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }


def _fetch(topic: str, replica_id: int) -> dict[str, Any]:
    return {
        "replica_id": replica_id,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "fetch_offset": 0,
                        "partition_max_bytes": 1 << 20,
                        "current_leader_epoch": -1,
                        "log_start_offset": -1,
                        "last_fetched_epoch": -1,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def _metadata(topics: list[str] | None, *, auto: bool = False, cluster_ops: bool = False) -> Any:
    return {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": auto,
        "include_cluster_authorized_operations": cluster_ops,
        "include_topic_authorized_operations": False,
    }


def _txn_offset_commit(ctx: AuthzContext) -> dict[str, Any]:
    return {
        "transactional_id": ctx.transactional_id, "group_id": ctx.group,
        "producer_id": 1_000_000, "producer_epoch": 0, "generation_id": 5,
        "member_id": "authz-nobody", "group_instance_id": None,
        "topics": [{"name": ctx.topic, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}],
    }


def _offset_commit(ctx: AuthzContext, group: str) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time": -1,
        "topics": [
            {
                "name": ctx.topic,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}
                ],
            }
        ],
    }


def _config_resource(rtype: int, name: str, key: str, value: str) -> dict[str, Any]:
    return {
        "resource_type": rtype,
        "resource_name": name,
        "configs": [{"name": key, "value": value, "config_operation": 0}],
    }


def _create_topics(name: str) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout": 5000,
        "validate_only": True,
    }


def _stale_leader_and_isr(ctx: AuthzContext) -> LeaderAndIsrRequest:
    # A stale controller epoch: answered STALE_CONTROLLER_EPOCH once authorized, harmless.
    state = LeaderAndIsrPartitionState(
        ctx.topic, 0, 0, ctx.broker_id, 0, (ctx.broker_id,), 0, (ctx.broker_id,)
    )
    return LeaderAndIsrRequest(
        ctx.broker_id, 0, ctx.broker_epoch, (state,), {ctx.topic: ctx.topic_id}, ()
    )


def _stale_stop_replica(ctx: AuthzContext) -> StopReplicaRequest:
    return StopReplicaRequest(
        ctx.broker_id,
        0,
        ctx.broker_epoch,
        (StopReplicaPartition(ctx.topic, 0, -2, True),),
    )


def _stale_update_metadata(ctx: AuthzContext) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(ctx.broker_id, 0, ctx.broker_epoch, (), ())


def _topic(ctx: AuthzContext) -> str:
    return ctx.topic


def _group(ctx: AuthzContext) -> str:
    return ctx.group


def _cluster(ctx: AuthzContext) -> str:
    return CLUSTER_NAME


STALE = int(ErrorCode.stale_controller_epoch)


def _share_fetch(c: AuthzContext, partitions: list[int]) -> dict[str, Any]:
    return {
        "group_id": c.group, "member_id": "authz-share-member", "share_session_epoch": 0,
        "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10,
        "batch_size": 10,
        "topics": [{"topic_id": c.topic_id, "partitions": [
            {"partition_index": p, "acknowledgement_batches": []} for p in partitions]}]
        if partitions else [],
        "forgotten_topics_data": [],
    }


def _share_state_bodies() -> dict[int, Callable[[AuthzContext], dict[str, Any]]]:
    """The share coordinator's APIs (83-87), each on a group no share consumer uses."""

    def body(extra: dict[str, Any]) -> Callable[[AuthzContext], dict[str, Any]]:
        return lambda c: {"group_id": c.missing_group, "topics": [
            {"topic_id": c.topic_id, "partitions": [{"partition": 0, **extra}]}]}

    return {
        83: body({"state_epoch": 1, "start_offset": 0}),
        84: body({"leader_epoch": 0}),
        85: body({"state_epoch": 0, "leader_epoch": 0, "start_offset": 0,
                  "state_batches": []}),
        86: body({}),
        87: body({"leader_epoch": 0}),
    }
def _cg_heartbeat(group: str, epoch: int, topics: list[str]) -> dict[str, Any]:
    return {"group_id": group, "member_id": "authz-nobody", "member_epoch": epoch,
            "instance_id": None, "rack_id": None, "rebalance_timeout": -1,
            "subscribed_topic_names": topics or None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None}


def rows(ctx: AuthzContext) -> list[AuthzRow]:
    """The table for `ctx` (the listing readers look for `ctx.topic` and `ctx.group`)."""
    _LISTED[0], _LISTED[1] = ctx.topic, ctx.group
    t, g = _topic, _group
    read_group: Callable[[AuthzContext], Sequence[Grant]] = lambda c: [(Op.READ, RT.GROUP, c.group)]  # noqa: E731
    read_topic: Callable[[AuthzContext], Sequence[Grant]] = lambda c: [(Op.READ, RT.TOPIC, c.topic)]  # noqa: E731
    produce_part = _first_partition("responses", "partition_responses")
    fetch_part = _first_partition("responses", "partitions")
    topic_part = _first_partition("topics", "partitions")
    return [
        # --- produce / consume -------------------------------------------------------------
        AuthzRow("produce-topic-write", 0, 9, lambda c: _produce(c.topic),
                 Op.WRITE, RT.TOPIC, t, produce_part, TOPIC_DENIED, NONE),
        AuthzRow("produce-unknown-topic-write", 0, 9, lambda c: _produce(c.missing_topic),
                 Op.WRITE, RT.TOPIC, lambda c: c.missing_topic, produce_part, TOPIC_DENIED,
                 int(ErrorCode.unknown_topic_or_partition)),
        AuthzRow("produce-transactional-id-write", 0, 9,
                 lambda c: _produce(c.txn_topic, transactional_id=c.transactional_id),
                 Op.WRITE, RT.TRANSACTIONAL_ID, lambda c: c.transactional_id, produce_part,
                 TXN_DENIED, grants=lambda c: [(Op.WRITE, RT.TOPIC, c.txn_topic)]),
        AuthzRow("fetch-consumer-read", 1, 12, lambda c: _fetch(c.topic, -1),
                 Op.READ, RT.TOPIC, t, fetch_part, TOPIC_DENIED, NONE),
        AuthzRow("fetch-debug-consumer-read", 1, 12, lambda c: _fetch(c.topic, -2),
                 Op.READ, RT.TOPIC, t, fetch_part, TOPIC_DENIED, NONE),
        AuthzRow("fetch-follower-cluster-action", 1, 12, lambda c: _fetch(c.topic, c.broker_id),
                 Op.CLUSTER_ACTION, RT.CLUSTER, _cluster, fetch_part, TOPIC_DENIED,
                 grants=read_topic),
        AuthzRow("list-offsets-describe", 2, 7, lambda c: {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": c.topic, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
                 Op.DESCRIBE, RT.TOPIC, t, topic_part, TOPIC_DENIED, NONE),
        # --- metadata ----------------------------------------------------------------------
        AuthzRow("metadata-named-topic-describe", 3, 12, lambda c: _metadata([c.topic]),
                 Op.DESCRIBE, RT.TOPIC, t, lambda r: int(r.topics[0].error_code),
                 TOPIC_DENIED, NONE),
        AuthzRow("metadata-unknown-topic-describe", 3, 12, lambda c: _metadata([c.missing_topic]),
                 Op.DESCRIBE, RT.TOPIC, lambda c: c.missing_topic,
                 lambda r: int(r.topics[0].error_code), TOPIC_DENIED,
                 int(ErrorCode.unknown_topic_or_partition)),
        AuthzRow("metadata-all-topics-describe", 3, 12, lambda c: _metadata(None),
                 Op.DESCRIBE, RT.TOPIC, t, _topic_listed, TOPIC_DENIED, NONE),
        AuthzRow("metadata-auto-create-create", 3, 12,
                 lambda c: _metadata([c.auto_topic], auto=True),
                 Op.CREATE, RT.TOPIC, lambda c: c.auto_topic,
                 lambda r: int(r.topics[0].error_code), TOPIC_DENIED,
                 grants=lambda c: [(Op.DESCRIBE, RT.TOPIC, c.auto_topic)]),
        AuthzRow("metadata-cluster-operations-describe", 3, 10,
                 lambda c: _metadata([], cluster_ops=True),
                 Op.DESCRIBE, RT.CLUSTER, _cluster,
                 lambda r: int(r.cluster_authorized_operations), 0, 1 << Op.DESCRIBE),
        # --- inter-broker ------------------------------------------------------------------
        AuthzRow("leader-and-isr-cluster-action", 4, 7, _stale_leader_and_isr,
                 Op.CLUSTER_ACTION, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED, STALE),
        AuthzRow("stop-replica-cluster-action", 5, 4, _stale_stop_replica,
                 Op.CLUSTER_ACTION, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED, STALE),
        AuthzRow("update-metadata-cluster-action", 6, 8, _stale_update_metadata,
                 Op.CLUSTER_ACTION, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED, STALE),
        AuthzRow("controlled-shutdown-cluster-action", 7, 3,
                 lambda c: ControlledShutdownRequest(broker_id=4242, broker_epoch=0),
                 Op.CLUSTER_ACTION, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED),
        AuthzRow("alter-partition-cluster-action", 56, 3, lambda c: {
            "broker_id": c.broker_id, "broker_epoch": c.broker_epoch, "topics": []},
                 Op.CLUSTER_ACTION, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED, NONE),
        # A marker for a missing topic: harmless when allowed.
        AuthzRow("write-txn-markers-cluster-action", 27, 1, lambda c: {"markers": [{
            "producer_id": 1_000_000, "producer_epoch": 0, "transaction_result": False,
            "coordinator_epoch": 0,
            "topics": [{"name": c.missing_topic, "partition_indexes": [0]}]}]},
                 Op.CLUSTER_ACTION, RT.CLUSTER, _cluster,
                 lambda r: int(r.markers[0].topics[0].partitions[0].error_code),
                 CLUSTER_DENIED, int(ErrorCode.unknown_topic_or_partition)),
        # TxnOffsetCommit as an unknown member of generation 5: refused after the checks.
        AuthzRow("txn-offset-commit-transactional-id-write", 28, 3, _txn_offset_commit,
                 Op.WRITE, RT.TRANSACTIONAL_ID, lambda c: c.transactional_id, topic_part,
                 TXN_DENIED, grants=lambda c: [(Op.READ, RT.GROUP, c.group),
                                               (Op.READ, RT.TOPIC, c.topic)]),
        AuthzRow("txn-offset-commit-group-read", 28, 3, _txn_offset_commit,
                 Op.READ, RT.GROUP, g, topic_part, GROUP_DENIED,
                 grants=lambda c: [(Op.WRITE, RT.TRANSACTIONAL_ID, c.transactional_id),
                                   (Op.READ, RT.TOPIC, c.topic)]),
        AuthzRow("txn-offset-commit-topic-read", 28, 3, _txn_offset_commit,
                 Op.READ, RT.TOPIC, t, topic_part, TOPIC_DENIED,
                 grants=lambda c: [(Op.WRITE, RT.TRANSACTIONAL_ID, c.transactional_id),
                                   (Op.READ, RT.GROUP, c.group)]),
        # --- groups ------------------------------------------------------------------------
        AuthzRow("offset-commit-group-read", 8, 8, lambda c: _offset_commit(c, c.group),
                 Op.READ, RT.GROUP, g, topic_part, GROUP_DENIED, NONE, grants=read_topic),
        AuthzRow("offset-commit-topic-read", 8, 8, lambda c: _offset_commit(c, c.group),
                 Op.READ, RT.TOPIC, t, topic_part, TOPIC_DENIED, NONE, grants=read_group),
        AuthzRow("offset-fetch-group-describe", 9, 7, lambda c: {
            "group_id": c.group, "topics": [{"name": c.topic, "partition_indexes": [0]}]},
                 Op.DESCRIBE, RT.GROUP, g, _top, GROUP_DENIED, NONE,
                 grants=lambda c: [(Op.DESCRIBE, RT.TOPIC, c.topic)]),
        AuthzRow("offset-fetch-topic-describe", 9, 7, lambda c: {
            "group_id": c.group, "topics": [{"name": c.topic, "partition_indexes": [0]}]},
                 Op.DESCRIBE, RT.TOPIC, t, topic_part, TOPIC_DENIED, NONE,
                 grants=lambda c: [(Op.DESCRIBE, RT.GROUP, c.group)]),
        AuthzRow("offset-fetch-v8-group-describe", 9, 8, lambda c: {"groups": [
            {"group_id": c.group, "topics": [{"name": c.topic, "partition_indexes": [0]}]}]},
                 Op.DESCRIBE, RT.GROUP, g, lambda r: int(r.groups[0].error_code), GROUP_DENIED,
                 NONE, grants=lambda c: [(Op.DESCRIBE, RT.TOPIC, c.topic)]),
        AuthzRow("find-coordinator-group-describe", 10, 3, lambda c: {
            "key": c.group, "key_type": 0},
                 Op.DESCRIBE, RT.GROUP, g, _top, GROUP_DENIED, NONE),
        AuthzRow("find-coordinator-txn-describe", 10, 4, lambda c: {
            "key_type": 1, "coordinator_keys": [c.transactional_id]},
                 Op.DESCRIBE, RT.TRANSACTIONAL_ID, lambda c: c.transactional_id,
                 lambda r: int(r.coordinators[0].error_code), TXN_DENIED),
        AuthzRow("join-group-read", 11, 5, lambda c: {
            "group_id": c.group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]},
                 Op.READ, RT.GROUP, g, _top, GROUP_DENIED,
                 int(ErrorCode.member_id_required)),
        AuthzRow("heartbeat-read", 12, 4, lambda c: {
            "group_id": c.group, "generation_id": 1, "member_id": "authz-nobody",
            "group_instance_id": None},
                 Op.READ, RT.GROUP, g, _top, GROUP_DENIED),
        AuthzRow("leave-group-read", 13, 4, lambda c: {
            "group_id": c.group, "members": [{"member_id": "authz-nobody",
                                              "group_instance_id": None}]},
                 Op.READ, RT.GROUP, g, _top, GROUP_DENIED),
        AuthzRow("sync-group-read", 14, 5, lambda c: {
            "group_id": c.group, "generation_id": 1, "member_id": "authz-nobody",
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
            "assignments": []},
                 Op.READ, RT.GROUP, g, _top, GROUP_DENIED),
        AuthzRow("describe-groups-describe", 15, 5, lambda c: {
            "groups": [c.group], "include_authorized_operations": False},
                 Op.DESCRIBE, RT.GROUP, g, lambda r: int(r.groups[0].error_code),
                 GROUP_DENIED, NONE),
        AuthzRow("list-groups-group-describe", 16, 4, lambda c: {"states_filter": []},
                 Op.DESCRIBE, RT.GROUP, g, _group_listed, GROUP_DENIED, NONE),
        AuthzRow("list-groups-cluster-describe", 16, 4, lambda c: {"states_filter": []},
                 Op.DESCRIBE, RT.CLUSTER, _cluster, _group_listed, GROUP_DENIED, NONE),
        # KIP-848: READ on the group, DESCRIBE on the subscribed topics (a join with no
        # rebalance timeout, INVALID_REQUEST once allowed, so no member is added)
        AuthzRow("consumer-group-heartbeat-read", 68, 1, lambda c: _cg_heartbeat(c.group, 5, []),
                 Op.READ, RT.GROUP, g, _top, GROUP_DENIED, int(ErrorCode.group_id_not_found)),
        AuthzRow("consumer-group-heartbeat-topic-describe", 68, 1,
                 lambda c: _cg_heartbeat(c.group, 0, [c.topic]),
                 Op.DESCRIBE, RT.TOPIC, t, _top, TOPIC_DENIED, int(ErrorCode.invalid_request),
                 grants=read_group),
        AuthzRow("consumer-group-describe-describe", 69, 0, lambda c: {
            "group_ids": [c.group], "include_authorized_operations": False},
                 Op.DESCRIBE, RT.GROUP, g, lambda r: int(r.groups[0].error_code),
                 GROUP_DENIED),
        AuthzRow("delete-groups-delete", 42, 2, lambda c: {"groups_names": [c.missing_group]},
                 Op.DELETE, RT.GROUP, lambda c: c.missing_group,
                 lambda r: int(r.results[0].error_code), GROUP_DENIED),
        AuthzRow("offset-delete-group-delete", 47, 0, lambda c: {
            "group_id": c.missing_group,
            "topics": [{"name": c.topic, "partitions": [{"partition_index": 0}]}]},
                 Op.DELETE, RT.GROUP, lambda c: c.missing_group, _top, GROUP_DENIED,
                 grants=read_topic),
        AuthzRow("offset-delete-topic-read", 47, 0, lambda c: {
            "group_id": c.offsets_group,
            "topics": [{"name": c.topic, "partitions": [{"partition_index": 0}]}]},
                 Op.READ, RT.TOPIC, t, topic_part, TOPIC_DENIED,
                 grants=lambda c: [(Op.DELETE, RT.GROUP, c.offsets_group)]),
        # --- admin -------------------------------------------------------------------------
        AuthzRow("create-topics-topic-create", 19, 7, lambda c: _create_topics(c.new_topic),
                 Op.CREATE, RT.TOPIC, lambda c: c.new_topic,
                 lambda r: int(r.topics[0].error_code), TOPIC_DENIED, NONE),
        AuthzRow("create-topics-cluster-create", 19, 7, lambda c: _create_topics(c.new_topic),
                 Op.CREATE, RT.CLUSTER, _cluster,
                 lambda r: int(r.topics[0].error_code), TOPIC_DENIED, NONE),
        AuthzRow("create-topics-describe-configs", 19, 7, lambda c: _create_topics(c.new_topic),
                 Op.DESCRIBE_CONFIGS, RT.TOPIC, lambda c: c.new_topic,
                 lambda r: int(r.topics[0].topic_config_error_code), TOPIC_DENIED, NONE,
                 grants=lambda c: [(Op.CREATE, RT.TOPIC, c.new_topic)]),
        AuthzRow("delete-topics-delete", 20, 5, lambda c: {
            "topic_names": [c.missing_topic], "timeout": 5000},
                 Op.DELETE, RT.TOPIC, lambda c: c.missing_topic,
                 lambda r: int(r.responses[0].error_code), TOPIC_DENIED,
                 int(ErrorCode.unknown_topic_or_partition)),
        AuthzRow("delete-records-delete", 21, 2, lambda c: {
            "topics": [{"name": c.topic, "partitions": [{"partition_index": 0, "offset": 0}]}],
            "timeout": 5000},
                 Op.DELETE, RT.TOPIC, t, topic_part, TOPIC_DENIED, NONE),
        AuthzRow("init-producer-id-idempotent-write", 22, 4, lambda c: {
            "transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1,
            "producer_epoch": -1},
                 Op.IDEMPOTENT_WRITE, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED, NONE),
        AuthzRow("init-producer-id-any-topic-write", 22, 4, lambda c: {
            "transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1,
            "producer_epoch": -1},
                 Op.WRITE, RT.TOPIC, t, _top, CLUSTER_DENIED, NONE),
        AuthzRow("init-producer-id-transactional-write", 22, 4, lambda c: {
            "transactional_id": c.transactional_id, "transaction_timeout": 60_000,
            "producer_id": -1, "producer_epoch": -1},
                 Op.WRITE, RT.TRANSACTIONAL_ID, lambda c: c.transactional_id, _top, TXN_DENIED),
        AuthzRow("add-partitions-to-txn-transactional-write", 24, 3, _add_partitions,
                 Op.WRITE, RT.TRANSACTIONAL_ID, lambda c: c.transactional_id,
                 _txn_partition_answer, TXN_DENIED,
                 grants=lambda c: [(Op.WRITE, RT.TOPIC, c.txn_topic)]),
        AuthzRow("add-partitions-to-txn-topic-write", 24, 3, _add_partitions,
                 Op.WRITE, RT.TOPIC, lambda c: c.txn_topic, _txn_partition_answer, TOPIC_DENIED,
                 grants=lambda c: [(Op.WRITE, RT.TRANSACTIONAL_ID, c.transactional_id)]),
        AuthzRow("add-partitions-to-txn-v4-cluster-action", 24, 4, lambda c: {"transactions": [
            {"transactional_id": c.transactional_id, "producer_id": 1_000_000,
             "producer_epoch": 0, "verify_only": True,
             "topics": [{"name": c.txn_topic, "partitions": [0]}]}]},
                 Op.CLUSTER_ACTION, RT.CLUSTER, _cluster, _txn_partition_answer, CLUSTER_DENIED),
        AuthzRow("add-offsets-to-txn-transactional-write", 25, 3, lambda c: {
            "transactional_id": c.transactional_id, "producer_id": 1_000_000,
            "producer_epoch": 0, "group_id": c.group},
                 Op.WRITE, RT.TRANSACTIONAL_ID, lambda c: c.transactional_id, _top, TXN_DENIED,
                 grants=lambda c: [(Op.READ, RT.GROUP, c.group)]),
        AuthzRow("add-offsets-to-txn-group-read", 25, 3, lambda c: {
            "transactional_id": c.transactional_id, "producer_id": 1_000_000,
            "producer_epoch": 0, "group_id": c.group},
                 Op.READ, RT.GROUP, g, _top, GROUP_DENIED,
                 grants=lambda c: [(Op.WRITE, RT.TRANSACTIONAL_ID, c.transactional_id)]),
        AuthzRow("end-txn-transactional-write", 26, 3, lambda c: {
            "transactional_id": c.transactional_id, "producer_id": 1_000_000,
            "producer_epoch": 0, "committed": False},
                 Op.WRITE, RT.TRANSACTIONAL_ID, lambda c: c.transactional_id, _top, TXN_DENIED),
        # An id no producer initialized (kio cannot read the -1 start time of an Empty one).
        AuthzRow("describe-transactions-describe", 65, 0, lambda c: {
            "transactional_ids": [c.transactional_id + "-described"]},
                 Op.DESCRIBE, RT.TRANSACTIONAL_ID, lambda c: c.transactional_id + "-described",
                 lambda r: int(r.transaction_states[0].error_code), TXN_DENIED),
        AuthzRow("describe-producers-read", 61, 0, lambda c: {
            "topics": [{"name": c.topic, "partition_indexes": [0]}]},
                 Op.READ, RT.TOPIC, t, topic_part, TOPIC_DENIED, NONE),
        AuthzRow("offset-for-leader-epoch-describe", 23, 4, lambda c: {
            "replica_id": -1, "topics": [{"topic": c.topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
                 Op.DESCRIBE, RT.TOPIC, t, topic_part, TOPIC_DENIED, NONE),
        AuthzRow("offset-for-leader-epoch-cluster-action", 23, 4, lambda c: {
            "replica_id": c.broker_id, "topics": [{"topic": c.topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
                 Op.CLUSTER_ACTION, RT.CLUSTER, _cluster, topic_part, TOPIC_DENIED, NONE),
        AuthzRow("describe-configs-topic", 32, 4, lambda c: {
            "resources": [{"resource_type": 2, "resource_name": c.topic,
                           "configuration_keys": None}]},
                 Op.DESCRIBE_CONFIGS, RT.TOPIC, t, lambda r: int(r.results[0].error_code),
                 TOPIC_DENIED, NONE),
        AuthzRow("describe-configs-broker", 32, 4, lambda c: {
            "resources": [{"resource_type": 4, "resource_name": str(c.broker_id),
                           "configuration_keys": None}]},
                 Op.DESCRIBE_CONFIGS, RT.CLUSTER, _cluster,
                 lambda r: int(r.results[0].error_code), CLUSTER_DENIED, NONE),
        AuthzRow("alter-configs-topic", 33, 2, lambda c: {
            "resources": [_config_resource(2, c.topic, "retention.ms", "100000")],
            "validate_only": True},
                 Op.ALTER_CONFIGS, RT.TOPIC, t, lambda r: int(r.responses[0].error_code),
                 TOPIC_DENIED, NONE),
        AuthzRow("alter-configs-broker", 33, 2, lambda c: {
            "resources": [_config_resource(4, str(c.broker_id), "log.retention.ms", "100000")],
            "validate_only": True},
                 Op.ALTER_CONFIGS, RT.CLUSTER, _cluster,
                 lambda r: int(r.responses[0].error_code), CLUSTER_DENIED, NONE),
        AuthzRow("alter-replica-log-dirs-alter", 34, 2, lambda c: {"dirs": [{
            "path": "/authz-not-a-log-dir", "topics": [{"name": c.topic, "partitions": [0]}]}]},
                 Op.ALTER, RT.CLUSTER, _cluster,
                 lambda r: int(r.results[0].partitions[0].error_code), CLUSTER_DENIED,
                 int(ErrorCode.log_dir_not_found)),
        AuthzRow("describe-log-dirs-describe", 35, 4, lambda c: {"topics": None},
                 Op.DESCRIBE, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED, NONE),
        AuthzRow("create-partitions-alter", 37, 3, lambda c: {
            "topics": [{"name": c.topic, "count": 2, "assignments": None}], "timeout_ms": 5000,
            "validate_only": True},
                 Op.ALTER, RT.TOPIC, t, lambda r: int(r.results[0].error_code),
                 TOPIC_DENIED, NONE),
        AuthzRow("elect-leaders-alter", 43, 2, lambda c: {
            "election_type": 0, "topic_partitions": [{"topic": c.topic, "partitions": [0]}],
            "timeout": 5000},
                 Op.ALTER, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED, NONE),
        AuthzRow("describe-client-quotas-cluster", 48, 1, lambda c: {
            "components": [{"entity_type": "client-id", "match_type": 2, "match": None}],
            "strict": False},
                 Op.DESCRIBE_CONFIGS, RT.CLUSTER, _cluster, lambda r: int(r.error_code),
                 CLUSTER_DENIED, NONE),
        AuthzRow("alter-client-quotas-cluster", 49, 1, lambda c: {
            "entries": [{"entity": [{"entity_type": "client-id", "entity_name": "authz"}],
                         "ops": [{"key": "producer_byte_rate", "value": 1e6,
                                  "remove": False}]}],
            "validate_only": True},
                 Op.ALTER_CONFIGS, RT.CLUSTER, _cluster,
                 lambda r: int(r.entries[0].error_code), CLUSTER_DENIED, NONE),
        AuthzRow("incremental-alter-configs-topic", 44, 1, lambda c: {
            "resources": [_config_resource(2, c.topic, "retention.ms", "100000")],
            "validate_only": True},
                 Op.ALTER_CONFIGS, RT.TOPIC, t, lambda r: int(r.responses[0].error_code),
                 TOPIC_DENIED, NONE),
        AuthzRow("incremental-alter-configs-broker", 44, 1, lambda c: {
            "resources": [_config_resource(4, str(c.broker_id), "log.retention.ms", "100000")],
            "validate_only": True},
                 Op.ALTER_CONFIGS, RT.CLUSTER, _cluster,
                 lambda r: int(r.responses[0].error_code), CLUSTER_DENIED, NONE),
        AuthzRow("incremental-alter-configs-broker-logger", 44, 1, lambda c: {
            "resources": [_config_resource(8, str(c.broker_id), "kafka", "DEBUG")],
            "validate_only": True},
                 Op.ALTER_CONFIGS, RT.CLUSTER, _cluster,
                 lambda r: int(r.responses[0].error_code), CLUSTER_DENIED),
        AuthzRow("alter-partition-reassignments-alter", 45, 0, lambda c: {
            "timeout_ms": 5000, "topics": [{"name": c.topic, "partitions": [
                {"partition_index": 0, "replicas": None}]}]},
                 Op.ALTER, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED, NONE),
        AuthzRow("list-partition-reassignments-describe", 46, 0, lambda c: {
            "timeout_ms": 5000, "topics": None},
                 Op.DESCRIBE, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED, NONE),
        AuthzRow("list-config-resources-describe-configs", 74, 1,
                 lambda c: {"resource_types": []},
                 Op.DESCRIBE_CONFIGS, RT.CLUSTER, _cluster, _top, CLUSTER_DENIED, NONE),
        AuthzRow("describe-topic-partitions-describe", 75, 0, lambda c: {
            "topics": [{"name": c.topic}], "response_partition_limit": 10, "cursor": None},
                 Op.DESCRIBE, RT.TOPIC, t, lambda r: int(r.topics[0].error_code),
                 TOPIC_DENIED, NONE),
        AuthzRow("describe-cluster-operations", 60, 1, lambda c: {
            "include_cluster_authorized_operations": True, "endpoint_type": 1},
                 Op.DESCRIBE, RT.CLUSTER, _cluster,
                 lambda r: int(r.cluster_authorized_operations), 0, 1 << Op.DESCRIBE),
        # Share groups (KIP-932) and group config resources (type 32).
        AuthzRow("describe-configs-group", 32, 4, lambda c: {
            "resources": [{"resource_type": 32, "resource_name": c.group,
                           "configuration_keys": None}]},
                 Op.DESCRIBE_CONFIGS, RT.GROUP, g, lambda r: int(r.results[0].error_code),
                 GROUP_DENIED, NONE),
        AuthzRow("incremental-alter-configs-group", 44, 1, lambda c: {
            "resources": [_config_resource(32, c.group, "share.auto.offset.reset", "earliest")],
            "validate_only": True},
                 Op.ALTER_CONFIGS, RT.GROUP, g, lambda r: int(r.responses[0].error_code),
                 GROUP_DENIED, NONE),
        AuthzRow("share-group-heartbeat-read", 76, 1, lambda c: {
            "group_id": c.group, "member_id": "authz-nobody", "member_epoch": 3,
            "rack_id": None, "subscribed_topic_names": None},
                 Op.READ, RT.GROUP, g, _top, GROUP_DENIED),
        AuthzRow("share-group-heartbeat-topic-describe", 76, 1, lambda c: {
            "group_id": c.group, "member_id": "authz-nobody", "member_epoch": 3,
            "rack_id": None, "subscribed_topic_names": [c.topic]},
                 Op.DESCRIBE, RT.TOPIC, t, _top, TOPIC_DENIED, grants=read_group),
        AuthzRow("find-coordinator-share-cluster-action", 10, 4, lambda c: {
            "key_type": 2, "coordinator_keys": [f"{c.group}:{c.topic_id}:0"]},
                 Op.CLUSTER_ACTION, RT.CLUSTER, _cluster,
                 lambda r: int(r.coordinators[0].error_code), CLUSTER_DENIED),
        AuthzRow("share-group-describe", 77, 1, lambda c: {
            "group_ids": [c.group], "include_authorized_operations": False},
                 Op.DESCRIBE, RT.GROUP, g, lambda r: int(r.groups[0].error_code),
                 GROUP_DENIED),
        AuthzRow("share-fetch-read-group", 78, 1, lambda c: _share_fetch(c, []),
                 Op.READ, RT.GROUP, g, _top, GROUP_DENIED, NONE),
        AuthzRow("share-fetch-read-topic", 78, 1, lambda c: _share_fetch(c, [0]),
                 Op.READ, RT.TOPIC, t, _first_partition("responses", "partitions"),
                 TOPIC_DENIED, grants=read_group),
        AuthzRow("share-acknowledge-read-group", 79, 1, lambda c: {
            "group_id": c.group, "member_id": "authz-nobody", "share_session_epoch": 1,
            "topics": []},
                 Op.READ, RT.GROUP, g, _top, GROUP_DENIED),
        # Share-group offsets (90-92); `group` is a classic group: allowed, nothing changes.
        AuthzRow("describe-share-group-offsets-group", 90, 1, lambda c: {
            "groups": [{"group_id": c.group, "topics": None}]},
                 Op.DESCRIBE, RT.GROUP, g, lambda r: int(r.groups[0].error_code),
                 GROUP_DENIED),
        AuthzRow("describe-share-group-offsets-topic", 90, 1, lambda c: {
            "groups": [{"group_id": f"{c.group}-share", "topics": [
                {"topic_name": c.topic, "partitions": [0]}]}]},
                 Op.DESCRIBE, RT.TOPIC, t,
                 lambda r: int(r.groups[0].topics[0].partitions[0].error_code)
                 if r.groups[0].topics else int(r.groups[0].error_code),
                 TOPIC_DENIED,
                 grants=lambda c: [(Op.DESCRIBE, RT.GROUP, f"{c.group}-share")]),
        AuthzRow("alter-share-group-offsets-group", 91, 0, lambda c: {
            "group_id": c.group, "topics": []},
                 Op.READ, RT.GROUP, g, _top, GROUP_DENIED),
        AuthzRow("alter-share-group-offsets-topic", 91, 0, lambda c: {
            "group_id": c.group, "topics": [{"topic_name": c.topic, "partitions": [
                {"partition_index": 0, "start_offset": 0}]}]},
                 Op.READ, RT.TOPIC, t, _first_partition("responses", "partitions"),
                 TOPIC_DENIED, grants=read_group),
        AuthzRow("delete-share-group-offsets-group", 92, 0, lambda c: {
            "group_id": c.group, "topics": []},
                 Op.DELETE, RT.GROUP, g, _top, GROUP_DENIED),
        AuthzRow("delete-share-group-offsets-topic", 92, 0, lambda c: {
            "group_id": c.group, "topics": [{"topic_name": c.topic}]},
                 Op.READ, RT.TOPIC, t,
                 lambda r: int(r.responses[0].error_code) if r.responses else _top(r),
                 TOPIC_DENIED, grants=lambda c: [(Op.DELETE, RT.GROUP, c.group)]),
        *[
            AuthzRow(f"share-state-{key}-cluster-action", key, 0, body,
                     Op.CLUSTER_ACTION, RT.CLUSTER, _cluster,
                     lambda r: int(r.results[0].partitions[0].error_code), CLUSTER_DENIED)
            for key, body in _share_state_bodies().items()
        ],
    ]
