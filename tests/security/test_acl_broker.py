"""Describe/Create/DeleteAcls against real brokers (`DevCluster`, one shared store) with
`authorizer.class.name=kafka.security.authorizer.AclAuthorizer` on PLAINTEXT (principal
`User:ANONYMOUS`): confluent-kafka's admin calls, notifications to the other broker, restarts
and session expiry, CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED, an unknown class."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests import kafka_wire
from wherry.testing.cluster import DevCluster, wait_until

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
SECURITY_DISABLED, CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST = 54, 31, 42


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                        "socket.timeout.ms": 10_000})


def allow(name: str, principal: str, op: AclOperation,
          ptype: ResourcePatternType = ResourcePatternType.LITERAL,
          rtype: ResourceType = ResourceType.TOPIC) -> AclBinding:
    return AclBinding(rtype, name, ptype, principal, "*", op, AclPermissionType.ALLOW)


def create(bootstrap: str, bindings: list[AclBinding]) -> dict[AclBinding, Exception | None]:
    out: dict[AclBinding, Exception | None] = {}
    client = admin(bootstrap)  # alive until every future is done
    for b, fut in client.create_acls(bindings, request_timeout=10).items():
        try:
            fut.result(15)
            out[b] = None
        except KafkaException as e:
            out[b] = e
    return out


def describe_wire(bootstrap: str, **kw: Any) -> tuple[int, set[tuple[Any, ...]]]:
    """DescribeAcls v3 straight to one broker: (error code, {(type, name, pattern, principal,
    host, operation, permission)})."""
    body = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1, **kw}
    resp = kafka_wire.call(bootstrap, 29, 3, body)
    return int(resp.error_code), {
        (r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
         a.permission_type)
        for r in resp.resources for a in r.acls
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with DevCluster(tmp_path / "c", brokers=2, overrides={
        "authorizer.class.name": ACL_AUTHORIZER,
        "super.users": "User:ANONYMOUS",
        "auto.leader.rebalance.enable": "false",
    }) as c:
        c.wait_for_controller()
        yield c


def test_create_describe_delete_across_brokers_restart_and_expiry(cluster: DevCluster) -> None:
    c = cluster
    b0, b1 = c.address(0), c.address(1)
    orders = allow("orders", "User:alice", AclOperation.READ)
    prefixed = allow("ord", "User:bob", AclOperation.WRITE, ResourcePatternType.PREFIXED)
    group = allow("app", "User:alice", AclOperation.READ, rtype=ResourceType.GROUP)
    bad = allow("my-cluster", "User:alice", AclOperation.ALTER, rtype=ResourceType.BROKER)
    results = create(b0, [orders, prefixed, group, bad])
    assert results[orders] is None and results[prefixed] is None and results[group] is None
    err = results[bad]
    assert err is not None and err.args[0].code() == INVALID_REQUEST
    assert "The only valid name for the CLUSTER resource is kafka-cluster" in err.args[0].str()

    # Broker 1 hears of them through the change notifications.
    expected = {(2, "orders", 3, "User:alice", "*", 3, 3), (2, "ord", 4, "User:bob", "*", 4, 3),
                (3, "app", 3, "User:alice", "*", 3, 3)}
    assert wait_until(lambda: describe_wire(b1) == (0, expected), 10), describe_wire(b1)
    # MATCH on a topic name: the literal and the prefixed pattern that apply to it.
    assert describe_wire(b1, resource_type_filter=2, resource_name_filter="orders",
                         pattern_type_filter=2)[1] == {
        (2, "orders", 3, "User:alice", "*", 3, 3), (2, "ord", 4, "User:bob", "*", 4, 3)}
    # ... and through confluent-kafka.
    flt = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                           AclOperation.ANY, AclPermissionType.ANY)
    client = admin(b1)
    got = client.describe_acls(flt, request_timeout=10).result(15)
    assert set(got) == {orders, prefixed}

    # Broker 1 restarts: it loads them all from the store.
    c.stop_broker(1)
    c.start_broker(1)
    assert describe_wire(b1) == (0, expected)
    # Broker 1's session expires: a new session, reloaded and watched again.
    assert c.expire_session(1)
    assert wait_until(lambda: c.call(lambda: c.broker(1).session_renewals) == 1, 15)
    extra = allow("late", "User:carol", AclOperation.DESCRIBE)
    assert create(b0, [extra]) == {extra: None}
    expected.add((2, "late", 3, "User:carol", "*", 8, 3))
    assert wait_until(lambda: describe_wire(b1) == (0, expected), 10), describe_wire(b1)

    # Delete through broker 1; broker 0 sees the ACLs go.
    by_principal = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                                    "User:alice", None, AclOperation.ANY, AclPermissionType.ANY)
    futs = client.delete_acls([by_principal], request_timeout=10)
    assert set(futs[by_principal].result(15)) == {orders, group}
    expected -= {(2, "orders", 3, "User:alice", "*", 3, 3), (3, "app", 3, "User:alice", "*", 3, 3)}
    assert wait_until(lambda: describe_wire(b0) == (0, expected), 10), describe_wire(b0)


def test_cluster_authorization_and_security_disabled(tmp_path: Path) -> None:
    # An authorizer, and ANONYMOUS is no super user: no ACL on the cluster, so denied.
    with DevCluster(tmp_path / "authz", brokers=1,
                    overrides={"authorizer.class.name": ACL_AUTHORIZER}) as c:
        boot = c.address(0)
        assert describe_wire(boot)[0] == CLUSTER_AUTHORIZATION_FAILED
        b = allow("orders", "User:alice", AclOperation.READ)
        err = create(boot, [b])[b]
        assert err is not None and err.args[0].code() == CLUSTER_AUTHORIZATION_FAILED
        resp = kafka_wire.call(boot, 31, 3, {"filters": [{
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1}]})
        assert resp.filter_results[0].error_code == CLUSTER_AUTHORIZATION_FAILED
    # No authorizer: SECURITY_DISABLED, Kafka's message.
    with DevCluster(tmp_path / "none", brokers=1) as c:
        boot = c.address(0)
        resp = kafka_wire.call(boot, 29, 1, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        assert (resp.error_code, resp.error_message) == (SECURITY_DISABLED,
                                                         "No Authorizer is configured.")
        b = allow("orders", "User:alice", AclOperation.READ)
        err = create(boot, [b])[b]
        assert err is not None and err.args[0].code() == SECURITY_DISABLED


def test_unknown_authorizer_class_refuses_to_start(tmp_path: Path) -> None:
    # Refused when the config is read, before anything starts.
    with pytest.raises(ValueError, match=r"com\.example\.CustomAuthorizer for configuration "
                                         r"authorizer\.class\.name"):
        DevCluster(tmp_path / "bad", brokers=1,
                   overrides={"authorizer.class.name": "com.example.CustomAuthorizer"}).start()
