"""SCRAM credentials in the metadata store, as Kafka keeps them in ZooKeeper, and each broker's
cache of them (Kafka's CredentialCache).

`/config/users/<sanitized user>` holds `{"version":1,"config":{"SCRAM-SHA-256":"salt=...,
stored_key=...,server_key=...,iterations=4096", ...}}`; other keys of the user (quotas) are
kept as they are. Every change is followed by a `users/<sanitized user>` config-change
notification, on which every broker reloads that user. No password is ever stored.

`alter_scram_credentials` and `describe_scram_credentials` carry Kafka's checks and error codes
(ZkAdminManager), for the AlterUserScramCredentials / DescribeUserScramCredentials handlers and
for `wherry users --zookeeper`, which writes credentials before any broker runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from wherry.coordination import config_nodes, paths
from wherry.coordination.store import (
    MetadataStore,
    NoNodeError,
)
from wherry.security.scram import (
    MECHANISMS,
    ScramCredential,
    credential_from_salted,
    format_credential,
    mechanism_by_code,
    parse_credential,
)

log = logging.getLogger(__name__)

USER_ENTITY_PREFIX = "users/"
MAX_ITERATIONS = 16384


# --------------------------------------------------------------------------------------------
# The cache


class ScramCredentialCache:
    """Every user's SCRAM credentials per mechanism, as this broker last read them."""

    def __init__(self) -> None:
        self._by_mechanism: dict[str, dict[str, ScramCredential]] = {m: {} for m in MECHANISMS}

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._by_mechanism.get(mechanism, {}).get(user)

    def lookup(self, mechanism: str) -> Callable[[str], ScramCredential | None]:
        """A user → credential function for one mechanism (what `ScramServer` takes)."""
        return lambda user: self.get(mechanism, user)

    def users(self) -> list[str]:
        return sorted({u for creds in self._by_mechanism.values() for u in creds})

    def update_user(self, user: str, config: dict[str, str]) -> None:
        """Replace a user's credentials by those of its stored config (none: removed)."""
        for mechanism, creds in self._by_mechanism.items():
            text = config.get(mechanism)
            cred: ScramCredential | None = None
            if text is not None:
                try:
                    cred = parse_credential(text)
                except ValueError:
                    log.warning("ignoring an invalid %s credential of user %s", mechanism, user)
            if cred is None:
                creds.pop(user, None)
            else:
                creds[user] = cred

    async def load_all(self, store: MetadataStore) -> None:
        """Read every user's credentials (broker start-up)."""
        try:
            names = await store.get_children(paths.CONFIG_USERS)
        except NoNodeError:
            names = []
        for creds in self._by_mechanism.values():
            creds.clear()
        for name in names:
            if name == paths.DEFAULT_ENTITY:
                continue
            user = paths.desanitize(name)
            config, _ = await read_user_config(store, user)
            self.update_user(user, config)

    async def reload_user(self, store: MetadataStore, user: str) -> None:
        """Read one user's credentials again (on its change notification)."""
        config, _ = await read_user_config(store, user)
        self.update_user(user, config)


def user_of_entity(entity_path: str) -> str | None:
    """The user a `users/<sanitized user>` notification is about; None for other entities
    (topics, brokers, a user's client quotas `users/<u>/clients/<c>`, the `<default>` user)."""
    if not entity_path.startswith(USER_ENTITY_PREFIX):
        return None
    name = entity_path[len(USER_ENTITY_PREFIX):]
    if not name or "/" in name or name == paths.DEFAULT_ENTITY:
        return None
    return paths.desanitize(name)


# --------------------------------------------------------------------------------------------
# Store access


async def read_user_config(store: MetadataStore, user: str) -> tuple[dict[str, str], int | None]:
    """A user's stored config and its node version (None: no node)."""
    return await config_nodes.read_config(store, paths.user_config_path(user), f"user {user}")


async def _list_users(store: MetadataStore) -> list[str]:
    try:
        names = await store.get_children(paths.CONFIG_USERS)
    except NoNodeError:
        return []
    return sorted(paths.desanitize(n) for n in names if n != paths.DEFAULT_ENTITY)


async def _write_user_config(
    store: MetadataStore, user: str, mutate: Callable[[dict[str, str]], None]
) -> None:
    """Read-modify-write of a user's config, then the change notification."""
    await config_nodes.update_config(
        store, paths.user_config_path(user), paths.user_config_entity(user), mutate
    )


# --------------------------------------------------------------------------------------------
# Describe


@dataclass(frozen=True, slots=True)
class CredentialInfo:
    mechanism: str  # SCRAM-SHA-256 / SCRAM-SHA-512
    iterations: int

    @property
    def mechanism_code(self) -> int:
        return MECHANISMS[self.mechanism].type_code


@dataclass(frozen=True, slots=True)
class DescribeResult:
    user: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    credentials: tuple[CredentialInfo, ...] = ()


def _credential_infos(config: dict[str, str]) -> tuple[CredentialInfo, ...]:
    out: list[CredentialInfo] = []
    for mechanism in MECHANISMS:  # SHA-256 then SHA-512
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            out.append(CredentialInfo(mechanism, parse_credential(text).iterations))
        except ValueError:
            log.warning("ignoring an invalid %s credential", mechanism)
    return tuple(out)


async def describe_scram_credentials(
    store: MetadataStore, users: Sequence[str] | None
) -> list[DescribeResult]:
    """Kafka's DescribeUserScramCredentials: every user with a credential when `users` is
    None or empty; else each named user once: DUPLICATE_RESOURCE if named twice, RESOURCE_NOT_FOUND
    without a credential."""
    results: list[DescribeResult] = []
    infos: tuple[CredentialInfo, ...]
    if not users:
        for user in await _list_users(store):
            config, _ = await read_user_config(store, user)
            infos = _credential_infos(config)
            if infos:
                results.append(DescribeResult(user, credentials=infos))
        return results
    counts: dict[str, int] = {}
    for user in users:
        counts[user] = counts.get(user, 0) + 1
    for user, count in counts.items():
        if count > 1:
            results.append(DescribeResult(
                user, ErrorCode.duplicate_resource,
                f"Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {user}",
            ))
            continue
        infos = ()
        if user:
            config, _ = await read_user_config(store, user)
            infos = _credential_infos(config)
        if not infos:
            results.append(DescribeResult(
                user, ErrorCode.resource_not_found,
                f"Attempt to describe a user credential that does not exist: {user}",
            ))
        else:
            results.append(DescribeResult(user, credentials=infos))
    return results


# --------------------------------------------------------------------------------------------
# Alter


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """A credential to set: the client salted the password (Hi(password, salt, iterations))."""

    user: str
    mechanism_code: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    user: str
    mechanism_code: int


@dataclass(frozen=True, slots=True)
class AlterResult:
    user: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(slots=True)
class _UserChanges:
    upsertions: list[ScramUpsertion] = field(default_factory=list)
    deletions: list[ScramDeletion] = field(default_factory=list)


def _request_error(
    user: str, code: int, iterations: int | None
) -> tuple[ErrorCode, str] | None:
    if not user:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    mech = mechanism_by_code(code)
    if mech is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if iterations is not None:
        if iterations < mech.min_iterations:
            return ErrorCode.unacceptable_credential, "Too few iterations"
        if iterations > MAX_ITERATIONS:
            return ErrorCode.unacceptable_credential, "Too many iterations"
    return None


async def alter_scram_credentials(
    store: MetadataStore,
    upsertions: Sequence[ScramUpsertion],
    deletions: Sequence[ScramDeletion],
) -> list[AlterResult]:
    """Kafka's AlterUserScramCredentials, all or nothing per user: one result per user named,
    in the order first named. UNACCEPTABLE_CREDENTIAL for an empty name or iterations outside
    [4096, 16384], UNSUPPORTED_SASL_MECHANISM for a mechanism code other than 1 or 2,
    DUPLICATE_RESOURCE for a (user, mechanism) altered twice, RESOURCE_NOT_FOUND for deleting a
    credential the user does not have."""
    order: list[str] = []
    errors: dict[str, tuple[ErrorCode, str]] = {}
    changes: dict[str, _UserChanges] = {}
    for up in upsertions:
        if up.user not in changes:
            order.append(up.user)
            changes[up.user] = _UserChanges()
        changes[up.user].upsertions.append(up)
        err = _request_error(up.user, up.mechanism_code, up.iterations)
        if err is not None:
            errors.setdefault(up.user, err)
    for de in deletions:
        if de.user not in changes:
            order.append(de.user)
            changes[de.user] = _UserChanges()
        changes[de.user].deletions.append(de)
        err = _request_error(de.user, de.mechanism_code, None)
        if err is not None:
            errors.setdefault(de.user, err)
    for user, ch in changes.items():
        if user in errors:
            continue
        codes = [u.mechanism_code for u in ch.upsertions] + [d.mechanism_code for d in ch.deletions]
        if len(codes) != len(set(codes)):
            errors[user] = (ErrorCode.duplicate_resource,
                            "A user credential cannot be altered twice in the same request")

    results: list[AlterResult] = []
    for user in order:
        if user in errors:
            code, message = errors[user]
            results.append(AlterResult(user, code, message))
            continue
        results.append(await _alter_user(store, user, changes[user]))
    return results


class _MissingCredential(Exception):
    pass


async def _alter_user(store: MetadataStore, user: str, ch: _UserChanges) -> AlterResult:
    def mutate(config: dict[str, str]) -> None:
        for de in ch.deletions:
            name = _mechanism_name(de.mechanism_code)
            if name not in config:
                raise _MissingCredential
            del config[name]
        for up in ch.upsertions:
            mech = mechanism_by_code(up.mechanism_code)
            assert mech is not None  # checked before
            cred = credential_from_salted(mech, up.salted_password, up.salt, up.iterations)
            config[mech.mechanism_name] = format_credential(cred)

    try:
        await _write_user_config(store, user, mutate)
    except _MissingCredential:
        return AlterResult(user, ErrorCode.resource_not_found,
                           "Attempt to delete a user credential that does not exist")
    return AlterResult(user)


def _mechanism_name(code: int) -> str:
    mech = mechanism_by_code(code)
    assert mech is not None
    return mech.mechanism_name
