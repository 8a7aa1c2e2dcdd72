"""Every API checks its permission as Kafka 3.9's KafkaApis does (tests/authz_table.py).

One in-process broker; each request goes through the broker's own `handle_frame` on a
connection of the session's principal (the broker sets `REQUEST_SESSION` from it) and
`broker.authorizer` a table of allowed
(principal, operation, resource type, name) — a stand-in for the ACL authorizer. Each row runs
denied (bob, holding only what the request needs besides the operation under test), allowed
(alice, holding that too), and with no authorizer at all (everything allowed).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.authz_table import EXEMPT_API_KEYS, AuthzContext, AuthzRow, Grant, rows
from wherry.common.topic_partition import TopicPartition
from wherry.protocol.codec import decode_response, encode_request
from wherry.protocol.interbroker import (
    ControlledShutdownRequest,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from wherry.security.acl import AclOperation, ResourceType
from wherry.security.principal import Session, user
from wherry.server.handlers import HANDLERS
from wherry.server.network import ConnectionInfo
from wherry.testing.cluster import DevCluster

ALICE = Session(user("alice"), "127.0.0.1")
BOB = Session(user("bob"), "127.0.0.1")
ADMIN = Session(user("admin"), "127.0.0.1")


@dataclass
class TableAuthorizer:
    """The Authorizer protocol over a set of allowed (principal, op, type, name) entries
    and super users; exact matches only (the ACL engine's rules are tested elsewhere)."""

    allowed: set[tuple[str, AclOperation, ResourceType, str]]
    super_users: frozenset[str] = frozenset({"User:admin"})

    @classmethod
    def of(cls, grants: dict[Session, Iterable[Grant]]) -> TableAuthorizer:
        return cls({(str(s.principal), *g) for s, gs in grants.items() for g in gs})

    def authorize(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        principal = str(session.principal)
        return principal in self.super_users or (
            principal, operation, resource_type, name
        ) in self.allowed

    def authorize_by_resource_type(
        self, session: Session, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        principal = str(session.principal)
        return principal in self.super_users or any(
            (p, op, rt) == (principal, operation, resource_type) for p, op, rt, _ in self.allowed
        )


class Harness:
    def __init__(self, cluster: DevCluster) -> None:
        self.cluster = cluster
        self.broker = cluster.cluster.brokers[0]
        self._correlation = 0

    def call(self, api_key: int, version: int, body: Any, session: Session | None) -> Any:
        self._correlation += 1
        corr = self._correlation
        frame = encode_request(api_key, version, corr, body, client_id="authz-test")[4:]
        conn = ConnectionInfo("127.0.0.1:40000", "PLAINTEXT", corr)
        if session is not None:  # the broker takes the session from the connection
            conn.principal = session.principal

        async def go() -> bytes | None:
            answer = await self.broker.handle_frame(conn, memoryview(frame))
            if isinstance(answer, list):  # a Fetch's records as file regions: read them
                return b"".join(bytes(part) for part in answer)
            return answer

        raw = self.cluster.run(go(), timeout_s=30)
        assert raw is not None
        return decode_response(api_key, version, raw[4:], expect_correlation_id=corr)[1]

    def with_authorizer(self, authorizer: TableAuthorizer | None) -> None:
        self.cluster.call(lambda: setattr(self.broker, "authorizer", authorizer))


def _wait(what: str, check: Any, timeout_s: float = 30.0) -> Any:
    """Poll `check()` (from the test's thread) until it holds."""
    deadline = time.monotonic() + timeout_s
    while not (got := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return got


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Harness, AuthzContext]]:
    overrides = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1"}
    with DevCluster(tmp_path_factory.mktemp("authz"), brokers=1, overrides=overrides) as cluster:
        h = Harness(cluster)
        b = h.broker
        topic, txn_topic, group = "authz-topic", "authz-txn-topic", "authz-group"
        for t in (topic, txn_topic):
            cluster.run(b.admin.create_topic(t, num_partitions=1, replication_factor=1, configs={}))
            tp = TopicPartition(t, 0)
            _wait(t, lambda tp=tp: cluster.call(lambda: b.replica_manager.get_partition(tp)))
        # The group exists with a committed offset (ListGroups, OffsetFetch see it).
        _wait("the group coordinator", lambda: h.call(
            10, 3, {"key": group, "key_type": 0}, None).error_code == ErrorCode.none)
        for gid in (group, AuthzContext.offsets_group):
            commit = {"group_id": gid, "generation_id_or_member_epoch": -1, "member_id": "",
                      "topics": [{"name": topic, "partitions": [{
                          "partition_index": 0, "committed_offset": 0,
                          "committed_metadata": ""}]}]}
            _wait(f"a commit of {gid}", lambda c=commit: h.call(8, 8, c, None).topics[0]
                  .partitions[0].error_code == ErrorCode.none)
        tid = b.cache.topic_id(topic)
        assert tid is not None
        ctx = AuthzContext(
            topic=topic,
            topic_id=tid,
            txn_topic=txn_topic,
            group=group,
            broker_id=b.broker_id,
            broker_epoch=b.fence.broker_epoch,
            controller_epoch=b.fence.controller_epoch,
        )
        yield h, ctx
        h.with_authorizer(None)


_CTX = AuthzContext("t", uuid.UUID(int=0), "tt", "g", 0, 0, 0)  # only for the row ids
ROWS = rows(_CTX)


def test_every_api_the_broker_serves_has_a_row() -> None:
    covered = {r.api_key for r in ROWS}
    missing = set(HANDLERS) - covered - EXEMPT_API_KEYS
    assert not missing, f"API keys without an authorization row: {sorted(missing)}"


def _row(ctx: AuthzContext, label: str) -> AuthzRow:
    rows(ctx)  # the listing readers look for this context's names
    return next(r for r in rows(ctx) if r.label == label)


@pytest.mark.parametrize("label", [r.label for r in ROWS], ids=[r.id for r in ROWS])
def test_denied_then_allowed(harness: tuple[Harness, AuthzContext], label: str) -> None:
    h, ctx = harness
    row = _row(ctx, label)
    base = list(row.grants(ctx))
    h.with_authorizer(TableAuthorizer.of({BOB: base, ALICE: [*base, row.tested_grant(ctx)]}))
    try:
        denied = row.outcome(h.call(row.api_key, row.version, row.build(ctx), BOB))
        assert denied == row.denied, f"{row.label}: denied answer {denied}"
        allowed = row.outcome(h.call(row.api_key, row.version, row.build(ctx), ALICE))
        if row.allowed is not None:
            assert allowed == row.allowed, f"{row.label}: allowed answer {allowed}"
        else:
            assert allowed != row.denied, f"{row.label}: refused although allowed"
        # A super user needs no ACL.
        admin = row.outcome(h.call(row.api_key, row.version, row.build(ctx), ADMIN))
        assert admin != row.denied, f"{row.label}: super user refused"
    finally:
        h.with_authorizer(None)


@pytest.mark.parametrize("label", [r.label for r in ROWS], ids=[r.id for r in ROWS])
def test_no_authorizer_allows_everything(
    harness: tuple[Harness, AuthzContext], label: str
) -> None:
    h, ctx = harness
    row = _row(ctx, label)
    h.with_authorizer(None)
    got = row.outcome(h.call(row.api_key, row.version, row.build(ctx), BOB))
    assert got != row.denied, f"{row.label}: refused with no authorizer"


# --- inter-broker requests refused change nothing -------------------------------------------
def _snapshot(h: Harness, ctx: AuthzContext) -> Any:
    b = h.broker
    tp = TopicPartition(ctx.topic, 0)

    def read() -> Any:
        part = b.replica_manager.get_partition(tp)
        st = b.cache.partition(ctx.topic, 0)
        return (
            part is not None,
            (b.config.log_dirs[0] / tp.dir_name).exists(),
            None if st is None else (st.leader, st.leader_epoch, tuple(st.isr), st.zk_version),
            tuple(sorted(br.broker_id for br in b.cache.alive_brokers())),
            tuple(sorted(b.cache.topics())),
            b.controller.active,
            tuple(sorted(b.controller.ctx.shutting_down)),
        )

    return h.cluster.call(read)


def test_refused_inter_broker_requests_change_nothing(
    harness: tuple[Harness, AuthzContext],
) -> None:
    h, ctx = harness
    b = h.broker
    st = h.cluster.call(lambda: b.cache.partition(ctx.topic, 0))
    assert st is not None
    before = _snapshot(h, ctx)
    current = (ctx.broker_id, b.fence.controller_epoch, b.fence.broker_epoch)
    damaging: list[tuple[int, int, Any]] = [
        # Current epochs: each would take effect if allowed.
        (5, 4, StopReplicaRequest(*current, (StopReplicaPartition(ctx.topic, 0, -2, True),))),
        (4, 7, LeaderAndIsrRequest(*current, (LeaderAndIsrPartitionState(
            ctx.topic, 0, current[1], 4242, st.leader_epoch + 1, (4242,), st.zk_version + 1,
            (4242, ctx.broker_id)),), {ctx.topic: ctx.topic_id}, ())),
        (6, 8, UpdateMetadataRequest(*current, (), (), is_full=True)),
        (7, 3, ControlledShutdownRequest(broker_id=ctx.broker_id, broker_epoch=current[2])),
        (56, 3, {"broker_id": ctx.broker_id, "broker_epoch": current[2], "topics": [
            {"topic_id": ctx.topic_id, "partitions": [{
                "partition_index": 0, "leader_epoch": st.leader_epoch,
                "new_isr_with_epochs": [], "leader_recovery_state": 0,
                "partition_epoch": st.zk_version}]}]}),
    ]
    h.with_authorizer(TableAuthorizer.of({ALICE: [(AclOperation.CLUSTER_ACTION,
                                                   ResourceType.CLUSTER, "x")]}))
    try:
        for key, version, body in damaging:
            resp = h.call(key, version, body, BOB)
            assert resp.error_code == ErrorCode.cluster_authorization_failed, key
            if key in (4, 5):
                assert [e.error_code for e in resp.partition_errors] == [
                    ErrorCode.cluster_authorization_failed
                ]
            assert _snapshot(h, ctx) == before, f"API key {key} changed the broker's state"
    finally:
        h.with_authorizer(None)


# --- what the rows do not show ----------------------------------------------------------------
def test_metadata_topic_by_id_without_describe_hides_the_name(
    harness: tuple[Harness, AuthzContext],
) -> None:
    h, ctx = harness
    h.with_authorizer(TableAuthorizer.of({}))
    try:
        r = h.call(3, 12, {"topics": [{"name": None, "topic_id": ctx.topic_id}],
                           "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False}, BOB)
        [t] = r.topics
        assert (t.error_code, t.name, t.topic_id) == (
            ErrorCode.topic_authorization_failed, None, ctx.topic_id)
        r = h.call(20, 6, {"topics": [{"name": None, "topic_id": ctx.topic_id}],
                           "timeout": 5000}, BOB)
        [d] = r.responses
        assert (d.error_code, d.name) == (ErrorCode.topic_authorization_failed, None)
        assert h.cluster.call(lambda: h.broker.cache.contains_topic(ctx.topic))
    finally:
        h.with_authorizer(None)


def test_authorized_operations_fields(harness: tuple[Harness, AuthzContext]) -> None:
    h, ctx = harness
    grants = [
        (AclOperation.DESCRIBE, ResourceType.TOPIC, ctx.topic),
        (AclOperation.READ, ResourceType.TOPIC, ctx.topic),
        (AclOperation.DESCRIBE, ResourceType.GROUP, ctx.group),
        (AclOperation.DELETE, ResourceType.GROUP, ctx.group),
    ]
    h.with_authorizer(TableAuthorizer.of({ALICE: grants}))
    try:
        m = h.call(3, 12, {"topics": [{"name": ctx.topic}], "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": True}, ALICE)
        assert m.topics[0].topic_authorized_operations == (
            1 << AclOperation.READ | 1 << AclOperation.DESCRIBE)
        d = h.call(15, 5, {"groups": [ctx.group], "include_authorized_operations": True}, ALICE)
        assert d.groups[0].authorized_operations == (
            1 << AclOperation.DESCRIBE | 1 << AclOperation.DELETE)
        # Not asked for: the schema's "omitted" value.
        d = h.call(15, 5, {"groups": [ctx.group], "include_authorized_operations": False}, ALICE)
        assert d.groups[0].authorized_operations == -(2**31)
    finally:
        h.with_authorizer(None)
    # No authorizer: every operation the resource type supports.
    c = h.call(60, 1, {"include_cluster_authorized_operations": True}, BOB)
    assert c.cluster_authorized_operations == sum(
        1 << op for op in (AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                           AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                           AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE))


def test_offset_fetch_all_partitions_leaves_out_undescribable_topics(
    harness: tuple[Harness, AuthzContext],
) -> None:
    h, ctx = harness
    h.with_authorizer(TableAuthorizer.of({
        ALICE: [(AclOperation.DESCRIBE, ResourceType.GROUP, ctx.group),
                (AclOperation.DESCRIBE, ResourceType.TOPIC, ctx.topic)],
        BOB: [(AclOperation.DESCRIBE, ResourceType.GROUP, ctx.group)],
    }))
    try:
        body = {"group_id": ctx.group, "topics": None}
        assert [t.name for t in h.call(9, 7, body, ALICE).topics] == [ctx.topic]
        r = h.call(9, 7, body, BOB)
        assert r.error_code == ErrorCode.none and r.topics == ()
    finally:
        h.with_authorizer(None)


def test_acks0_produce_refused_for_its_transactional_id_closes_the_connection(
    harness: tuple[Harness, AuthzContext],
) -> None:
    from tests.authz_table import _produce
    from wherry.server.network import CloseConnection

    h, ctx = harness
    h.with_authorizer(TableAuthorizer.of({}))
    try:
        body = {**_produce(ctx.txn_topic, transactional_id=ctx.transactional_id), "acks": 0}
        with pytest.raises(CloseConnection):
            h.call(0, 9, body, BOB)
    finally:
        h.with_authorizer(None)
