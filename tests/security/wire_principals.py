"""Raw Kafka requests as real authenticated principals, for the over-the-wire security tests.

`WirePrincipals` keeps one `RequestClient` per (address, user, mechanism) on an event loop of
its own, each opening its connection with the SASL handshake the broker's own outbound
connections do (`wherry.outbound`): the broker sees the user it authenticated, nothing faked.
`acl`, `create_acls` and `delete_all_acls` speak CreateAcls / DeleteAcls v3 as a super user.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from wherry.outbound.client import RequestClient
from wherry.outbound.connection import OutboundConnection
from wherry.outbound.security import PLAINTEXT, ClientSecurity
from wherry.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType

_T = TypeVar("_T")

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret" user_bob="bob-secret";'
)
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"

SECURED_OVERRIDES = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "authorizer.class.name": ACL_AUTHORIZER,
    "super.users": "User:admin",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
}
"""One SASL_PLAINTEXT listener (also the inter-broker one), PLAIN users admin/alice/bob,
SCRAM-SHA-512 enabled, the ACL authorizer with `User:admin` as the super user."""


def override_args(overrides: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in overrides.items()]


@dataclass(frozen=True)
class Login:
    user: str | None  # None: no SASL (a PLAINTEXT connection, User:ANONYMOUS)
    password: str = ""
    mechanism: str = "PLAIN"

    @classmethod
    def of(cls, user: str, mechanism: str = "PLAIN") -> Login:
        return cls(user, PASSWORDS[user], mechanism)


ANONYMOUS = Login(None)


class WirePrincipals:
    """Blocking calls for the tests' thread, every wait bounded by `timeout_s`."""

    def __init__(self, timeout_s: float = 20.0) -> None:
        self.timeout_s = timeout_s
        self.loop = asyncio.new_event_loop()
        self._clients: dict[tuple[str, Login], RequestClient] = {}

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, self.timeout_s))

    def client(self, address: str, login: Login) -> RequestClient:
        key = (address, login)
        if key not in self._clients:
            host, port = address.rsplit(":", 1)
            security = PLAINTEXT if login.user is None else ClientSecurity(
                "SASL_PLAINTEXT", None, login.mechanism, login.user, login.password
            )
            conn = OutboundConnection(
                host, int(port), connect_timeout_s=10, request_timeout_s=15, security=security
            )
            self._clients[key] = RequestClient(
                conn.connect, client_id=f"wire-{login.user or 'anonymous'}", peer=address
            )
        return self._clients[key]

    def call(self, address: str, login: Login, api_key: int, version: int, body: Any) -> Any:
        return self.run(self.client(address, login).call(api_key, version, body))

    def forget(self, address: str, login: Login) -> None:
        """Drop that connection (the next call authenticates again)."""
        c = self._clients.pop((address, login), None)
        if c is not None:
            c.close()

    def forget_address(self, address: str) -> None:
        """Drop every connection to `address` (its broker restarted)."""
        for key in [k for k in self._clients if k[0] == address]:
            self._clients.pop(key).close()

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()


# --- ACLs -----------------------------------------------------------------------------------
def acl(
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    principal: str = "User:bob",
    *,
    pattern: PatternType = PatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    host: str = "*",
) -> dict[str, Any]:
    """One CreateAcls creation."""
    return {
        "resource_type": int(resource_type),
        "resource_name": name,
        "resource_pattern_type": int(pattern),
        "principal": principal,
        "host": host,
        "operation": int(operation),
        "permission_type": int(permission),
    }


def create_acls(
    wire: WirePrincipals, address: str, creations: Iterable[dict[str, Any]],
    login: Login | None = None,
) -> None:
    creations = list(creations)
    if not creations:
        return
    resp = wire.call(address, login or Login.of("admin"), 30, 3, {"creations": creations})
    errors = [(r.error_code, r.error_message) for r in resp.results]
    assert all(code == ErrorCode.none for code, _ in errors), (creations, errors)


ANY_FILTER = {
    "resource_type_filter": int(ResourceType.ANY),
    "resource_name_filter": None,
    "pattern_type_filter": int(PatternType.ANY),
    "principal_filter": None,
    "host_filter": None,
    "operation": int(AclOperation.ANY),
    "permission_type": int(AclPermissionType.ANY),
}


def delete_acls(
    wire: WirePrincipals, address: str, login: Login | None = None, **filter_fields: Any
) -> int:
    """DeleteAcls with one filter (ANY unless narrowed); returns how many went."""
    resp = wire.call(address, login or Login.of("admin"), 31, 3,
                     {"filters": [{**ANY_FILTER, **filter_fields}]})
    [result] = resp.filter_results
    assert result.error_code == ErrorCode.none, result
    return len(result.matching_acls)


def delete_all_acls(wire: WirePrincipals, address: str) -> None:
    delete_acls(wire, address)
    assert describe_acls(wire, address) == set()


def describe_acls(
    wire: WirePrincipals, address: str, login: Login | None = None
) -> set[tuple[int, str, int, str, str, int, int]]:
    """Every ACL the broker holds: {(type, name, pattern, principal, host, op, permission)}."""
    body = {k: v for k, v in ANY_FILTER.items()}
    resp = wire.call(address, login or Login.of("admin"), 29, 3, body)
    assert resp.error_code == ErrorCode.none, resp
    return {
        (r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
         a.permission_type)
        for r in resp.resources for a in r.acls
    }


# --- what the broker logged -----------------------------------------------------------------
_BROKER_EPOCH = re.compile(r"registered at \S+ with broker epoch (\d+)")
_CONTROLLER_EPOCH = re.compile(r"elected as controller with epoch (\d+)")


def logged_broker_epoch(log: str) -> int:
    found = _BROKER_EPOCH.findall(log)
    assert found, "the broker logged no registration"
    return int(found[-1])


def logged_controller_epoch(log: str) -> int:
    found = _CONTROLLER_EPOCH.findall(log)
    assert found, "no controller election logged"
    return int(found[-1])
