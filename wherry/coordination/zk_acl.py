"""ZooKeeper ACLs on the broker's nodes (Kafka's `zookeeper.set.acl`) and the broker's
ZooKeeper identity.

Kafka: with `zookeeper.set.acl=true` every node the broker creates gets `ZkData.defaultAcls`:
all permissions for the creator (the broker's authenticated ZooKeeper identity) plus read for
everyone (`world:anyone`), except under the sensitive roots -- `/config/users` (SCRAM
credentials), `/config/brokers` (dynamic broker configs, passwords among them) and
`/delegation_token/tokens` -- which nobody else may even read; `/consumers` (the old
consumers' path) stays open. Nodes that already exist keep their ACLs (Kafka's
`zookeeper-security-migration` tool changes those). Without the setting nodes are open to all
(`world:anyone` ALL), as before.

The identity. Kafka logs in to ZooKeeper with SASL, configured outside the broker's
properties: a JVM-wide JAAS file (`-Djava.security.auth.login.config`, its `Client` section,
DigestLoginModule or Kerberos), which also needs ZooKeeper's server-side SASL set up
(`authProvider.sasl`, a server JAAS file). wherry has no JVM-wide JAAS file, so the identity
is two broker properties that use ZooKeeper's built-in `digest` scheme instead (`addauth
digest user:password`), which every ZooKeeper server accepts without server-side settings:

* `zookeeper.set.acl` (Kafka's name and default, false): create nodes with the ACLs above;
* `zookeeper.digest.username` / `zookeeper.digest.password` (wherry's): the identity the
  session authenticates as (on every reconnect too) and that owns the nodes. The creator's
  ACL names it explicitly (`digest:user:base64(sha1(user:password))`, what ZooKeeper's
  `auth` scheme would expand it to), so the brokers of a cluster, sharing the identity, can
  change each other's nodes, as Kafka's brokers sharing one principal do.

`zookeeper.set.acl=true` without the identity refuses to start, as Kafka refuses it without a
JAAS `Client` section; the identity alone authenticates without setting ACLs (Kafka's
SASL-without-ACLs). Pure: no I/O here; `zookeeper.py` applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING

from wherry.common.record import frozen_record

if TYPE_CHECKING:
    from kazoo.security import ACL

__all__ = [
    "SENSITIVE_ROOT_PATHS",
    "ZkAclConfigError",
    "ZkSecurity",
    "sensitive_path",
    "zk_security_from_props",
]

SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token/tokens")
"""Kafka's ZkData.SensitiveRootPaths: nodes nobody but the broker identity may read."""

OPEN_PATHS = ("/consumers",)
"""Kafka leaves the old consumers' path open (consumers write under it)."""

SET_ACL_KEY = "zookeeper.set.acl"
USERNAME_KEY = "zookeeper.digest.username"
PASSWORD_KEY = "zookeeper.digest.password"


class ZkAclConfigError(ValueError):
    """A ZooKeeper security setting the broker cannot start with; the message names the key."""


def sensitive_path(path: str) -> bool:
    """Whether `path` (relative to the chroot) is or lies under a sensitive root. Kafka
    compares with `startsWith`; here on path boundaries (`/config/usersX` is not under it)."""
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOT_PATHS)


@frozen_record(slots=True)
class ZkSecurity:
    """The broker's ZooKeeper identity and whether its nodes get ACLs."""

    username: str
    password: str = field(repr=False)
    set_acl: bool = False

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's `auth_data`: sent as `addauth digest user:password` on every connect."""
        return [("digest", f"{self.username}:{self.password}")]

    def acls(self, path: str) -> list[ACL]:
        """The ACLs of a node created at `path` (relative to the chroot)."""
        from kazoo.security import OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, make_digest_acl

        if not self.set_acl or path in OPEN_PATHS:
            return list(OPEN_ACL_UNSAFE)
        owner = [make_digest_acl(self.username, self.password, all=True)]
        return owner if sensitive_path(path) else owner + list(READ_ACL_UNSAFE)


def _bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise ZkAclConfigError(
            f"Invalid value {value} for configuration {key}: Expected value to be either true "
            "or false"
        )
    return v == "true"


def zk_security_from_props(props: Mapping[str, str]) -> ZkSecurity | None:
    """The ZooKeeper security settings of a broker's properties; None when it uses none."""
    set_acl = _bool(SET_ACL_KEY, props.get(SET_ACL_KEY, "false"))
    username = (props.get(USERNAME_KEY) or "").strip()
    password = props.get(PASSWORD_KEY) or ""
    if bool(username) != bool(password):
        missing = PASSWORD_KEY if username else USERNAME_KEY
        raise ZkAclConfigError(
            f"{missing} is not set: {USERNAME_KEY} and {PASSWORD_KEY} go together"
        )
    if ":" in username:
        raise ZkAclConfigError(
            f"Invalid value {username} for configuration {USERNAME_KEY}: ZooKeeper's digest "
            "scheme takes user:password, so the user name cannot contain ':'"
        )
    if not username:
        if set_acl:
            raise ZkAclConfigError(
                f"{SET_ACL_KEY} is true, but the broker has no ZooKeeper identity to own its "
                f"nodes: set {USERNAME_KEY} and {PASSWORD_KEY}"
            )
        return None
    return ZkSecurity(username, password, set_acl)
