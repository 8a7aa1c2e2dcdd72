"""`AclAuthorizer`: Kafka's kafka.security.authorizer.AclAuthorizer over the metadata store.

Every broker holds all ACLs in memory (`AclCache`), loaded at start and kept current by the
change notifications every writer leaves (`acl_store`); `authorize` reads the cache only.
Create/DeleteAcls write through the store with conditional updates, then the cache.

Configuration (`authorizer_from_config`): `authorizer.class.name` =
`kafka.security.authorizer.AclAuthorizer` (or the old `kafka.security.auth.SimpleAclAuthorizer`),
`super.users` (`User:a;User:b`), `allow.everyone.if.no.acl.found` (false).

Decisions are logged on `wherry.authorizer` like Kafka's `kafka.authorizer.logger`: denials at
INFO, grants at DEBUG. Identical denials (same principal, host, operation and resource) are
logged once per 10 s, the next line counting those left out (`denial_log`), so a client
re-asking in a loop cannot flood the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from wherry.coordination.store import MetadataStore
from wherry.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from wherry.security.acl_rules import (
    AclCache,
    AclPolicy,
    binding_error,
    entry_matches,
    exact_patterns,
    filter_error,
    filter_matches,
    parse_super_users,
    pattern_matches,
)
from wherry.security.acl_store import (
    CHANGE_PATHS,
    RETRY_BACKOFF_MS,
    AclChangeListener,
    AclStore,
)
from wherry.security.denial_log import DenialLog
from wherry.security.principal import Session

log = logging.getLogger(__name__)
authorizer_log = logging.getLogger("wherry.authorizer")

AUTHORIZER_CLASS_NAME = "authorizer.class.name"
SUPER_USERS = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_FOUND = "allow.everyone.if.no.acl.found"
ACL_AUTHORIZER_CLASSES = frozenset(
    {"kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer"}
)

# Kafka's error codes for the results of CreateAcls / DeleteAcls.
INVALID_REQUEST = 42
UNKNOWN_SERVER_ERROR = -1


@dataclass(frozen=True, slots=True)
class AclError:
    """A failed binding or filter: Kafka's error code and message."""

    code: int
    message: str


@dataclass(slots=True)
class AclDeleteResult:
    """One DeleteAcls filter's outcome: a filter-level error, or the bindings it removed, each
    with its own error (None: deleted)."""

    error: AclError | None = None
    deleted: list[tuple[AclBinding, AclError | None]] = field(default_factory=list)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class AclAuthorizer:
    """Kafka's AclAuthorizer: the `Authorizer` protocol plus ACL management."""

    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        now_ms: Callable[[], int] = _wall_clock_ms,
        *,
        retry_backoff_ms: tuple[int, int] | None = None,
    ) -> None:
        self.policy = AclPolicy(AclCache(), frozenset(super_users), allow_everyone_if_no_acl_found)
        self.cache = self.policy.cache
        self.now_ms = now_ms
        self.denials = DenialLog(authorizer_log, now_ms)
        self._retry_backoff_ms = retry_backoff_ms
        self._store: AclStore | None = None
        self._listeners: list[AclChangeListener] = []
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"AclAuthorizer(super_users={sorted(self.super_users)})"

    @property
    def super_users(self) -> frozenset[str]:
        return self.policy.super_users

    @property
    def allow_everyone_if_no_acl_found(self) -> bool:
        return self.policy.allow_everyone_if_no_acl_found

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self, store: MetadataStore) -> None:
        """Load every ACL, then follow both change-notification paths."""
        self._store = AclStore(store, retry_backoff_ms=self._retry_backoff_ms or RETRY_BACKOFF_MS)
        await self._store.ensure_paths()
        async with self._lock:
            self.cache.clear()
            for pattern, entries in (await self._store.load_all()).items():
                self.cache.update(pattern, entries)
        self._listeners = [
            AclChangeListener(store, path, self._on_change, self.now_ms) for path in CHANGE_PATHS
        ]
        for listener in self._listeners:
            listener.start()
        log.info("ACL authorizer started with %d resource patterns", len(self.cache.acls))

    async def restart_with(self, store: MetadataStore) -> None:
        """A new store session (the old one expired): reload everything and watch again."""
        await self._stop_listeners()
        await self.start(store)

    async def stop(self) -> None:
        await self._stop_listeners()
        self._store = None

    async def _stop_listeners(self) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            await listener.stop()

    def _acl_store(self) -> AclStore:
        if self._store is None:
            raise RuntimeError("the ACL authorizer is not started")
        return self._store

    async def _on_change(self, pattern: ResourcePattern) -> None:
        store = self._acl_store()
        async with self._lock:
            acls = await store.read(pattern)
            log.info("Processing Acl change notification for %s (%d ACLs)", pattern,
                     len(acls.entries))
            self.cache.update(pattern, acls.entries)

    # --- Authorizer --------------------------------------------------------------------------
    def authorize(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        return self._decide(session, operation, resource_type, name)

    def authorize_by_resource_type(
        self, session: Session, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        return self._decide(session, operation, resource_type, None)

    def _decide(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str | None,
    ) -> bool:
        """The decision on the literal resource `name`, or on some resource of the type (None),
        audited."""
        principal, host, policy = str(session.principal), session.client_address, self.policy
        if name is None:
            allowed = policy.authorize_by_resource_type(principal, host, operation, resource_type)
            pattern, shown = "UNKNOWN", "NONE"
        else:
            allowed = policy.authorize(principal, host, operation, resource_type, name).allowed
            pattern, shown = "LITERAL", name
        self._audit(principal, host, operation, resource_type, pattern, shown, allowed)
        return allowed

    def _audit(self, principal: str, host: str, op: AclOperation, rtype: ResourceType,
               pattern_type: str, name: str, allowed: bool) -> None:
        if not allowed:
            self.denials.denied(
                (principal, host, op.kafka_name, rtype.kafka_name, pattern_type, name)
            )
        elif authorizer_log.isEnabledFor(logging.DEBUG):
            authorizer_log.debug(
                "Principal = %s is Allowed Operation = %s from host = %s on resource = %s:%s:%s",
                principal, op.kafka_name, host, rtype.kafka_name, pattern_type, name,
            )

    # --- ACL management --------------------------------------------------------------------
    def describe_acls(self, f: AclBindingFilter) -> list[AclBinding]:
        """The cached bindings `f` matches (DescribeAcls)."""
        return [b for b in self.cache.bindings() if filter_matches(f, b)]

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclError | None]:
        """CreateAcls: per binding None (created, or there already) or its error."""
        store = self._acl_store()
        results: list[AclError | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, b in enumerate(bindings):
            message = binding_error(b)
            if message is not None:
                results[i] = AclError(INVALID_REQUEST, message)
            else:
                by_pattern.setdefault(b.pattern, []).append(i)
        async with self._lock:
            for indexes in by_pattern.values():
                pattern = bindings[indexes[0]].pattern
                new = frozenset(bindings[i].entry for i in indexes)
                try:
                    acls, _ = await store.update(pattern, _adder(new))
                except Exception as e:
                    log.exception("Failed to add ACLs to %s", pattern)
                    for i in indexes:
                        results[i] = AclError(UNKNOWN_SERVER_ERROR, str(e))
                    continue
                self.cache.update(pattern, acls)
        return results

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        """DeleteAcls: per filter the bindings it removed. Patterns a filter names outright
        are read from the store even if this broker has not heard of them yet; others (ANY
        fields, MATCH) come from the cache, as in Kafka."""
        store = self._acl_store()
        results = [AclDeleteResult() for _ in filters]
        valid: list[tuple[int, AclBindingFilter]] = []
        for i, f in enumerate(filters):
            message = filter_error(f)
            if message is not None:
                results[i].error = AclError(INVALID_REQUEST, message)
            else:
                valid.append((i, f))
        async with self._lock:
            patterns = dict.fromkeys(self.cache.acls)
            for _, f in valid:
                patterns.update(dict.fromkeys(exact_patterns(f)))
            for pattern in patterns:
                matching = [(i, f) for i, f in valid if pattern_matches(f, pattern)]
                if not matching:
                    continue
                removed: dict[AclBinding, int] = {}
                drop = _remover(pattern, matching, removed)

                error: AclError | None = None
                try:
                    acls, _ = await store.update(pattern, drop)
                    self.cache.update(pattern, acls)
                except Exception as e:
                    log.exception("Failed to delete ACLs of %s", pattern)
                    error = AclError(UNKNOWN_SERVER_ERROR, str(e))
                for binding, i in removed.items():
                    results[i].deleted.append((binding, error))
        return results


Entries = frozenset[AccessControlEntry]


def _adder(new: Entries) -> Callable[[Entries], Entries]:
    return lambda current: current | new


def _remover(
    pattern: ResourcePattern,
    matching: list[tuple[int, AclBindingFilter]],
    removed: dict[AclBinding, int],
) -> Callable[[Entries], Entries]:
    """The update that drops the entries the filters match, noting each in `removed` with the
    first filter matching it (afresh on each attempt of the conditional update)."""

    def drop(current: Entries) -> Entries:
        removed.clear()
        keep: set[AccessControlEntry] = set()
        for ace in current:
            owner = next((i for i, f in matching if entry_matches(f, ace)), None)
            if owner is None:
                keep.add(ace)
            else:
                removed[AclBinding(pattern, ace)] = owner
        return frozenset(keep)

    return drop


def _parse_bool(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"Invalid value {value} for configuration {key}: Expected value to be "
                     "either true or false")


def authorizer_from_config(
    props: Mapping[str, str], now_ms: Callable[[], int] = _wall_clock_ms
) -> AclAuthorizer | None:
    """The authorizer `authorizer.class.name` names (None when unset: everything allowed);
    ValueError for a class wherry does not provide or a bad `super.users`."""
    name = (props.get(AUTHORIZER_CLASS_NAME) or "").strip()
    if not name:
        return None
    if name not in ACL_AUTHORIZER_CLASSES:
        raise ValueError(
            f"Invalid value {name} for configuration {AUTHORIZER_CLASS_NAME}: wherry provides "
            "only kafka.security.authorizer.AclAuthorizer (and the old "
            "kafka.security.auth.SimpleAclAuthorizer)"
        )
    return AclAuthorizer(
        parse_super_users(props.get(SUPER_USERS)),
        _parse_bool(ALLOW_EVERYONE_IF_NO_ACL_FOUND,
                    props.get(ALLOW_EVERYONE_IF_NO_ACL_FOUND, "false")),
        now_ms,
    )
