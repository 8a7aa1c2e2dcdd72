"""ACLs in the metadata store: Kafka's ZooKeeper layout and JSON, change notifications seen by
another authorizer, a restart that loads everything, concurrent writers, expired
notifications."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from tests.helpers import bounded_async_test, wait_until_async
from wherry.coordination.embedded import EmbeddedCoordinator
from wherry.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from wherry.security.acl_authorizer import (
    INVALID_REQUEST,
    AclAuthorizer,
    authorizer_from_config,
)
from wherry.security.acl_store import (
    AclChangeListener,
    AclStore,
    decode_acls,
    decode_change,
    encode_acls,
    encode_change,
    resource_path,
)
from wherry.security.principal import Session, user

async_test = bounded_async_test(20.0)
T, G = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
READ, WRITE = AclOperation.READ, AclOperation.WRITE
ALLOW = AclPermissionType.ALLOW


def ace(principal: str = "User:alice", op: AclOperation = READ) -> AccessControlEntry:
    return AccessControlEntry(principal, "*", op, ALLOW)


def binding(name: str, principal: str = "User:alice", op: AclOperation = READ,
            ptype: PatternType = LIT, rtype: ResourceType = T) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, ptype), ace(principal, op))


# --------------------------------------------------------------------------------------------
# Formats


def test_paths_and_formats_are_kafkas() -> None:
    assert resource_path(ResourcePattern(T, "orders")) == "/kafka-acl/Topic/orders"
    assert resource_path(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PRE)) == \
        "/kafka-acl-extended/prefixed/TransactionalId/tx"
    data = encode_acls([ace()])
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    assert data == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                    b'"operation":"Read","host":"*"}]}')
    # What a Kafka broker writes, key order and spacing aside.
    kafka = (b'{"version": 1, "acls": [{"host": "10.0.0.1", "permissionType": "Deny", '
             b'"operation": "IdempotentWrite", "principal": "User:*"}]}')
    assert decode_acls(kafka) == {AccessControlEntry(
        "User:*", "10.0.0.1", AclOperation.IDEMPOTENT_WRITE, AclPermissionType.DENY)}
    for pattern in (ResourcePattern(T, "orders"), ResourcePattern(T, "a:b")):
        path, raw = encode_change(pattern)
        assert decode_change(path, raw) == pattern
    assert encode_change(ResourcePattern(T, "orders")) == ("/kafka-acl-changes", b"TOPIC:orders")
    path, raw = encode_change(ResourcePattern(G, "app-", PRE))
    assert path == "/kafka-acl-extended-changes"
    assert json.loads(raw) == {"version": 1, "resourceType": "GROUP", "name": "app-",
                               "patternType": "PREFIXED"}
    # Older brokers' spelling is read too.
    assert decode_change("/kafka-acl-changes", b"Topic:orders") == ResourcePattern(T, "orders")
    assert decode_change("/kafka-acl-changes", b"TransactionalId:t") == ResourcePattern(
        ResourceType.TRANSACTIONAL_ID, "t")


def test_authorizer_from_config() -> None:
    assert authorizer_from_config({}) is None
    a = authorizer_from_config({"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
                                "super.users": "User:admin;User:ops",
                                "allow.everyone.if.no.acl.found": "true"})
    assert isinstance(a, AclAuthorizer)
    assert a.super_users == {"User:admin", "User:ops"} and a.allow_everyone_if_no_acl_found
    a = authorizer_from_config({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    assert a is not None and not a.allow_everyone_if_no_acl_found and not a.super_users
    with pytest.raises(ValueError, match=r"authorizer\.class\.name"):
        authorizer_from_config({"authorizer.class.name": "com.example.MyAuthorizer"})


# --------------------------------------------------------------------------------------------
# Two authorizers on one store


@async_test
async def test_changes_reach_another_authorizer_and_a_restart_loads_all() -> None:
    coord = EmbeddedCoordinator(None)
    try:
        s1, s2 = coord.session(), coord.session()
        a1, a2 = AclAuthorizer(), AclAuthorizer()
        await a1.start(s1)
        await a2.start(s2)
        bob = Session(user("bob"), "10.0.0.7")
        assert not a2.authorize(bob, READ, T, "orders")
        errors = await a1.create_acls([
            binding("orders", "User:bob"),
            binding("ord", "User:bob", WRITE, PRE),
            binding("orders", "User:carol"),
            binding("kafka", "User:bob", rtype=ResourceType.CLUSTER),
        ])
        assert errors[:3] == [None, None, None]
        assert errors[3] is not None and errors[3].code == INVALID_REQUEST
        # The writer's own cache at once; the other's through the notifications.
        assert a1.authorize(bob, READ, T, "orders")
        await wait_until_async(lambda: a2.authorize(bob, WRITE, T, "orders-eu"))
        assert a2.authorize(bob, READ, T, "orders")
        data, _ = await s2.get("/kafka-acl/Topic/orders")
        assert {a["principal"] for a in json.loads(data)["acls"]} == {"User:bob", "User:carol"}
        assert await s2.exists("/kafka-acl-extended/prefixed/Topic/ord") is not None
        literal = await s2.get_children("/kafka-acl-changes")
        extended = await s2.get_children("/kafka-acl-extended-changes")
        assert literal and extended and literal[0].startswith("acl_changes_")
        assert (await s2.get(f"/kafka-acl-changes/{literal[0]}"))[0] == b"TOPIC:orders"

        # Describe (from the cache) with MATCH: every pattern that applies to `orders`.
        match = AclBindingFilter(T, "orders", PatternType.MATCH)
        assert {b.pattern.name for b in a2.describe_acls(match)} == {"orders", "ord"}

        # A new authorizer (a restarted broker) loads everything.
        a3 = AclAuthorizer()
        await a3.start(coord.session())
        assert a3.authorize(bob, WRITE, T, "ordinal")
        assert len(a3.describe_acls(AclBindingFilter())) == 3

        # Delete by an exact filter on a2; a1 and a3 see it; the last ACL takes the node.
        results = await a2.delete_acls([
            AclBindingFilter(T, "orders", LIT, principal="User:bob"),
            AclBindingFilter(T, None, PatternType.ANY, principal="User:nobody"),
        ])
        assert [b for b, _ in results[0].deleted] == [binding("orders", "User:bob")]
        assert results[1].deleted == []
        await wait_until_async(lambda: not a1.authorize(bob, READ, T, "orders"))
        await wait_until_async(lambda: not a3.authorize(bob, READ, T, "orders"))
        results = await a1.delete_acls([AclBindingFilter(T, "orders", PatternType.MATCH)])
        assert {b.pattern for b, _ in results[0].deleted} == {
            ResourcePattern(T, "orders"), ResourcePattern(T, "ord", PRE)}
        assert await s1.exists("/kafka-acl/Topic/orders") is None
        assert await s1.exists("/kafka-acl-extended/prefixed/Topic/ord") is None
        await wait_until_async(lambda: not a2.cache.acls and not a3.cache.acls)
        for a in (a1, a2, a3):
            await a.stop()
    finally:
        coord.close()


@async_test
async def test_restart_with_a_new_session() -> None:
    coord = EmbeddedCoordinator(None)
    try:
        a1, a2 = AclAuthorizer(), AclAuthorizer()
        s2 = coord.session()
        await a1.start(coord.session())
        await a2.start(s2)
        assert coord.expire_session(s2.session_id)
        await a1.create_acls([binding("t1")])  # missed by a2 while it has no session
        await a2.restart_with(coord.session())
        assert ResourcePattern(T, "t1") in a2.cache.acls
        await a1.create_acls([binding("t2")])
        await wait_until_async(lambda: ResourcePattern(T, "t2") in a2.cache.acls)
        await a1.stop()
        await a2.stop()
    finally:
        coord.close()


@async_test
async def test_concurrent_writers_lose_nothing() -> None:
    coord = EmbeddedCoordinator(None)
    try:
        writers = [AclAuthorizer(retry_backoff_ms=(1, 5)) for _ in range(4)]
        for w in writers:
            await w.start(coord.session())
        principals = [[f"User:w{i}-{k}" for k in range(5)] for i in range(len(writers))]

        async def write(w: AclAuthorizer, names: list[str]) -> None:
            for p in names:
                assert await w.create_acls([binding("shared", p)]) == [None]
                await asyncio.sleep(0)

        await asyncio.gather(*(write(w, ps) for w, ps in zip(writers, principals, strict=True)))
        data, _ = await coord.session().get("/kafka-acl/Topic/shared")
        stored = {a["principal"] for a in json.loads(data)["acls"]}
        assert stored == {p for ps in principals for p in ps}
        await wait_until_async(lambda: all(len(w.cache.get(ResourcePattern(T, "shared"))) == 20
                                           for w in writers))
        # The same conflict loop when deleting concurrently.
        await asyncio.gather(*(w.delete_acls([AclBindingFilter(T, "shared", LIT, principal=p)
                                              for p in ps])
                               for w, ps in zip(writers, principals, strict=True)))
        assert await coord.session().exists("/kafka-acl/Topic/shared") is None
        for w in writers:
            await w.stop()
    finally:
        coord.close()


@async_test
async def test_conflict_retries_are_bounded() -> None:
    coord = EmbeddedCoordinator(None)
    try:
        s = coord.session()
        store = AclStore(s, max_retries=2, retry_backoff_ms=(1, 1))
        await store.ensure_paths()
        await store.update(ResourcePattern(T, "x"), lambda cur: cur | {ace()})
        calls = 0

        def meddle(cur: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
            nonlocal calls
            calls += 1
            # Another writer bumps the version every time we are about to write.
            asyncio.get_running_loop().create_task(s.set("/kafka-acl/Topic/x", encode_acls(cur)))
            return cur | {ace("User:z")}

        # Our own set races the meddling one; either way the loop ends, within the bound.
        await store.update(ResourcePattern(T, "x"), meddle)
        assert 1 <= calls <= 3
    finally:
        coord.close()


@async_test
async def test_old_notifications_are_purged() -> None:
    coord = EmbeddedCoordinator(None)
    try:
        s = coord.session()
        store = AclStore(s)
        await store.ensure_paths()
        await store.update(ResourcePattern(T, "x"), lambda cur: cur | {ace()})
        seen: list[ResourcePattern] = []

        async def handler(p: ResourcePattern) -> None:
            seen.append(p)

        clock = [0]
        listener = AclChangeListener(s, "/kafka-acl-changes", handler, lambda: clock[0])
        names = await s.get_children("/kafka-acl-changes")
        clock[0] = 10**15  # long after
        await listener.process(names)
        assert seen == [ResourcePattern(T, "x")]
        assert await s.get_children("/kafka-acl-changes") == []
    finally:
        coord.close()


@async_test
async def test_decisions_are_logged_like_kafkas_authorizer(
        caplog: pytest.LogCaptureFixture) -> None:
    coord = EmbeddedCoordinator(None)
    try:
        a = AclAuthorizer(super_users={"User:admin"})
        await a.start(coord.session())
        await a.create_acls([binding("orders", "User:alice")])
        with caplog.at_level(logging.DEBUG, logger="wherry.authorizer"):
            assert not a.authorize(Session(user("bob"), "127.0.0.1"), READ, T, "orders")
            assert a.authorize(Session(user("alice"), "127.0.0.1"), READ, T, "orders")
        denied, allowed = [r for r in caplog.records if r.name == "wherry.authorizer"]
        assert (denied.levelno, denied.getMessage()) == (
            logging.INFO, "Principal = User:bob is Denied Operation = Read from host = 127.0.0.1 "
                          "on resource = Topic:LITERAL:orders")
        assert allowed.levelno == logging.DEBUG and "User:alice is Allowed" in allowed.getMessage()
        await a.stop()
    finally:
        coord.close()
