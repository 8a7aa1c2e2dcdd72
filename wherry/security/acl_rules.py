"""Kafka's ACL rules, I/O-free (kafka.security.authorizer.AclAuthorizer's semantics).

* `AclCache`: the ACLs of every resource pattern, plus the index by (entry, type, pattern
  type) that `authorize_by_resource_type` reads (Kafka's `aclCache` and `resourceCache`).
* `authorize`: super users may do anything; the ACLs that apply to a resource are those on
  its exact name (LITERAL), on `*` (LITERAL) and on every PREFIXED name it starts with; a DENY
  for the principal (or `User:*`), the host (or `*`) and the operation (or ALL) wins; then an
  ALLOW of the operation, ALL, or an operation implying it (READ, WRITE, DELETE, ALTER imply
  DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS); with no ACL at all on the resource,
  `allow.everyone.if.no.acl.found`.
* `authorize_by_resource_type`: Kafka's KIP-679 answer for "any resource of this type".
* Filters (Describe/DeleteAcls) and the checks of bindings to create.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from wherry.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from wherry.security.principal import KafkaPrincipal

# The operations whose ALLOW grants `op` (besides `op` itself and ALL).
IMPLIED_BY: Mapping[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}

SPECIFIC_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)


def allowing_operations(op: AclOperation) -> frozenset[AclOperation]:
    """The ACL operations whose ALLOW grants `op`: itself, ALL and those implying it."""
    return frozenset({op, AclOperation.ALL}) | IMPLIED_BY.get(op, frozenset())


def parse_super_users(text: str | None) -> frozenset[str]:
    """`super.users`: `User:a;User:b` → {"User:a", "User:b"}; ValueError for a bad principal
    (Kafka: `expected a string in format principalType:principalName but got ...`)."""
    if not text or not text.strip():
        return frozenset()
    out: set[str] = set()
    for part in text.split(";"):
        out.add(str(parse_principal(part.strip())))
    return frozenset(out)


def parse_principal(text: str) -> KafkaPrincipal:
    """Kafka's SecurityUtils.parseKafkaPrincipal, with its message."""
    try:
        return KafkaPrincipal.parse(text)
    except ValueError:
        raise ValueError(
            f"expected a string in format principalType:principalName but got {text}"
        ) from None


# --------------------------------------------------------------------------------------------
# The cache


_TypeKey = tuple[AccessControlEntry, ResourceType, PatternType]


@dataclass(slots=True)
class AclCache:
    """Every resource pattern's ACLs (no empty sets), and the names per (entry, resource
    type, pattern type) for `authorize_by_resource_type`."""

    acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = field(default_factory=dict)
    by_type: dict[_TypeKey, set[str]] = field(default_factory=dict)

    def get(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self.acls.get(pattern, frozenset())

    def update(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the ACLs of `pattern` (none: the pattern goes)."""
        new = frozenset(entries)
        old = self.acls.get(pattern, frozenset())
        for ace in new - old:
            self.by_type.setdefault((ace, pattern.resource_type, pattern.pattern_type), set()).add(
                pattern.name
            )
        for ace in old - new:
            key = (ace, pattern.resource_type, pattern.pattern_type)
            names = self.by_type.get(key)
            if names is not None:
                names.discard(pattern.name)
                if not names:
                    del self.by_type[key]
        if new:
            self.acls[pattern] = new
        else:
            self.acls.pop(pattern, None)

    def clear(self) -> None:
        self.acls.clear()
        self.by_type.clear()

    def bindings(self) -> Iterator[AclBinding]:
        for pattern, entries in self.acls.items():
            for entry in entries:
                yield AclBinding(pattern, entry)

    def matching_acls(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """Every ACL that applies to the resource: LITERAL on the name and on `*`, PREFIXED on
        each prefix of the name."""
        out: list[AccessControlEntry] = []
        out.extend(self.get(ResourcePattern(resource_type, name, PatternType.LITERAL)))
        if name != WILDCARD_RESOURCE:
            out.extend(self.get(ResourcePattern(resource_type, WILDCARD_RESOURCE)))
        for end in range(1, len(name) + 1):
            out.extend(self.get(ResourcePattern(resource_type, name[:end], PatternType.PREFIXED)))
        return out


# --------------------------------------------------------------------------------------------
# Authorization


def _applies(
    ace: AccessControlEntry, principal: str, host: str, permission: AclPermissionType
) -> bool:
    return (
        ace.permission_type == permission
        and ace.principal in (principal, WILDCARD_PRINCIPAL)
        and ace.host in (host, WILDCARD_HOST)
    )


@dataclass(frozen=True, slots=True)
class Decision:
    """What `authorize` decided and why (for the authorizer's log)."""

    allowed: bool
    reason: str  # "super user", "no acls", "deny", "allow", "no allow"
    acl: AccessControlEntry | None = None


def _names(
    cache: AclCache,
    principal: str,
    host: str,
    op: AclOperation,
    permission: AclPermissionType,
    resource_type: ResourceType,
    pattern_type: PatternType,
) -> list[set[str]]:
    """Kafka's matchingResources: the name sets of every (principal or `User:*`, host or `*`,
    op or ALL) entry with that permission on patterns of that type."""
    out: list[set[str]] = []
    for p in {principal, WILDCARD_PRINCIPAL}:
        for h in {host, WILDCARD_HOST}:
            for o in {op, AclOperation.ALL}:
                key = (AccessControlEntry(p, h, o, permission), resource_type, pattern_type)
                names = cache.by_type.get(key)
                if names:
                    out.append(names)
    return out


def _dominant_prefixed_deny(name: str, deny_prefixes: list[set[str]]) -> bool:
    return any(name[:end] in s for end in range(1, len(name) + 1) for s in deny_prefixes)


@dataclass(frozen=True, slots=True)
class AclPolicy:
    """The ACLs and the settings that decide with them: `super.users` and
    `allow.everyone.if.no.acl.found`."""

    cache: AclCache
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> Decision:
        """Kafka's AclAuthorizer.authorizeAction for one literal resource."""
        if principal in self.super_users:
            return Decision(True, "super user")
        acls = self.cache.matching_acls(resource_type, name)
        if not acls:
            return Decision(self.allow_everyone_if_no_acl_found, "no acls")
        for ace in acls:
            if _applies(ace, principal, host, AclPermissionType.DENY) and ace.operation in (
                operation,
                AclOperation.ALL,
            ):
                return Decision(False, "deny", ace)
        allowing = allowing_operations(operation)
        for ace in acls:
            allows = _applies(ace, principal, host, AclPermissionType.ALLOW)
            if allows and ace.operation in allowing:
                return Decision(True, "allow", ace)
        return Decision(False, "no allow")

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's AclAuthorizer.authorizeByResourceType (KIP-679): is some ALLOW of `operation`
        (or ALL) for the principal and host, on a resource of this type, not wholly shadowed by
        DENYs? A literal DENY on `*` denies; `allow.everyone.if.no.acl.found` allows otherwise."""
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"Must specify a concrete operation, got {operation.name}")
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"Must specify a concrete resource type, got {resource_type.name}")
        if principal in self.super_users:
            return True
        deny, allow = AclPermissionType.DENY, AclPermissionType.ALLOW
        lit, pre = PatternType.LITERAL, PatternType.PREFIXED

        def names(permission: AclPermissionType, pattern_type: PatternType) -> list[set[str]]:
            return _names(
                self.cache, principal, host, operation, permission, resource_type, pattern_type
            )

        deny_literals = names(deny, lit)
        if any(WILDCARD_RESOURCE in s for s in deny_literals):
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = names(deny, pre)
        allow_literals = names(allow, lit)
        allow_prefixes = names(allow, pre)
        if not deny_literals and not deny_prefixes:
            return bool(allow_literals or allow_prefixes)
        if any(
            not _dominant_prefixed_deny(prefix, deny_prefixes)
            for s in allow_prefixes
            for prefix in s
        ):
            return True
        for s in allow_literals:
            for literal in s:
                if literal == WILDCARD_RESOURCE:
                    return True
                if not any(literal in d for d in deny_literals) and not _dominant_prefixed_deny(
                    literal, deny_prefixes
                ):
                    return True
        return False


# --------------------------------------------------------------------------------------------
# Filters


def pattern_matches(f: AclBindingFilter, pattern: ResourcePattern) -> bool:
    """Kafka's ResourcePatternFilter.matches: ANY fields match anything; MATCH selects every
    pattern that applies to the literal name (itself, `*`, its prefixes)."""
    if f.resource_type != ResourceType.ANY and f.resource_type != pattern.resource_type:
        return False
    if f.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
        return False
    if f.name is None:
        return True
    if f.pattern_type in (PatternType.ANY, pattern.pattern_type):
        return f.name == pattern.name
    if pattern.pattern_type == PatternType.LITERAL:  # MATCH
        return f.name == pattern.name or pattern.name == WILDCARD_RESOURCE
    return f.name.startswith(pattern.name)  # MATCH on a PREFIXED pattern


def entry_matches(f: AclBindingFilter, entry: AccessControlEntry) -> bool:
    """Kafka's AccessControlEntryFilter.matches (exact principal and host; no wildcards)."""
    return (
        (f.principal is None or f.principal == entry.principal)
        and (f.host is None or f.host == entry.host)
        and f.operation in (AclOperation.ANY, entry.operation)
        and f.permission_type in (AclPermissionType.ANY, entry.permission_type)
    )


def filter_matches(f: AclBindingFilter, binding: AclBinding) -> bool:
    return pattern_matches(f, binding.pattern) and entry_matches(f, binding.entry)


def exact_patterns(f: AclBindingFilter) -> list[ResourcePattern]:
    """The patterns a filter names outright (a concrete type and name, LITERAL, PREFIXED or
    ANY), which DeleteAcls reads from the store even when the cache does not hold them yet
    (Kafka's filterToResources for filters matching at most one pattern)."""
    if f.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or f.name is None:
        return []
    if f.pattern_type in SPECIFIC_PATTERN_TYPES:
        return [ResourcePattern(f.resource_type, f.name, f.pattern_type)]
    return []


def _has_unknown(
    resource_type: ResourceType,
    pattern_type: PatternType,
    operation: AclOperation,
    permission_type: AclPermissionType,
) -> bool:
    """Whether an element is UNKNOWN (a code this broker does not know)."""
    return (
        resource_type == ResourceType.UNKNOWN
        or pattern_type == PatternType.UNKNOWN
        or operation == AclOperation.UNKNOWN
        or permission_type == AclPermissionType.UNKNOWN
    )


def filter_error(f: AclBindingFilter) -> str | None:
    """Why a Describe/DeleteAcls filter is refused (UNKNOWN elements), else None."""
    if _has_unknown(f.resource_type, f.pattern_type, f.operation, f.permission_type):
        return "Filter contain UNKNOWN elements"
    return None


# --------------------------------------------------------------------------------------------
# Validation of new bindings


def binding_error(binding: AclBinding) -> str | None:
    """Why CreateAcls refuses `binding` (INVALID_REQUEST), in Kafka's words, else None: what
    CreateAclsRequest, AclApis and the authorizer each check."""
    p, e = binding.pattern, binding.entry
    if p.resource_type == ResourceType.ANY:
        return "resourceType must not be ANY"
    if p.pattern_type in (PatternType.MATCH, PatternType.ANY):
        return f"patternType must not be {p.pattern_type.name}"
    if e.operation == AclOperation.ANY:
        return "operation must not be ANY"
    if e.permission_type == AclPermissionType.ANY:
        return "permissionType must not be ANY"
    if _has_unknown(p.resource_type, p.pattern_type, e.operation, e.permission_type):
        return "Creations contain unknown elements"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not p.name:
        return "Invalid empty resource name"
    if p.pattern_type == PatternType.PREFIXED and p.name == WILDCARD_RESOURCE:
        return "A wildcard resource name cannot be PREFIXED (use a LITERAL `*`)"
    try:
        parse_principal(e.principal)
    except ValueError as exc:
        return str(exc)
    if "/" in p.name or "\x00" in p.name or p.name in (".", ".."):
        # AclAuthorizer.validateAclBinding: the name is a ZooKeeper path segment.
        return "Failed to create ACL"
    return None
