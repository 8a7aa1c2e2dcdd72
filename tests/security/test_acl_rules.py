"""Kafka's ACL rules, table-driven: which ACLs apply to a resource, deny wins, implied
operations, super users, the no-ACL default, authorizeByResourceType, filters, validation."""

from __future__ import annotations

import pytest

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
from wherry.security.acl_rules import (
    AclCache,
    AclPolicy,
    binding_error,
    exact_patterns,
    filter_error,
    filter_matches,
    parse_super_users,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
A, D = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def acl(rtype: ResourceType, name: str, principal: str, op: AclOperation,
        perm: AclPermissionType = A, host: str = "*", ptype: PatternType = LIT) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, ptype),
                      AccessControlEntry(principal, host, op, perm))


def cache_of(*bindings: AclBinding) -> AclCache:
    c = AclCache()
    grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for b in bindings:
        grouped.setdefault(b.pattern, set()).add(b.entry)
    for p, entries in grouped.items():
        c.update(p, entries)
    return c


ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"

# (acls, principal, host, operation, topic, expected)
CASES = [
    ("literal allow", [acl(T, "orders", ALICE, Op.READ)], ALICE, HOST, Op.READ, "orders", True),
    ("other principal", [acl(T, "orders", ALICE, Op.READ)], BOB, HOST, Op.READ, "orders", False),
    ("other topic has acls only -> no acl here", [acl(T, "x", ALICE, Op.READ)], ALICE, HOST,
     Op.READ, "orders", False),
    ("other op", [acl(T, "orders", ALICE, Op.READ)], ALICE, HOST, Op.WRITE, "orders", False),
    ("wildcard resource", [acl(T, "*", ALICE, Op.READ)], ALICE, HOST, Op.READ, "orders", True),
    ("prefixed", [acl(T, "ord", ALICE, Op.READ, ptype=PRE)], ALICE, HOST, Op.READ, "orders",
     True),
    ("prefixed equal name", [acl(T, "orders", ALICE, Op.READ, ptype=PRE)], ALICE, HOST, Op.READ,
     "orders", True),
    ("prefixed not a prefix", [acl(T, "orx", ALICE, Op.READ, ptype=PRE)], ALICE, HOST, Op.READ,
     "orders", False),
    ("prefixed longer than name", [acl(T, "orders-x", ALICE, Op.READ, ptype=PRE)], ALICE, HOST,
     Op.READ, "orders", False),
    ("literal * is not a prefix", [acl(T, "*", ALICE, Op.READ, ptype=PRE)], ALICE, HOST, Op.READ,
     "orders", False),
    ("wildcard principal", [acl(T, "orders", "User:*", Op.READ)], BOB, HOST, Op.READ, "orders",
     True),
    ("host match", [acl(T, "orders", ALICE, Op.READ, host=HOST)], ALICE, HOST, Op.READ, "orders",
     True),
    ("host mismatch", [acl(T, "orders", ALICE, Op.READ, host="10.0.0.2")], ALICE, HOST, Op.READ,
     "orders", False),
    ("deny wins", [acl(T, "orders", ALICE, Op.READ), acl(T, "orders", ALICE, Op.READ, D)],
     ALICE, HOST, Op.READ, "orders", False),
    ("deny on wildcard wins over literal allow",
     [acl(T, "orders", ALICE, Op.READ), acl(T, "*", ALICE, Op.READ, D)], ALICE, HOST, Op.READ,
     "orders", False),
    ("prefixed deny wins", [acl(T, "orders", ALICE, Op.ALL), acl(T, "o", "User:*", Op.WRITE, D,
                                                                  ptype=PRE)],
     ALICE, HOST, Op.WRITE, "orders", False),
    ("deny ALL denies read", [acl(T, "orders", ALICE, Op.READ), acl(T, "orders", ALICE, Op.ALL,
                                                                     D)],
     ALICE, HOST, Op.READ, "orders", False),
    ("deny of other host ignored", [acl(T, "orders", ALICE, Op.READ),
                                    acl(T, "orders", ALICE, Op.READ, D, host="10.9.9.9")],
     ALICE, HOST, Op.READ, "orders", True),
    ("deny of write does not deny read", [acl(T, "orders", ALICE, Op.READ),
                                          acl(T, "orders", ALICE, Op.WRITE, D)],
     ALICE, HOST, Op.READ, "orders", True),
    ("ALL allows", [acl(T, "orders", ALICE, Op.ALL)], ALICE, HOST, Op.DELETE, "orders", True),
    ("read implies describe", [acl(T, "orders", ALICE, Op.READ)], ALICE, HOST, Op.DESCRIBE,
     "orders", True),
    ("write implies describe", [acl(T, "orders", ALICE, Op.WRITE)], ALICE, HOST, Op.DESCRIBE,
     "orders", True),
    ("delete implies describe", [acl(T, "orders", ALICE, Op.DELETE)], ALICE, HOST, Op.DESCRIBE,
     "orders", True),
    ("alter implies describe", [acl(T, "orders", ALICE, Op.ALTER)], ALICE, HOST, Op.DESCRIBE,
     "orders", True),
    ("create does not imply describe", [acl(T, "orders", ALICE, Op.CREATE)], ALICE, HOST,
     Op.DESCRIBE, "orders", False),
    ("alter_configs implies describe_configs", [acl(T, "orders", ALICE, Op.ALTER_CONFIGS)],
     ALICE, HOST, Op.DESCRIBE_CONFIGS, "orders", True),
    ("describe does not imply read", [acl(T, "orders", ALICE, Op.DESCRIBE)], ALICE, HOST,
     Op.READ, "orders", False),
    ("deny describe beats implied describe", [acl(T, "orders", ALICE, Op.READ),
                                              acl(T, "orders", ALICE, Op.DESCRIBE, D)],
     ALICE, HOST, Op.DESCRIBE, "orders", False),
    ("group acls do not apply to topics", [acl(G, "orders", ALICE, Op.READ)], ALICE, HOST,
     Op.READ, "orders", False),
]


@pytest.mark.parametrize(("what", "bindings", "principal", "host", "op", "name", "expected"),
                         CASES, ids=[c[0] for c in CASES])
def test_authorize(what: str, bindings: list[AclBinding], principal: str, host: str,
                   op: AclOperation, name: str, expected: bool) -> None:
    decision = AclPolicy(cache_of(*bindings)).authorize(principal, host, op, T, name)
    assert decision.allowed is expected, (what, decision)


@pytest.mark.parametrize("allow_if_none", [False, True])
def test_no_acl_found(allow_if_none: bool) -> None:
    policy = AclPolicy(cache_of(acl(T, "other", ALICE, Op.READ)), frozenset(), allow_if_none)
    assert policy.authorize(BOB, HOST, Op.READ, T, "orders").allowed is allow_if_none
    # Any ACL on the resource (even for someone else) makes it "found": denied.
    policy = AclPolicy(cache_of(acl(T, "orders", ALICE, Op.READ)), frozenset(), allow_if_none)
    assert not policy.authorize(BOB, HOST, Op.READ, T, "orders").allowed


def test_super_user_beats_deny() -> None:
    c = cache_of(acl(T, "orders", ALICE, Op.ALL, D))
    assert AclPolicy(c, frozenset({ALICE})).authorize(ALICE, HOST, Op.READ, T, "orders").allowed
    assert parse_super_users("User:a; User:b") == {"User:a", "User:b"}
    assert parse_super_users("") == frozenset()
    with pytest.raises(ValueError, match="principalType:principalName but got bob"):
        parse_super_users("User:a;bob")


def test_cache_index_follows_updates() -> None:
    c = cache_of(acl(T, "a", ALICE, Op.READ), acl(T, "b", ALICE, Op.READ))
    key = (AccessControlEntry(ALICE, "*", Op.READ, A), T, LIT)
    assert c.by_type[key] == {"a", "b"}
    c.update(ResourcePattern(T, "a"), [])
    assert c.by_type[key] == {"b"} and ResourcePattern(T, "a") not in c.acls
    c.update(ResourcePattern(T, "b"), [])
    assert key not in c.by_type and not c.acls


def by_type(bindings: list[AclBinding], op: AclOperation = Op.WRITE, principal: str = ALICE,
            allow_if_none: bool = False, supers: frozenset[str] = frozenset()) -> bool:
    policy = AclPolicy(cache_of(*bindings), supers, allow_if_none)
    return policy.authorize_by_resource_type(principal, HOST, op, T)


def test_authorize_by_resource_type() -> None:
    assert not by_type([])
    assert by_type([], supers=frozenset({ALICE}))
    assert by_type([], allow_if_none=True)
    assert by_type([acl(T, "t1", ALICE, Op.WRITE)])
    assert by_type([acl(T, "t1", "User:*", Op.ALL)])
    assert by_type([acl(T, "pre", ALICE, Op.WRITE, ptype=PRE)])
    assert not by_type([acl(T, "t1", ALICE, Op.READ)])  # no implication here
    assert not by_type([acl(T, "t1", BOB, Op.WRITE)])
    # A literal allow shadowed by a literal deny of the same name.
    assert not by_type([acl(T, "t1", ALICE, Op.WRITE), acl(T, "t1", ALICE, Op.WRITE, D)])
    # ... by a prefixed deny of a prefix.
    assert not by_type([acl(T, "t1", ALICE, Op.WRITE), acl(T, "t", ALICE, Op.WRITE, D,
                                                          ptype=PRE)])
    # One of two allows not shadowed.
    assert by_type([acl(T, "t1", ALICE, Op.WRITE), acl(T, "u1", ALICE, Op.WRITE),
                    acl(T, "t", ALICE, Op.WRITE, D, ptype=PRE)])
    # A prefixed allow shadowed by a shorter prefixed deny, not by a longer one.
    assert not by_type([acl(T, "abc", ALICE, Op.WRITE, ptype=PRE),
                        acl(T, "ab", ALICE, Op.WRITE, D, ptype=PRE)])
    assert by_type([acl(T, "ab", ALICE, Op.WRITE, ptype=PRE),
                    acl(T, "abc", ALICE, Op.WRITE, D, ptype=PRE)])
    # A literal deny on `*` denies everything, even with allow.everyone.if.no.acl.found.
    assert not by_type([acl(T, "t1", ALICE, Op.WRITE), acl(T, "*", "User:*", Op.ALL, D)],
                       allow_if_none=True)
    # A wildcard allow is not shadowed by literal denies.
    assert by_type([acl(T, "*", ALICE, Op.WRITE), acl(T, "t1", ALICE, Op.WRITE, D)])
    with pytest.raises(ValueError):
        by_type([], op=Op.ANY)


def f(**kw: object) -> AclBindingFilter:
    return AclBindingFilter(**kw)  # type: ignore[arg-type]


FILTER_CASES = [
    ("any matches all", f(), acl(T, "x", ALICE, Op.READ), True),
    ("type", f(resource_type=G), acl(T, "x", ALICE, Op.READ), False),
    ("literal exact", f(resource_type=T, name="x", pattern_type=LIT),
     acl(T, "x", ALICE, Op.READ), True),
    ("literal does not match prefixed", f(resource_type=T, name="x", pattern_type=LIT),
     acl(T, "x", ALICE, Op.READ, ptype=PRE), False),
    ("any pattern type, exact name", f(name="x"), acl(T, "x", ALICE, Op.READ, ptype=PRE), True),
    ("any pattern type, not wildcard", f(name="x"), acl(T, "*", ALICE, Op.READ), False),
    ("match literal", f(name="orders", pattern_type=PatternType.MATCH),
     acl(T, "orders", ALICE, Op.READ), True),
    ("match wildcard", f(name="orders", pattern_type=PatternType.MATCH),
     acl(T, "*", ALICE, Op.READ), True),
    ("match prefix", f(name="orders", pattern_type=PatternType.MATCH),
     acl(T, "ord", ALICE, Op.READ, ptype=PRE), True),
    ("match not prefix", f(name="orders", pattern_type=PatternType.MATCH),
     acl(T, "ordx", ALICE, Op.READ, ptype=PRE), False),
    ("match other literal", f(name="orders", pattern_type=PatternType.MATCH),
     acl(T, "ord", ALICE, Op.READ), False),
    ("principal exact only", f(principal=ALICE), acl(T, "x", "User:*", Op.READ), False),
    ("host", f(host="1.2.3.4"), acl(T, "x", ALICE, Op.READ, host="1.2.3.4"), True),
    ("operation exact (no ALL expansion)", f(operation=Op.READ), acl(T, "x", ALICE, Op.ALL),
     False),
    ("permission", f(permission_type=D), acl(T, "x", ALICE, Op.READ), False),
]


@pytest.mark.parametrize(("what", "flt", "binding", "expected"), FILTER_CASES,
                         ids=[c[0] for c in FILTER_CASES])
def test_filter_matches(what: str, flt: AclBindingFilter, binding: AclBinding,
                        expected: bool) -> None:
    assert filter_matches(flt, binding) is expected


def test_filter_helpers() -> None:
    assert exact_patterns(f(resource_type=T, name="x", pattern_type=PRE)) == [
        ResourcePattern(T, "x", PRE)]
    assert exact_patterns(f(resource_type=T, name="x", pattern_type=PatternType.MATCH)) == []
    assert exact_patterns(f(name="x", pattern_type=LIT)) == []
    assert filter_error(f(operation=Op.UNKNOWN)) == "Filter contain UNKNOWN elements"
    assert filter_error(f()) is None


VALIDATION = [
    (acl(T, "orders", ALICE, Op.READ), None),
    (acl(C, "kafka-cluster", ALICE, Op.ALTER), None),
    (acl(C, "other", ALICE, Op.ALTER),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(T, "", ALICE, Op.READ), "Invalid empty resource name"),
    (acl(T, "*", ALICE, Op.READ, ptype=PRE), "A wildcard resource name cannot be PREFIXED"),
    (acl(T, "x", "alice", Op.READ),
     "expected a string in format principalType:principalName but got alice"),
    (acl(T, "x", ALICE, Op.ANY), "operation must not be ANY"),
    (acl(T, "x", ALICE, Op.READ, AclPermissionType.ANY), "permissionType must not be ANY"),
    (acl(ResourceType.ANY, "x", ALICE, Op.READ), "resourceType must not be ANY"),
    (acl(T, "x", ALICE, Op.READ, ptype=PatternType.MATCH), "patternType must not be MATCH"),
    (acl(T, "x", ALICE, Op.UNKNOWN), "Creations contain unknown elements"),
    (acl(ResourceType.UNKNOWN, "x", ALICE, Op.READ), "Creations contain unknown elements"),
    (acl(T, "a/b", ALICE, Op.READ), "Failed to create ACL"),
]


@pytest.mark.parametrize(("binding", "message"), VALIDATION)
def test_binding_validation(binding: AclBinding, message: str | None) -> None:
    got = binding_error(binding)
    if message is None:
        assert got is None
    else:
        assert got is not None and got.startswith(message)
