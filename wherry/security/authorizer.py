"""What the broker asks of an authorizer (Kafka's org.apache.kafka.server.authorizer.Authorizer).

`AclAuthorizer` (`acl_authorizer.py`) implements it over ACLs kept in the metadata store. A
broker without `authorizer.class.name` has no authorizer: every request is allowed.
"""

from __future__ import annotations

from typing import Protocol

from wherry.security.acl import AclOperation, ResourceType
from wherry.security.principal import Session


class Authorizer(Protocol):
    def authorize(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """May `session` perform `operation` on the resource (type, name)? Kafka's rules:
        super users may do anything; a matching DENY wins over any ALLOW; READ, WRITE, DELETE
        and ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL matches every
        operation; with no ACL at all on the resource, `allow.everyone.if.no.acl.found`."""
        ...

    def authorize_by_resource_type(
        self, session: Session, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's authorizeByResourceType: may `session` perform `operation` on at least one
        resource of this type (used by InitProducerId without a transactional id: WRITE on any
        topic grants idempotent writes)?"""
        ...
