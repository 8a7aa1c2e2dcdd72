"""Principal x operation x resource over the wire, for every API the broker serves.

One real `wherry server` (SASL_PLAINTEXT, PLAIN users admin/alice/bob, the ACL authorizer,
`super.users=User:admin`). The context of tests/authz_table.py (topics, groups with committed
offsets) is prepared by `admin` over the wire; every row then runs as `bob` authenticated over
SASL, with real ACLs created and deleted through CreateAcls / DeleteAcls: denied with only the
row's `grants`, allowed once the tested grant is added. The pattern variants (PREFIXED, the
`*` resource, DENY for bob and for `User:*`, ACLs for another host, the super user) and
`allow.everyone.if.no.acl.found` (a second broker) run over the rows they make sense for.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from tests.authz_table import EXEMPT_API_KEYS, AuthzContext, AuthzRow, rows
from tests.broker_process import BrokerProcess, wait_until
from tests.security.wire_principals import (
    PASSWORDS,
    SECURED_OVERRIDES,
    Login,
    WirePrincipals,
    acl,
    create_acls,
    delete_all_acls,
    describe_acls,
    logged_broker_epoch,
    logged_controller_epoch,
    override_args,
)
from wherry.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from wherry.server.handlers import HANDLERS

ADMIN, BOB, ALICE = Login.of("admin"), Login.of("bob"), Login.of("alice")
OTHER_HOST = "10.20.30.40"  # an ACL's host only: nothing is ever sent there


@dataclass
class Secured:
    """A broker, its address, the table's context on it, and the principals' connections."""

    broker: BrokerProcess
    address: str
    ctx: AuthzContext
    wire: WirePrincipals

    def call(self, login: Login, api_key: int, version: int, body: Any) -> Any:
        return self.wire.call(self.address, login, api_key, version, body)

    def grant(self, *creations: dict[str, Any]) -> None:
        create_acls(self.wire, self.address, creations)

    def clear_acls(self) -> None:
        delete_all_acls(self.wire, self.address)

    def outcome(self, row: AuthzRow, login: Login, ctx: AuthzContext | None = None) -> int:
        ctx = ctx or self.ctx
        rows(ctx)  # the listing readers look for this context's names
        return row.outcome(self.call(login, row.api_key, row.version, row.build(ctx)))

    def commit_offsets(self) -> None:
        """Both groups hold a committed offset of topic-0 (the allowed OffsetDelete row
        removes one; OffsetDelete on a group without offsets answers before its topic
        checks)."""
        for gid in (self.ctx.group, self.ctx.offsets_group):
            body = {"group_id": gid, "generation_id_or_member_epoch": -1, "member_id": "",
                    "topics": [{"name": self.ctx.topic, "partitions": [{
                        "partition_index": 0, "committed_offset": 0,
                        "committed_metadata": ""}]}]}
            assert wait_until(lambda b=body: self.call(ADMIN, 8, 8, b).topics[0]
                              .partitions[0].error_code == ErrorCode.none, 20), gid


def _metadata(s: Secured, login: Login, topics: list[str] | None) -> Any:
    return s.call(login, 3, 12, {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})


def _prepare(broker: BrokerProcess, wire: WirePrincipals) -> Secured:
    """The in-process test's context, made by `admin` over the wire."""
    address = broker.addresses[0]
    topic, txn_topic, group = "authz-topic", "authz-txn-topic", "authz-group"
    s = Secured(broker, address, AuthzContext(topic, uuid.UUID(int=0), txn_topic, group, 0, 0, 0),
                wire)
    resp = s.call(ADMIN, 19, 7, {"topics": [
        {"name": t, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []} for t in (topic, txn_topic)], "timeout": 10_000, "validate_only": False})
    assert [t.error_code for t in resp.topics] == [ErrorCode.none] * 2, resp

    def led() -> bool:
        m = _metadata(s, ADMIN, [topic, txn_topic])
        return all(t.error_code == ErrorCode.none and t.partitions
                   and t.partitions[0].leader_id == broker.broker_id for t in m.topics)

    assert wait_until(led, 20), "the table's topics have no leader"
    assert wait_until(lambda: s.call(ADMIN, 10, 3, {"key": group, "key_type": 0})
                      .error_code == ErrorCode.none, 20), "no group coordinator"
    s.commit_offsets()
    [meta] = _metadata(s, ADMIN, [topic]).topics
    log = broker.log_text()
    s.ctx = AuthzContext(
        topic=topic,
        topic_id=meta.topic_id,
        txn_topic=txn_topic,
        group=group,
        broker_id=broker.broker_id,
        broker_epoch=logged_broker_epoch(log),
        controller_epoch=logged_controller_epoch(log),
    )
    return s


def _secured_broker(
    tmp_path_factory: pytest.TempPathFactory, name: str, **extra: str
) -> Iterator[Secured]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp(name),
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        overrides=override_args({**SECURED_OVERRIDES, **extra}),
    ).start()
    wire = WirePrincipals()
    try:
        s = _prepare(broker, wire)
        assert describe_acls(wire, s.address) == set()
        yield s
    finally:
        wire.close()
        assert broker.stop() == 0, broker.log_text()[-3000:]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    yield from _secured_broker(tmp_path_factory, "acl-wire")


@pytest.fixture
def clean(secured: Secured) -> Iterator[Secured]:
    """No ACL before the test, none left after it; the groups' offsets in place."""
    secured.clear_acls()
    secured.commit_offsets()
    try:
        yield secured
    finally:
        secured.clear_acls()


_CTX = AuthzContext("t", uuid.UUID(int=0), "tt", "g", 0, 0, 0)  # only for the row ids
ROWS = rows(_CTX)


def _row(label: str) -> AuthzRow:
    return next(r for r in ROWS if r.label == label)


def _grants(ctx: AuthzContext, row: AuthzRow) -> list[dict[str, Any]]:
    return [acl(op, rt, name) for op, rt, name in row.grants(ctx)]


def _tested(ctx: AuthzContext, row: AuthzRow, **kw: Any) -> dict[str, Any]:
    op, rt, name = row.tested_grant(ctx)
    return acl(op, rt, kw.pop("name", name), **kw)


def _assert_allowed(row: AuthzRow, got: int, what: str) -> None:
    if row.allowed is not None:
        assert got == row.allowed, f"{row.label} ({what}): allowed answer {got}"
    else:
        assert got != row.denied, f"{row.label} ({what}): refused although allowed"


# --- the whole table ------------------------------------------------------------------------
def test_every_api_the_broker_serves_has_a_row(secured: Secured) -> None:
    covered = {r.api_key for r in ROWS}
    missing = set(HANDLERS) - covered - EXEMPT_API_KEYS
    assert not missing, f"API keys without an authorization row: {sorted(missing)}"
    # ... and every API the running broker advertises (ApiVersions as bob) is one of them.
    advertised = {k.api_key for k in secured.call(BOB, 18, 3, {
        "client_software_name": "wire", "client_software_version": "1"}).api_keys}
    assert advertised <= set(HANDLERS)
    assert not advertised - covered - EXEMPT_API_KEYS


@pytest.mark.parametrize("label", [r.label for r in ROWS], ids=[r.id for r in ROWS])
def test_denied_then_allowed(clean: Secured, label: str) -> None:
    s, row = clean, _row(label)
    ctx = s.ctx
    s.grant(*_grants(ctx, row))
    got = s.outcome(row, BOB)
    assert got == row.denied, f"{row.label}: denied answer {got}"
    # bob gets the tested grant, alice bob's other grants: she is still refused (an ACL is
    # the principal's own), he is allowed.
    s.grant(_tested(ctx, row), *[acl(op, rt, n, "User:alice") for op, rt, n in row.grants(ctx)])
    got = s.outcome(row, ALICE)
    assert got == row.denied, f"{row.label}: alice allowed by bob's ACL ({got})"
    _assert_allowed(row, s.outcome(row, BOB), "literal ALLOW")


# --- pattern variants -----------------------------------------------------------------------
NAMED = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
VARIANTS_ANY = ("deny-bob", "deny-everyone", "deny-other-host", "allow-other-host")
VARIANTS_NAMED = ("prefixed", "wildcard", "deny-prefixed")


def _variant_cases() -> list[Any]:
    cases = []
    variants: tuple[str, ...]
    for r in ROWS:
        if r.resource_type in NAMED:
            variants = VARIANTS_NAMED + VARIANTS_ANY
        elif r.resource_type == ResourceType.CLUSTER:
            variants = VARIANTS_ANY  # the cluster has one name: no prefix, no `*`
        else:
            continue
        cases += [pytest.param(v, r.label, id=f"{v}-{r.id}") for v in variants]
    return cases


@pytest.mark.parametrize(("variant", "label"), _variant_cases())
def test_pattern_variants(clean: Secured, variant: str, label: str) -> None:
    s, row = clean, _row(label)
    # A topic of its own for the row that creates one when allowed.
    ctx = dataclasses.replace(s.ctx, auto_topic=f"authz-auto-{variant}")
    name = row.resource(ctx)
    s.grant(*_grants(ctx, row))
    if variant == "prefixed":
        s.grant(_tested(ctx, row, name=name[: max(1, len(name) - 3)],
                        pattern=PatternType.PREFIXED))
        _assert_allowed(row, s.outcome(row, BOB, ctx), variant)
    elif variant == "wildcard":
        s.grant(_tested(ctx, row, name="*"))
        _assert_allowed(row, s.outcome(row, BOB, ctx), variant)
    elif variant == "deny-prefixed":  # a DENY on a prefix beats the literal ALLOW
        s.grant(_tested(ctx, row), _tested(ctx, row, name=name[:1], pattern=PatternType.PREFIXED,
                                           permission=AclPermissionType.DENY))
        got = s.outcome(row, BOB, ctx)
        assert got == row.denied, f"{row.label}: a prefixed DENY lost to the ALLOW ({got})"
    elif variant in ("deny-bob", "deny-everyone"):
        s.grant(_tested(ctx, row))
        principal = "User:bob" if variant == "deny-bob" else "User:*"
        s.grant(_tested(ctx, row, principal=principal, permission=AclPermissionType.DENY))
        got = s.outcome(row, BOB, ctx)
        assert got == row.denied, f"{row.label}: a DENY lost to the ALLOW ({got})"
    elif variant == "deny-other-host":
        s.grant(_tested(ctx, row),
                _tested(ctx, row, permission=AclPermissionType.DENY, host=OTHER_HOST))
        _assert_allowed(row, s.outcome(row, BOB, ctx), variant)
    else:  # allow-other-host
        s.grant(_tested(ctx, row, host=OTHER_HOST))
        got = s.outcome(row, BOB, ctx)
        assert got == row.denied, f"{row.label}: an ALLOW for {OTHER_HOST} applied ({got})"


@pytest.mark.parametrize("label", [r.label for r in ROWS], ids=[r.id for r in ROWS])
def test_super_user_needs_no_acl(clean: Secured, label: str) -> None:
    s, row = clean, _row(label)
    ctx = dataclasses.replace(s.ctx, auto_topic="authz-auto-admin")
    assert describe_acls(s.wire, s.address) == set()
    got = s.outcome(row, ADMIN, ctx)
    assert got != row.denied, f"{row.label}: the super user was refused ({got})"


# --- Metadata for all topics ----------------------------------------------------------------
def test_metadata_for_all_topics_lists_only_what_bob_may_describe(clean: Secured) -> None:
    s = clean
    names = ["vis-literal", "vis-prefixed-1", "vis-prefixed-2", "hidden-denied", "hidden-none"]
    resp = s.call(ADMIN, 19, 7, {"topics": [
        {"name": t, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []} for t in names], "timeout": 10_000, "validate_only": False})
    assert all(t.error_code == ErrorCode.none for t in resp.topics), resp
    everything = {s.ctx.topic, s.ctx.txn_topic, "__consumer_offsets", *names}
    assert wait_until(lambda: everything <= {t.name for t in _metadata(s, ADMIN, None).topics},
                      20)
    T = ResourceType.TOPIC
    s.grant(
        acl(AclOperation.DESCRIBE, T, "vis-literal"),
        acl(AclOperation.DESCRIBE, T, "vis-prefixed-", pattern=PatternType.PREFIXED),
        acl(AclOperation.READ, T, s.ctx.topic),  # READ implies DESCRIBE
        acl(AclOperation.DESCRIBE, T, "hidden-", pattern=PatternType.PREFIXED),
        acl(AclOperation.DESCRIBE, T, "hidden-denied", permission=AclPermissionType.DENY),
        acl(AclOperation.DESCRIBE, T, "hidden-none", host=OTHER_HOST),
        acl(AclOperation.DESCRIBE, T, "hidden-none", principal="User:bob",
            permission=AclPermissionType.DENY),
    )
    expected = {"vis-literal", "vis-prefixed-1", "vis-prefixed-2", s.ctx.topic}
    assert {t.name for t in _metadata(s, BOB, None).topics} == expected
    # A real client as bob sees the same list.
    admin = AdminClient({"bootstrap.servers": s.address, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "bob",
                         "sasl.password": PASSWORDS["bob"], "log_level": 0})
    assert set(admin.list_topics(timeout=10).topics) == expected
    # alice, holding nothing, sees no topic at all; admin sees every one.
    assert _metadata(s, ALICE, None).topics == ()
    assert everything <= {t.name for t in _metadata(s, ADMIN, None).topics}


# --- allow.everyone.if.no.acl.found ---------------------------------------------------------
@pytest.fixture(scope="module")
def permissive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    yield from _secured_broker(tmp_path_factory, "acl-wire-permissive",
                               **{"allow.everyone.if.no.acl.found": "true"})


# Rows an API answers through another resource too: with no ACL on that other one, bob is
# allowed through it (ListGroups: cluster or group; InitProducerId: cluster or any topic;
# CreateTopics: cluster or topic; OffsetForLeaderEpoch: ClusterAction or the topic's
# Describe), so an ACL on the tested resource alone cannot refuse him.
_OTHER_PATH = {"list-groups-group-describe", "list-groups-cluster-describe",
               "init-producer-id-idempotent-write", "init-producer-id-any-topic-write",
               "create-topics-topic-create", "create-topics-cluster-create",
               "offset-for-leader-epoch-describe", "offset-for-leader-epoch-cluster-action"}


def _no_acl_cases() -> list[Any]:
    out = []
    for r in ROWS:
        same = any((op_rt_name[1], op_rt_name[2]) == (r.resource_type, r.resource(_CTX))
                   for op_rt_name in r.grants(_CTX))
        if not same and r.label not in _OTHER_PATH:
            out.append(pytest.param(r.label, id=r.id))
    return out


@pytest.mark.parametrize("label", _no_acl_cases())
def test_allow_everyone_if_no_acl_found(permissive: Secured, label: str) -> None:
    s, row = permissive, _row(label)
    ctx = dataclasses.replace(s.ctx, auto_topic="authz-auto-permissive")
    s.clear_acls()
    s.commit_offsets()
    try:
        s.grant(*_grants(ctx, row))
        got = s.outcome(row, BOB, ctx)
        # Allowed (for the authorized-operations rows: every operation, none has an ACL).
        assert got != row.denied, f"{row.label}: refused with no ACL on the resource ({got})"
        # Any ACL on the resource, even one for alice only: bob is refused.
        op, rt, name = row.tested_grant(ctx)
        s.grant(acl(op, rt, name, "User:alice"))
        s.commit_offsets()  # the allowed OffsetDelete removed one
        got = s.outcome(row, BOB, ctx)
        assert got == row.denied, f"{row.label}: allowed although an ACL exists ({got})"
        s.grant(*[acl(op, rt, n, "User:alice") for op, rt, n in row.grants(ctx)])
        s.commit_offsets()
        _assert_allowed(row, s.outcome(row, ALICE, ctx), "alice's own ACL")
    finally:
        s.clear_acls()
