"""`wherry acls`: a kafka-acls.sh look-alike (Kafka's AclCommand with `--bootstrap-server`).

`--add`, `--remove` (asks first unless `--force`) and `--list` ACLs on topics, groups, the
cluster and transactional ids, through confluent-kafka's AdminClient (Create/Describe/
DeleteAcls). Kafka's options, its `--producer` / `--consumer` shortcuts (producer: WRITE,
DESCRIBE, CREATE on topics, WRITE and DESCRIBE on transactional ids, IDEMPOTENT_WRITE on the
cluster with `--idempotent`; consumer: READ, DESCRIBE on topics, READ on groups), its checks and
messages, and its output: `Adding ACLs for resource `ResourcePattern(resourceType=TOPIC,
name=t, patternType=LITERAL)`: ` then, one per line after a space and a tab, the entries
`(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)`, then the resulting
`Current ACLs for resource ...` blocks (Kafka's spacing exactly, lines ending in a space).

Usage mistakes print Kafka's message and exit with status 1; failures of the cluster print
`Error while executing ACL command: <message>`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from confluent_kafka import admin as ck

from wherry.cli.common import AdminService, admin_options, exits_on_error, fail
from wherry.security import acl
from wherry.security.acl_rules import parse_principal
from wherry.security.acl_store import operation_named
from wherry.server.authz import SUPPORTED_OPERATIONS

NL = "\n"
_handle_errors = exits_on_error("Error while executing ACL command: ")
_common_options = admin_options("Overall timeout of each request to the cluster (wherry extra).")
PATTERN_TYPES = ("literal", "prefixed", "match", "any")


class UsageProblem(Exception):
    """A usage mistake: Kafka prints the message (and its usage) and exits with status 1."""


@dataclass(frozen=True, slots=True, order=True)
class PatternFilter:
    """Kafka's ResourcePatternFilter (a pattern when its pattern type is specific)."""

    resource_type: acl.ResourceType
    name: str | None
    pattern_type: acl.PatternType

    def __str__(self) -> str:
        name = "<any>" if self.name is None else self.name
        return (f"ResourcePatternFilter(resourceType={self.resource_type.name}, name={name}, "
                f"patternType={self.pattern_type.name})")

    def pattern(self) -> acl.ResourcePattern:
        return acl.ResourcePattern(self.resource_type, self.name or "", self.pattern_type)


CLUSTER_FILTER = PatternFilter(acl.ResourceType.CLUSTER, acl.CLUSTER_NAME, acl.PatternType.LITERAL)


def pattern_text(p: acl.ResourcePattern) -> str:
    return (f"ResourcePattern(resourceType={p.resource_type.name}, name={p.name}, "
            f"patternType={p.pattern_type.name})")


def entry_text(e: acl.AccessControlEntry) -> str:
    return (f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
            f"permissionType={e.permission_type.name})")


def _entry_key(e: acl.AccessControlEntry) -> tuple[str, str, int, int]:
    return (e.principal, e.host, int(e.operation), int(e.permission_type))


def entries_text(entries: Iterable[acl.AccessControlEntry]) -> str:
    """Kafka's `acls.map("\\t" + _).mkString(Newline)` (sorted here, for a stable output)."""
    return NL.join("\t" + entry_text(e) for e in sorted(entries, key=_entry_key))


def resource_block(title: str, resource: str, entries: Iterable[acl.AccessControlEntry]) -> str:
    """`<title> `resource`: \\n \\t(...)\\n\\t(...) \\n` (printed with a newline after)."""
    return f"{title} `{resource}`: {NL} {entries_text(entries)} {NL}"


# --------------------------------------------------------------------------------------------
# What the options ask for (Kafka's AclCommand.getResourceFilterToAcls and friends)


@dataclass(frozen=True, slots=True)
class AclOptions:
    add: bool = False
    remove: bool = False
    list: bool = False
    allow_principals: tuple[str, ...] = ()
    deny_principals: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ()
    operations: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    cluster: bool = False
    transactional_ids: tuple[str, ...] = ()
    pattern_type: str = "literal"
    producer: bool = False
    consumer: bool = False
    idempotent: bool = False
    principals: tuple[str, ...] = ()
    force: bool = False

    @property
    def patterns(self) -> acl.PatternType:
        return acl.PatternType[self.pattern_type.upper()]


def check_args(o: AclOptions) -> None:
    """Kafka's AclCommandOptions.checkArgs."""
    if sum((o.add, o.remove, o.list)) != 1:
        raise UsageProblem("Command must include exactly one action: --list, --add, --remove. ")
    given = {
        "producer": o.producer, "consumer": o.consumer, "allow-host": bool(o.allow_hosts),
        "allow-principal": bool(o.allow_principals), "deny-host": bool(o.deny_hosts),
        "deny-principal": bool(o.deny_principals), "operation": bool(o.operations),
    }

    def invalid_with(used: str, option_set: bool, others: Sequence[str]) -> None:
        if option_set:
            for other in others:
                if given[other]:
                    raise UsageProblem(f'Option "[{used}]" can\'t be used with option "[{other}]"')

    invalid_with("list", o.list, ("producer", "consumer", "allow-host", "allow-principal",
                                  "deny-host", "deny-principal"))
    for role, role_set in (("producer", o.producer), ("consumer", o.consumer)):
        invalid_with(role, role_set, ("operation", "deny-principal", "deny-host"))
    if o.principals and not o.list:
        raise UsageProblem("The --principal option is only available if --list is set")
    if o.producer and not o.topics:
        raise UsageProblem("With --producer you must specify a --topic")
    if o.idempotent and not o.producer:
        raise UsageProblem("The --idempotent option is only available if --producer is set")
    if o.consumer and (not o.topics or not o.groups
                       or (not o.producer and (o.cluster or o.transactional_ids))):
        raise UsageProblem("With --consumer you must specify a --topic and a --group and no "
                           "--cluster or --transactional-id option should be specified.")


def resource_filters(o: AclOptions, die_if_none: bool) -> list[PatternFilter]:
    ptype = o.patterns
    out = [PatternFilter(acl.ResourceType.TOPIC, t.strip(), ptype) for t in o.topics]
    if ptype == acl.PatternType.LITERAL and (o.cluster or o.idempotent):
        out.append(CLUSTER_FILTER)
    out += [PatternFilter(acl.ResourceType.GROUP, g.strip(), ptype) for g in o.groups]
    out += [PatternFilter(acl.ResourceType.TRANSACTIONAL_ID, t, ptype) for t in o.transactional_ids]
    if not out and die_if_none:
        raise UsageProblem("You must provide at least one resource: --topic <topic> or --cluster "
                           "or --group <group> or --delegation-token <Delegation Token ID>")
    return sorted(set(out))


def _principals(texts: Iterable[str]) -> list[str]:
    try:
        return [str(parse_principal(t.strip())) for t in texts]
    except ValueError as e:
        raise UsageProblem(str(e)) from None


def _hosts(hosts: Sequence[str], principals: Sequence[str]) -> list[str]:
    if hosts:
        return [h.strip() for h in hosts]
    return [acl.WILDCARD_HOST] if principals else []


def acl_entries(
    o: AclOptions, operations: Iterable[acl.AclOperation]
) -> set[acl.AccessControlEntry]:
    """Kafka's getAcl: every (principal, operation, host) of the allow and deny options."""
    ops = list(operations)
    out: set[acl.AccessControlEntry] = set()
    allow, deny = acl.AclPermissionType.ALLOW, acl.AclPermissionType.DENY
    for principals, hosts, perm in (
        (o.allow_principals, _hosts(o.allow_hosts, o.allow_principals), allow),
        (o.deny_principals, _hosts(o.deny_hosts, o.deny_principals), deny),
    ):
        for p in _principals(principals):
            out.update(acl.AccessControlEntry(p, h, op, perm) for op in ops for h in hosts)
    return out


def _operations(o: AclOptions) -> list[acl.AclOperation]:
    ops: list[acl.AclOperation] = []
    for text in o.operations or ("All",):
        try:
            op = operation_named(text.strip())
        except ValueError:
            op = acl.AclOperation.UNKNOWN
        if op in (acl.AclOperation.UNKNOWN, acl.AclOperation.ANY):
            raise UsageProblem(f"Unknown operation: {text}")
        ops.append(op)
    return ops


def filter_to_acls(o: AclOptions) -> dict[PatternFilter, set[acl.AccessControlEntry]]:
    """Kafka's getResourceFilterToAcls: the options' ACLs per resource filter."""
    out: dict[PatternFilter, set[acl.AccessControlEntry]] = {}
    if not o.producer and not o.consumer:
        entries = acl_entries(o, _operations(o))
        out.update({f: set(entries) for f in resource_filters(o, True)})
    if o.producer:
        filters = resource_filters(o, True)
        write_describe = (acl.AclOperation.WRITE, acl.AclOperation.DESCRIBE)
        for f in filters:
            if f.resource_type == acl.ResourceType.TOPIC:
                out[f] = acl_entries(o, (*write_describe, acl.AclOperation.CREATE))
            elif f.resource_type == acl.ResourceType.TRANSACTIONAL_ID:
                out[f] = acl_entries(o, write_describe)
        if o.idempotent:
            out[CLUSTER_FILTER] = acl_entries(o, (acl.AclOperation.IDEMPOTENT_WRITE,))
    if o.consumer:
        for f in resource_filters(o, True):
            if f.resource_type == acl.ResourceType.TOPIC:
                out.setdefault(f, set()).update(
                    acl_entries(o, (acl.AclOperation.READ, acl.AclOperation.DESCRIBE)))
            elif f.resource_type == acl.ResourceType.GROUP:
                out.setdefault(f, set()).update(acl_entries(o, (acl.AclOperation.READ,)))
    _validate_operations(out)
    return out


def _validate_operations(
    resource_to_acls: dict[PatternFilter, set[acl.AccessControlEntry]],
) -> None:
    for f, entries in resource_to_acls.items():
        valid = (acl.AclOperation.ALL, *SUPPORTED_OPERATIONS.get(f.resource_type, ()))
        if any(e.operation not in valid for e in entries):
            names = ", ".join(op.name for op in valid)
            raise UsageProblem(
                f"ResourceType {f.resource_type.name} only supports operations {names}")


def resource_to_acls(o: AclOptions) -> dict[acl.ResourcePattern, set[acl.AccessControlEntry]]:
    """Kafka's getResourceToAcls (for --add): specific patterns, some principal each."""
    if o.patterns not in (acl.PatternType.LITERAL, acl.PatternType.PREFIXED):
        raise UsageProblem(f"A '--resource-pattern-type' value of '{o.patterns.name}' is not "
                           "valid when adding acls.")
    out = {f.pattern(): acls for f, acls in filter_to_acls(o).items()}
    if any(not acls for acls in out.values()):
        raise UsageProblem("You must specify one of: --allow-principal, --deny-principal when "
                           "trying to add ACLs.")
    return out


# --------------------------------------------------------------------------------------------
# The admin calls


def _ck_binding(p: acl.ResourcePattern, e: acl.AccessControlEntry) -> ck.AclBinding:
    return ck.AclBinding(ck.ResourceType(int(p.resource_type)), p.name,
                         ck.ResourcePatternType(int(p.pattern_type)), e.principal, e.host,
                         ck.AclOperation(int(e.operation)),
                         ck.AclPermissionType(int(e.permission_type)))


def _ck_filter(f: PatternFilter, e: acl.AccessControlEntry | None) -> ck.AclBindingFilter:
    # None (any name, principal, host) is what confluent-kafka documents; its stubs say str.
    name: Any = f.name
    principal: Any = None if e is None else e.principal
    host: Any = None if e is None else e.host
    return ck.AclBindingFilter(
        ck.ResourceType(int(f.resource_type)), name, ck.ResourcePatternType(int(f.pattern_type)),
        principal, host,
        ck.AclOperation(acl.AclOperation.ANY if e is None else int(e.operation)),
        ck.AclPermissionType(acl.AclPermissionType.ANY if e is None else int(e.permission_type)))


def _from_ck(b: ck.AclBinding) -> tuple[acl.ResourcePattern, acl.AccessControlEntry]:
    return (acl.ResourcePattern(acl.ResourceType(int(b.restype_int)), b.name,
                            acl.PatternType(int(b.resource_pattern_type_int))),
            acl.AccessControlEntry(b.principal, b.host, acl.AclOperation(int(b.operation_int)),
                               acl.AclPermissionType(int(b.permission_type_int))))


class AclService(AdminService):
    """The admin calls of `wherry acls`."""

    CLIENT_ID = "wherry-acls"

    def create(self, bindings: list[ck.AclBinding]) -> None:
        futs = self.admin.create_acls(bindings, request_timeout=self.timeout_s)
        for fut in futs.values():
            self._wait(fut, "createAcls")

    def describe(self, f: ck.AclBindingFilter) -> list[ck.AclBinding]:
        fut = self.admin.describe_acls(f, request_timeout=self.timeout_s)
        return list(self._wait(fut, "describeAcls"))

    def delete(self, filters: list[ck.AclBindingFilter]) -> None:
        futs = self.admin.delete_acls(filters, request_timeout=self.timeout_s)
        for fut in futs.values():
            self._wait(fut, "deleteAcls")


ANY_FILTER = PatternFilter(acl.ResourceType.ANY, None, acl.PatternType.ANY)


def current_acls(svc: AclService, filters: list[PatternFilter]
                 ) -> dict[acl.ResourcePattern, set[acl.AccessControlEntry]]:
    out: dict[acl.ResourcePattern, set[acl.AccessControlEntry]] = {}
    for f in filters or [ANY_FILTER]:
        for b in svc.describe(_ck_filter(f, None)):
            pattern, entry = _from_ck(b)
            out.setdefault(pattern, set()).add(entry)
    return out


def _resource_order(p: acl.ResourcePattern) -> tuple[int, str, int]:
    return (int(p.resource_type), p.name, int(p.pattern_type))


def print_resource_acls(acls: dict[acl.ResourcePattern, set[acl.AccessControlEntry]]) -> None:
    for pattern in sorted(acls, key=_resource_order):
        click.echo(resource_block("Current ACLs for resource", pattern_text(pattern),
                                  acls[pattern]))


def list_acls(svc: AclService, o: AclOptions) -> None:
    acls = current_acls(svc, resource_filters(o, False))
    if not o.principals:
        print_resource_acls(acls)
        return
    for principal in _principals(o.principals):
        click.echo(f"ACLs for principal `{principal}`")
        mine = {p: {e for e in es if e.principal == principal} for p, es in acls.items()}
        print_resource_acls({p: es for p, es in mine.items() if es})


def confirm(o: AclOptions, message: str) -> bool:
    if o.force:
        return True
    click.echo(message)
    return sys.stdin.readline().strip().lower() == "y"


def add_acls(svc: AclService, o: AclOptions) -> None:
    to_add = resource_to_acls(o)
    for pattern in sorted(to_add, key=_resource_order):
        entries = to_add[pattern]
        click.echo(resource_block("Adding ACLs for resource", pattern_text(pattern), entries))
        svc.create([_ck_binding(pattern, e) for e in sorted(entries, key=_entry_key)])
    list_acls(svc, o)


def remove_acls(svc: AclService, o: AclOptions) -> None:
    for f, entries in sorted(filter_to_acls(o).items()):
        if not entries:
            if confirm(o, f"Are you sure you want to delete all ACLs for resource filter `{f}`? "
                          "(y/n)"):
                svc.delete([_ck_filter(f, None)])
        elif confirm(o, f"Are you sure you want to remove ACLs: {NL} {entries_text(entries)} "
                        f"{NL} from resource filter `{f}`? (y/n)"):
            svc.delete([_ck_filter(f, e) for e in sorted(entries, key=_entry_key)])
    list_acls(svc, o)


@click.command()
@_common_options
@click.option("--add", is_flag=True, help="Indicates you are trying to add ACLs.")
@click.option("--remove", is_flag=True, help="Indicates you are trying to remove ACLs.")
@click.option("--list", "list_", is_flag=True, help="List ACLs for the specified resource.")
@click.option("--allow-principal", multiple=True, help="Principal (Type:name) to allow.")
@click.option("--deny-principal", multiple=True, help="Principal (Type:name) to deny.")
@click.option("--allow-host", multiple=True, help="Host the allowed principals may come from "
              "(default * with --allow-principal).")
@click.option("--deny-host", multiple=True, help="Host the denied principals are denied from "
              "(default * with --deny-principal).")
@click.option("--operation", multiple=True, help="Operation allowed or denied (default All): "
              "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
              "AlterConfigs, IdempotentWrite, All.")
@click.option("--topic", multiple=True, help="Topic ('*': all topics).")
@click.option("--group", multiple=True, help="Consumer group ('*': all groups).")
@click.option("--cluster", is_flag=True, help="Add/remove cluster ACLs.")
@click.option("--transactional-id", multiple=True, help="Transactional id ('*': all).")
@click.option("--resource-pattern-type", type=click.Choice(PATTERN_TYPES, case_sensitive=False),
              default="literal", show_default=True,
              help="literal or prefixed to add; any or match too to list or remove.")
@click.option("--producer", is_flag=True, help="ACLs for a producer: WRITE, DESCRIBE and CREATE "
              "on topics.")
@click.option("--consumer", is_flag=True, help="ACLs for a consumer: READ, DESCRIBE on topics "
              "and READ on groups.")
@click.option("--idempotent", is_flag=True, help="With --producer: IDEMPOTENT_WRITE on the "
              "cluster too.")
@click.option("--principal", multiple=True, help="With --list: the ACLs of this principal.")
@click.option("--force", is_flag=True, help="Assume Yes to all queries and do not prompt.")
@_handle_errors
def acls(bootstrap_server: str, command_config: Path | None, timeout_ms: int, add: bool,
         remove: bool, list_: bool, allow_principal: tuple[str, ...],
         deny_principal: tuple[str, ...], allow_host: tuple[str, ...],
         deny_host: tuple[str, ...], operation: tuple[str, ...], topic: tuple[str, ...],
         group: tuple[str, ...], cluster: bool, transactional_id: tuple[str, ...],
         resource_pattern_type: str, producer: bool, consumer: bool, idempotent: bool,
         principal: tuple[str, ...], force: bool) -> None:
    """Add, remove or list ACLs (like kafka-acls.sh)."""
    o = AclOptions(add, remove, list_, allow_principal, deny_principal, allow_host, deny_host,
                   operation, topic, group, cluster, transactional_id, resource_pattern_type,
                   producer, consumer, idempotent, principal, force)
    try:
        check_args(o)
        if add:
            resource_to_acls(o)  # the usage checks before any connection
        elif remove:
            filter_to_acls(o)
        svc = AclService.connect(bootstrap_server, command_config, timeout_ms)
        if add:
            add_acls(svc, o)
        elif remove:
            remove_acls(svc, o)
        else:
            list_acls(svc, o)
    except UsageProblem as e:
        fail("", str(e))
