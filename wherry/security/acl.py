"""Kafka's ACL vocabulary with its wire codes: resource types, operations, pattern types,
permission types; resource patterns, access control entries, bindings and their filters.

The codes are Kafka's (org.apache.kafka.common.acl / resource), so they go on the wire as is.
Names print as Kafka prints them (`Topic`, `Read`, `LITERAL`, `Allow`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class _KafkaNamed(IntEnum):
    @property
    def kafka_name(self) -> str:
        """The name as Kafka writes it (its ZooKeeper paths, JSON and tools): `Topic`,
        `TransactionalId`, `Read`, `ClusterAction`, `Allow`, ..."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class ResourceType(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice" or "User:*"
    host: str  # an IP address or "*"
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls / DeleteAcls select: None (or ANY) matches anything for that field;
    pattern type MATCH selects every pattern that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY
