"""ACLs in the metadata store, in Kafka's ZooKeeper layout (kafka.zk.ZkAclStore and friends).

* LITERAL patterns: `/kafka-acl/<Type>/<name>` (`/kafka-acl/Topic/orders`); PREFIXED ones:
  `/kafka-acl-extended/prefixed/<Type>/<name>`. The type is Kafka's resource type name
  (`Topic`, `Group`, `Cluster`, `TransactionalId`, ...). A node holds Kafka's AclEntry JSON,
  `{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}`, and goes when its last ACL does.
* Change notifications, sequential nodes `acl_changes_<seq>`: literal patterns under
  `/kafka-acl-changes` holding `TOPIC:orders` (the Java enum name, as Kafka 3.x writes it; any
  case is read), other patterns under `/kafka-acl-extended-changes` holding
  `{"version":1,"resourceType":"TOPIC","name":"orders","patternType":"PREFIXED"}`.
* Updates are conditional writes on the node's version, re-read and retried on a conflict
  (Kafka's updateResourceAcls); `AclChangeListener` follows a notification path like Kafka's
  ZkNodeChangeNotificationListener and deletes notifications older than 15 minutes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from wherry.coordination.change_notifications import (
    NOTIFICATION_EXPIRATION_MS,
    ChangeNotificationListener,
)
from wherry.coordination.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from wherry.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

log = logging.getLogger(__name__)

LITERAL_ACLS = "/kafka-acl"
EXTENDED_ACLS = "/kafka-acl-extended"
PREFIXED_ACLS = f"{EXTENDED_ACLS}/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_PATHS = (LITERAL_CHANGES, EXTENDED_CHANGES)
MAX_UPDATE_RETRIES = 10
RETRY_BACKOFF_MS = (100, 50)  # Kafka's retryBackoffMs and its jitter
ACL_VERSION = 1

STORED_TYPES = tuple(t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY))
ROOTS: dict[PatternType, str] = {
    PatternType.LITERAL: LITERAL_ACLS,
    PatternType.PREFIXED: PREFIXED_ACLS,
}


# --------------------------------------------------------------------------------------------
# Names and formats


def _squash(text: str) -> str:
    return text.replace("_", "").upper()


def resource_type_named(text: str) -> ResourceType:
    """`Topic`, `TOPIC`, `TransactionalId`, `TRANSACTIONAL_ID` → the type (ValueError else)."""
    for t in ResourceType:
        if _squash(text) == _squash(t.name):
            return t
    raise ValueError(f"Unknown resource type {text!r}")


def operation_named(text: str) -> AclOperation:
    """`Read`, `READ`, `ClusterAction`, `CLUSTER_ACTION`, ... (Kafka's SecurityUtils.operation)."""
    for op in AclOperation:
        if _squash(text) == _squash(op.name):
            return op
    raise ValueError(f"Unknown operation {text!r}")


def permission_named(text: str) -> AclPermissionType:
    for p in AclPermissionType:
        if text.upper() == p.name:
            return p
    raise ValueError(f"Unknown permission type {text!r}")


def pattern_type_named(text: str) -> PatternType:
    for p in PatternType:
        if text.upper() == p.name:
            return p
    raise ValueError(f"Unknown pattern type {text!r}")


def type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    return f"{ROOTS[pattern_type]}/{resource_type.kafka_name}"


def resource_path(pattern: ResourcePattern) -> str:
    """`/kafka-acl/Topic/orders`, `/kafka-acl-extended/prefixed/Group/app-`."""
    if pattern.pattern_type not in ROOTS:
        raise ValueError(f"Invalid pattern type: {pattern.pattern_type.name}")
    return f"{type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """Kafka's AclEntry JSON for a resource node."""
    acls = [
        {
            "principal": e.principal,
            "permissionType": e.permission_type.kafka_name,
            "operation": e.operation.kafka_name,
            "host": e.host,
        }
        for e in sorted(entries, key=_entry_order)
    ]
    return json.dumps({"version": ACL_VERSION, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes) -> frozenset[AccessControlEntry]:
    if not data:
        return frozenset()
    doc = json.loads(data)
    return frozenset(
        AccessControlEntry(
            str(a["principal"]),
            str(a["host"]),
            operation_named(str(a["operation"])),
            permission_named(str(a["permissionType"])),
        )
        for a in doc.get("acls", [])
    )


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """The notification path and data for a change of `pattern`'s ACLs."""
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pattern.resource_type.name}:{pattern.name}".encode()
    doc = {
        "version": 1,
        "resourceType": pattern.resource_type.name,
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
    }
    return EXTENDED_CHANGES, json.dumps(doc, separators=(",", ":")).encode()


def decode_change(path: str, data: bytes) -> ResourcePattern:
    """The pattern a notification under `path` names; ValueError for unreadable data."""
    text = data.decode()
    if path == LITERAL_CHANGES:
        rtype, sep, name = text.partition(":")
        if not sep:
            raise ValueError(
                f"expected a string in format ResourceType:ResourceName but got {text}"
            )
        return ResourcePattern(resource_type_named(rtype), name, PatternType.LITERAL)
    doc = json.loads(text)
    if int(doc.get("version", 1)) > 1:
        raise ValueError(f"Acl change event received for unsupported version: {doc['version']}")
    return ResourcePattern(
        resource_type_named(str(doc["resourceType"])),
        str(doc["name"]),
        pattern_type_named(str(doc["patternType"])),
    )


def _entry_order(e: AccessControlEntry) -> tuple[str, str, int, int]:
    return (e.principal, e.host, int(e.operation), int(e.permission_type))


# --------------------------------------------------------------------------------------------
# Reads and conditional updates


@dataclass(frozen=True, slots=True)
class VersionedAcls:
    entries: frozenset[AccessControlEntry]
    version: int  # the node's data version; -1: no node

    @property
    def exists(self) -> bool:
        return self.version >= 0


NO_ACLS = VersionedAcls(frozenset(), -1)


class AclUpdateError(Exception):
    """The ACLs of a resource could not be written within the retries."""


class AclStore:
    """The ACL nodes and change notifications on one store session."""

    def __init__(
        self,
        store: MetadataStore,
        *,
        max_retries: int = MAX_UPDATE_RETRIES,
        retry_backoff_ms: tuple[int, int] = RETRY_BACKOFF_MS,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.max_retries = max_retries
        self.retry_backoff_ms = retry_backoff_ms
        self._rng = rng or random.Random()

    async def ensure_paths(self) -> None:
        """Kafka's createAclPaths: the roots, a node per resource type, the change paths."""
        paths = [type_path(pt, t) for pt in ROOTS for t in STORED_TYPES]
        for path in (*paths, *CHANGE_PATHS):
            if await self.store.exists(path) is None:
                try:
                    await self.store.create(path, make_parents=True)
                except NodeExistsError:
                    pass

    async def read(self, pattern: ResourcePattern) -> VersionedAcls:
        try:
            data, stat = await self.store.get(resource_path(pattern))
        except NoNodeError:
            return NO_ACLS
        return VersionedAcls(decode_acls(data), stat.version)

    async def load_all(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every stored pattern's ACLs (unknown type directories are skipped, as Kafka does)."""
        out: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        for pattern_type, root in ROOTS.items():
            try:
                type_names = await self.store.get_children(root)
            except NoNodeError:
                continue
            for type_name in type_names:
                try:
                    rtype = resource_type_named(type_name)
                except ValueError:
                    log.warning("Ignoring unknown ResourceType: %s", type_name)
                    continue
                try:
                    names = await self.store.get_children(f"{root}/{type_name}")
                except NoNodeError:
                    continue
                for name in names:
                    pattern = ResourcePattern(rtype, name, pattern_type)
                    try:
                        acls = await self.read(pattern)
                    except ValueError:
                        log.exception("Ignoring unreadable ACLs of %s", pattern)
                        continue
                    if acls.entries:
                        out[pattern] = acls.entries
        return out

    async def update(
        self,
        pattern: ResourcePattern,
        change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]],
    ) -> tuple[frozenset[AccessControlEntry], bool]:
        """Apply `change` to the stored ACLs of `pattern` with a conditional write, re-reading
        and retrying on a conflict (at most `max_retries` times); the node goes when no ACL is
        left. Returns the ACLs written and whether they differ from those read; notifies every
        broker of a change."""
        current = await self.read(pattern)
        path = resource_path(pattern)
        for attempt in range(self.max_retries + 1):
            new = change(current.entries)
            try:
                if new == current.entries:
                    break  # nothing to write (Kafka writes the same ACLs back; no matter)
                if not new:
                    try:
                        await self.store.delete(path, version=current.version)
                    except NoNodeError:
                        pass
                elif current.exists:
                    await self.store.set(path, encode_acls(new), version=current.version)
                else:
                    await self.store.create(path, encode_acls(new), make_parents=True)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                log.debug(
                    "Failed to update ACLs for %s (version %d, attempt %d); re-reading",
                    pattern,
                    current.version,
                    attempt + 1,
                )
                if attempt == self.max_retries:
                    raise AclUpdateError(
                        f"Failed to update ACLs for {pattern} after trying a maximum of "
                        f"{self.max_retries} times"
                    ) from None
                base, jitter = self.retry_backoff_ms
                await asyncio.sleep((base + self._rng.randrange(max(jitter, 1))) / 1000)
                current = await self.read(pattern)
        changed = new != current.entries
        if changed:
            log.info("Updated ACLs for %s", pattern)
            await self.notify(pattern)
        return new, changed

    async def notify(self, pattern: ResourcePattern) -> None:
        parent, data = encode_change(pattern)
        await self.store.create(f"{parent}/{CHANGE_PREFIX}", data, sequential=True,
                                make_parents=True)


# --------------------------------------------------------------------------------------------
# Change notifications


class AclChangeListener(ChangeNotificationListener):
    """Follows one ACL notification path (`coordination/change_notifications.py`) and hands
    each notification's resource pattern to `handler`."""

    def __init__(
        self,
        store: MetadataStore,
        path: str,
        handler: Callable[[ResourcePattern], Awaitable[None]],
        now_ms: Callable[[], int],
        *,
        expiration_ms: int = NOTIFICATION_EXPIRATION_MS,
    ) -> None:
        async def on_change(note: str, data: bytes) -> None:
            try:
                pattern = decode_change(path, data)
            except (ValueError, KeyError):
                log.exception("Ignoring unreadable ACL change notification %s", note)
                return
            await handler(pattern)

        super().__init__(store, path, CHANGE_PREFIX, on_change, now_ms, expiration_ms=expiration_ms)
