"""`wherry acls` (kafka-acls.sh): Kafka's options, shortcuts, checks and output, against a
broker with the ACL authorizer (`DevCluster`, PLAINTEXT, `User:ANONYMOUS` a super user)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from wherry.cli.acls import AclOptions, filter_to_acls, resource_to_acls
from wherry.cli.main import main
from wherry.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from wherry.testing.cluster import DevCluster

ERROR_PREFIX = "Error while executing ACL command: "
Op = AclOperation
T = ResourceType.TOPIC


def acls(bootstrap: str, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, ["acls", "--bootstrap-server", bootstrap, *args],
                              input=stdin, catch_exceptions=False)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def allow(principal: str, op: AclOperation, host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, AclPermissionType.ALLOW)


def topic_block(title: str, name: str, entries: list[str],
                ptype: str = "LITERAL", rtype: str = "TOPIC") -> str:
    body = "\n".join(f"\t{e}" for e in entries)
    return (f"{title} `ResourcePattern(resourceType={rtype}, name={name}, "
            f"patternType={ptype})`: \n {body} \n\n")


# -------------------------------------------------------------------------------------------
# Offline: the expansions and the checks


def test_producer_and_consumer_shortcuts() -> None:
    o = AclOptions(add=True, allow_principals=("User:alice",), topics=("t",),
                   transactional_ids=("tx",), producer=True, idempotent=True)
    got = resource_to_acls(o)
    assert got == {
        ResourcePattern(T, "t"): {allow("User:alice", op)
                                  for op in (Op.WRITE, Op.DESCRIBE, Op.CREATE)},
        ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx"): {
            allow("User:alice", Op.WRITE), allow("User:alice", Op.DESCRIBE)},
        ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"): {
            allow("User:alice", Op.IDEMPOTENT_WRITE)},
    }
    o = AclOptions(add=True, allow_principals=("User:bob",), allow_hosts=("10.0.0.1",),
                   topics=("t",), groups=("g",), consumer=True)
    assert resource_to_acls(o) == {
        ResourcePattern(T, "t"): {allow("User:bob", Op.READ, "10.0.0.1"),
                                  allow("User:bob", Op.DESCRIBE, "10.0.0.1")},
        ResourcePattern(ResourceType.GROUP, "g"): {allow("User:bob", Op.READ, "10.0.0.1")},
    }
    # Both at once: the topic gets the union.
    o = AclOptions(add=True, allow_principals=("User:c",), topics=("t",), groups=("g",),
                   producer=True, consumer=True)
    assert {e.operation for e in resource_to_acls(o)[ResourcePattern(T, "t")]} == {
        Op.WRITE, Op.DESCRIBE, Op.CREATE, Op.READ}
    # --remove with no principal: every ACL of the filter.
    o = AclOptions(remove=True, topics=("t",), pattern_type="prefixed")
    assert list(filter_to_acls(o).values()) == [set()]


@pytest.mark.parametrize(("args", "message"), [
    (("--topic", "t"), "Command must include exactly one action: --list, --add, --remove. "),
    (("--list", "--add", "--topic", "t"),
     "Command must include exactly one action: --list, --add, --remove. "),
    (("--list", "--producer", "--topic", "t"),
     'Option "[list]" can\'t be used with option "[producer]"'),
    (("--add", "--producer", "--operation", "Read", "--topic", "t",
      "--allow-principal", "User:a"),
     'Option "[producer]" can\'t be used with option "[operation]"'),
    (("--add", "--topic", "t", "--principal", "User:a"),
     "The --principal option is only available if --list is set"),
    (("--add", "--producer", "--allow-principal", "User:a"),
     "With --producer you must specify a --topic"),
    (("--add", "--idempotent", "--topic", "t", "--allow-principal", "User:a"),
     "The --idempotent option is only available if --producer is set"),
    (("--add", "--consumer", "--topic", "t", "--allow-principal", "User:a"),
     "With --consumer you must specify a --topic and a --group and no --cluster or "
     "--transactional-id option should be specified."),
    (("--add", "--topic", "t"),
     "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."),
    (("--add", "--allow-principal", "User:a"),
     "You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
     "or --delegation-token <Delegation Token ID>"),
    (("--add", "--topic", "t", "--allow-principal", "User:a", "--resource-pattern-type",
      "match"), "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."),
    (("--add", "--group", "g", "--allow-principal", "User:a", "--operation", "Write"),
     "ResourceType GROUP only supports operations ALL, READ, DESCRIBE, DELETE"),
    (("--add", "--topic", "t", "--allow-principal", "alice"),
     "expected a string in format principalType:principalName but got alice"),
    (("--add", "--topic", "t", "--allow-principal", "User:a", "--operation", "Fly"),
     "Unknown operation: Fly"),
])
def test_usage_errors(unreachable_bootstrap: str, args: tuple[str, ...], message: str) -> None:
    result = acls(unreachable_bootstrap, *args)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stderr.rstrip("\n") == message


# -------------------------------------------------------------------------------------------
# A broker


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with DevCluster(tmp_path / "c", brokers=1, overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }) as c:
        c.wait_for_controller()
        yield c


def test_add_list_remove(cluster: DevCluster) -> None:
    boot = cluster.bootstrap
    alice_read = "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
    bob_write = "(principal=User:bob, host=10.0.0.1, operation=WRITE, permissionType=ALLOW)"
    out = ok(acls(boot, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                  "--topic", "orders"))
    assert out == (topic_block("Adding ACLs for resource", "orders", [alice_read])
                   + topic_block("Current ACLs for resource", "orders", [alice_read]))
    ok(acls(boot, "--add", "--allow-principal", "User:bob", "--allow-host", "10.0.0.1",
            "--operation", "write", "--topic", "orders"))
    ok(acls(boot, "--add", "--deny-principal", "User:eve", "--operation", "All", "--topic",
            "ord", "--resource-pattern-type", "prefixed"))
    eve_deny = "(principal=User:eve, host=*, operation=ALL, permissionType=DENY)"
    out = ok(acls(boot, "--list"))
    assert out == (topic_block("Current ACLs for resource", "ord", [eve_deny], "PREFIXED")
                   + topic_block("Current ACLs for resource", "orders", [alice_read, bob_write]))
    # MATCH: every pattern that applies to `orders`; --principal narrows it.
    out = ok(acls(boot, "--list", "--topic", "orders", "--resource-pattern-type", "match",
                  "--principal", "User:eve"))
    assert out == ("ACLs for principal `User:eve`\n"
                   + topic_block("Current ACLs for resource", "ord", [eve_deny], "PREFIXED"))
    # Remove asks first; "n" keeps them.
    result = acls(boot, "--remove", "--allow-principal", "User:alice", "--operation", "Read",
                  "--topic", "orders", stdin="n\n")
    out = ok(result)
    assert out.startswith("Are you sure you want to remove ACLs: \n \t" + alice_read
                          + " \n from resource filter `ResourcePatternFilter(resourceType=TOPIC, "
                            "name=orders, patternType=LITERAL)`? (y/n)\n")
    assert alice_read in out  # still there
    out = ok(acls(boot, "--remove", "--force", "--allow-principal", "User:alice", "--operation",
                  "Read", "--topic", "orders"))
    assert out == topic_block("Current ACLs for resource", "orders", [bob_write])
    # Everything on a filter, after a "y".
    out = ok(acls(boot, "--remove", "--topic", "orders", stdin="y\n"))
    assert out == ("Are you sure you want to delete all ACLs for resource filter "
                   "`ResourcePatternFilter(resourceType=TOPIC, name=orders, "
                   "patternType=LITERAL)`? (y/n)\n")
    out = ok(acls(boot, "--remove", "--force", "--topic", "ord", "--resource-pattern-type",
                  "prefixed"))
    assert ok(acls(boot, "--list")) == ""


def test_producer_consumer_shortcuts_on_a_broker(cluster: DevCluster) -> None:
    boot = cluster.bootstrap
    out = ok(acls(boot, "--add", "--allow-principal", "User:app", "--producer", "--consumer",
                  "--topic", "events", "--group", "workers", "--idempotent"))
    adding = [line for line in out.splitlines() if line.startswith("Adding")]
    assert adding == [
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=events, "
        "patternType=LITERAL)`: ",
        "Adding ACLs for resource `ResourcePattern(resourceType=GROUP, name=workers, "
        "patternType=LITERAL)`: ",
        "Adding ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, "
        "patternType=LITERAL)`: ",
    ]
    listed = ok(acls(boot, "--list", "--topic", "events"))
    ops = [line.split("operation=")[1].split(",")[0] for line in listed.splitlines()
           if "operation=" in line]
    assert ops == ["READ", "WRITE", "CREATE", "DESCRIBE"]
    cluster_acls = ok(acls(boot, "--list", "--cluster"))
    assert "operation=IDEMPOTENT_WRITE" in cluster_acls


def test_cluster_errors_are_reported(tmp_path: Path) -> None:
    with DevCluster(tmp_path / "plain", brokers=1) as c:
        # (librdkafka drops DescribeAcls' top-level error, so --list shows nothing there.)
        result = acls(c.bootstrap, "--add", "--allow-principal", "User:a", "--topic", "t")
        assert result.exit_code == 1
        assert result.stderr == ERROR_PREFIX + "No Authorizer is configured.\n", result.stderr
