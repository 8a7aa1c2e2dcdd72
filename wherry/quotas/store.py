"""Client quotas in the metadata store, as Kafka keeps them in ZooKeeper (ZkAdminManager's
quota paths, AdminZkClient).

    /config/users/<user>                       user quotas (next to its SCRAM credentials)
    /config/users/<user>/clients/<client-id>   a user's client's quotas
    /config/clients/<client-id>                client-id quotas

Names are sanitized (URL-encoded, `paths.sanitize`); `<default>` names the default entity.
Each node holds `{"version":1,"config":{...}}`; quota values are strings of numbers, and the
other keys of a user's node (its SCRAM credentials) are kept as they are. Every change is
followed by a `/config/changes` notification (`users/<u>`, `users/<u>/clients/<c>` or
`clients/<c>`), on which every broker reloads that entity.

`alter_client_quotas` and `describe_client_quotas` carry Kafka's checks and messages for the
AlterClientQuotas / DescribeClientQuotas handlers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.coordination import config_nodes, paths
from wherry.coordination.store import (
    MetadataStore,
    NoNodeError,
)
from wherry.quotas.entities import DEFAULT, Name, QuotaEntity

log = logging.getLogger(__name__)

USER = "user"  # Kafka's ClientQuotaEntity.USER / CLIENT_ID / IP
CLIENT_ID = "client-id"
IP = "ip"
# The quota keys of users and client ids, and whether each is a whole number (Kafka's LONG).
QUOTA_KEYS: dict[str, bool] = {
    "producer_byte_rate": True,
    "consumer_byte_rate": True,
    "request_percentage": False,
    "controller_mutation_rate": False,
}
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


class QuotaRequestError(Exception):
    """A request Kafka refuses: its error code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --------------------------------------------------------------------------------------------
# Layout


def _node_name(name: Name) -> str:
    return paths.DEFAULT_ENTITY if name is DEFAULT else paths.sanitize(str(name))


def _entity_name(node: str) -> Name:
    return DEFAULT if node == paths.DEFAULT_ENTITY else paths.desanitize(node)


def entity_path(entity: QuotaEntity) -> str:
    """The notification's `entity_path` of an entity: `users/<u>[/clients/<c>]` or
    `clients/<c>`."""
    if entity.user is not None:
        base = f"users/{_node_name(entity.user)}"
        if entity.client_id is not None:
            return f"{base}/clients/{_node_name(entity.client_id)}"
        return base
    assert entity.client_id is not None
    return f"clients/{_node_name(entity.client_id)}"


def node_path(entity: QuotaEntity) -> str:
    return f"{paths.CONFIG}/{entity_path(entity)}"


def entity_of_path(entity_path_: str) -> QuotaEntity | None:
    """The entity a notification's `entity_path` names; None for other entities."""
    parts = entity_path_.split("/")
    if any(not p for p in parts):
        return None
    if len(parts) == 2 and parts[0] == "users":
        return QuotaEntity(_entity_name(parts[1]), None)
    if len(parts) == 2 and parts[0] == "clients":
        return QuotaEntity(None, _entity_name(parts[1]))
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return QuotaEntity(_entity_name(parts[1]), _entity_name(parts[3]))
    return None


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of a stored config as numbers (others, and unreadable values, left
    out)."""
    out: dict[str, float] = {}
    for key, value in config.items():
        if key in QUOTA_KEYS:
            try:
                out[key] = float(value)
            except ValueError:
                log.warning("ignoring the unreadable quota %s=%r", key, value)
    return out


async def read_entity_config(
    store: MetadataStore, entity: QuotaEntity
) -> tuple[dict[str, str], int | None]:
    """An entity's stored config and its node version (None: no node)."""
    return await config_nodes.read_config(store, node_path(entity), entity_path(entity))


async def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return sorted(await store.get_children(path))
    except NoNodeError:
        return []


async def all_entities(store: MetadataStore) -> list[QuotaEntity]:
    """Every user, client id and user's client id that has a node."""
    out: list[QuotaEntity] = []
    for user in await _children(store, paths.CONFIG_USERS):
        out.append(QuotaEntity(_entity_name(user), None))
        for client in await _children(store, f"{paths.CONFIG_USERS}/{user}/clients"):
            out.append(QuotaEntity(_entity_name(user), _entity_name(client)))
    for client in await _children(store, paths.CONFIG_CLIENTS):
        out.append(QuotaEntity(None, _entity_name(client)))
    return out


async def load_all_quotas(store: MetadataStore) -> dict[QuotaEntity, dict[str, float]]:
    """The quotas of every entity that has some (broker start-up)."""
    out: dict[QuotaEntity, dict[str, float]] = {}
    for entity in await all_entities(store):
        config, _ = await read_entity_config(store, entity)
        values = quota_values(config)
        if values:
            out[entity] = values
    return out


async def write_entity_config(
    store: MetadataStore, entity: QuotaEntity, mutate: Callable[[dict[str, str]], None]
) -> None:
    """Read-modify-write of an entity's config, then the change notification."""
    await config_nodes.update_config(store, node_path(entity), entity_path(entity), mutate)


# --------------------------------------------------------------------------------------------
# Alter


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float
    remove: bool


@dataclass(frozen=True, slots=True)
class AlterEntry:
    """One entity of an AlterClientQuotas request: (entity type, name or None for the
    default) pairs, and its ops."""

    components: tuple[tuple[str, str | None], ...]
    ops: tuple[QuotaOp, ...]


@dataclass(frozen=True, slots=True)
class AlterResult:
    components: tuple[tuple[str, str | None], ...]
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


def _invalid(message: str) -> QuotaRequestError:
    return QuotaRequestError(ErrorCode.invalid_request, message)


def parse_entity(components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """An AlterClientQuotas entity, with Kafka's checks (the last of a repeated type counts,
    as in Kafka's map of them)."""
    by_type: dict[str, str | None] = {}
    for entity_type, name in components:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise _invalid(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise _invalid(f"Empty {entity_type} not supported")
        by_type[entity_type] = name
    if not by_type:
        raise _invalid("Invalid empty client quota entity")
    if IP in by_type:
        if len(by_type) > 1:
            raise _invalid("Invalid quota entity combination, IP entity should not be used "
                           "with user/client ID entity.")
        raise QuotaRequestError(ErrorCode.unsupported_version,
                                "IP connection-rate quotas are not supported")

    def name_of(t: str) -> Name | None:
        if t not in by_type:
            return None
        n = by_type[t]
        return DEFAULT if n is None else n

    return QuotaEntity(name_of(USER), name_of(CLIENT_ID))


def _apply_ops(config: dict[str, str], ops: Sequence[QuotaOp]) -> None:
    for op in ops:
        if op.remove:
            config.pop(op.key, None)
            continue
        whole = QUOTA_KEYS.get(op.key)
        if whole is None:
            raise _invalid(f"Invalid configuration key {op.key}")
        if whole:
            as_int = int(op.value + 1e-6)
            if abs(as_int - op.value) > 1e-6:
                raise _invalid(f"Configuration {op.key} must be a Long value")
            config[op.key] = str(as_int)
        else:
            config[op.key] = repr(float(op.value))


async def alter_client_quotas(
    store: MetadataStore, entries: Sequence[AlterEntry], validate_only: bool
) -> list[AlterResult]:
    """Kafka's AlterClientQuotas: each entry on its own, all its ops or none; INVALID_REQUEST
    for a bad entity, an unknown key or a fraction where a whole number is due."""
    results: list[AlterResult] = []
    for entry in entries:
        try:
            entity = parse_entity(entry.components)
            probe: dict[str, str] = {}
            _apply_ops(probe, entry.ops)  # checks every op before anything is written
            if not validate_only:
                mutate = functools.partial(_apply_ops, ops=entry.ops)
                await write_entity_config(store, entity, mutate)
        except QuotaRequestError as e:
            results.append(AlterResult(entry.components, e.code, e.message))
            continue
        results.append(AlterResult(entry.components))
    return results


# --------------------------------------------------------------------------------------------
# Describe


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


def _check_filter(
    components: Sequence[FilterComponent],
) -> tuple[FilterComponent | None, FilterComponent | None]:
    user: FilterComponent | None = None
    client: FilterComponent | None = None
    ip: FilterComponent | None = None
    for c in components:
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise _invalid(f"Unexpected match type: {c.match_type}")
        if c.match_type == MATCH_EXACT and c.match is None:
            raise _invalid(f"Missing match for entity type {c.entity_type}")
        if c.entity_type == USER:
            if user is not None:
                raise _invalid("Duplicate user filter component entity type")
            user = c
        elif c.entity_type == CLIENT_ID:
            if client is not None:
                raise _invalid("Duplicate client filter component entity type")
            client = c
        elif c.entity_type == IP:
            if ip is not None:
                raise _invalid("Duplicate ip filter component entity type")
            ip = c
        elif c.entity_type == "":
            raise _invalid("Unexpected empty filter component entity type")
        else:
            raise QuotaRequestError(ErrorCode.unsupported_version,
                                    f"Custom entity type '{c.entity_type}' not supported")
    if ip is not None and (user is not None or client is not None):
        raise _invalid("Invalid entity filter component combination, IP filter component "
                       "should not be used with user or clientId filter component.")
    return user, client


def _matches(component: FilterComponent | None, name: Name | None, strict: bool) -> bool:
    if component is None:
        return name is None or not strict
    if component.match_type == MATCH_ANY:
        return name is not None
    if component.match_type == MATCH_DEFAULT:
        return name is DEFAULT
    return name is not None and name is not DEFAULT and name == component.match


async def describe_client_quotas(
    store: MetadataStore, components: Sequence[FilterComponent], strict: bool
) -> dict[QuotaEntity, dict[str, float]]:
    """Kafka's DescribeClientQuotas: the quotas of every entity the filter matches (a
    component per entity type: an exact name, the default, or any; with `strict`, entities
    naming a type the filter does not are left out). Raises QuotaRequestError."""
    user_c, client_c = _check_filter(components)
    if any(c.entity_type == IP for c in components):
        return {}  # IP quotas: none are kept
    out: dict[QuotaEntity, dict[str, float]] = {}
    for entity in await all_entities(store):
        if not (_matches(user_c, entity.user, strict)
                and _matches(client_c, entity.client_id, strict)):
            continue
        config, _ = await read_entity_config(store, entity)
        values = quota_values(config)
        if values:
            out[entity] = values
    return out


def entity_components(entity: QuotaEntity) -> list[tuple[str, str | None]]:
    """An entity as (entity type, name or None for the default) pairs, user first."""
    out: list[tuple[str, str | None]] = []
    if entity.user is not None:
        out.append((USER, None if entity.user is DEFAULT else str(entity.user)))
    if entity.client_id is not None:
        out.append((CLIENT_ID, None if entity.client_id is DEFAULT else str(entity.client_id)))
    return out
