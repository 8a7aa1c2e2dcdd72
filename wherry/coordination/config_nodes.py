"""The config nodes of an entity (`/config/<type>/<name>`, Kafka's `{"version":1,
"config":{..}}`): read with their version, and changed by a conditional read-modify-write
followed by the change notification brokers watch. Users' SCRAM credentials and quotas share
one node per user, so both writers go through here and never lose each other's keys."""

from __future__ import annotations

import logging
from collections.abc import Callable

from wherry.coordination import paths
from wherry.coordination.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 20


async def read_config(
    store: MetadataStore, path: str, what: str
) -> tuple[dict[str, str], int | None]:
    """The config stored at `path` and its node version (None: no node). An unreadable node
    reads as empty, with a warning naming `what`."""
    try:
        data, stat = await store.get(path)
    except NoNodeError:
        return {}, None
    try:
        return paths.decode_config(data), stat.version
    except ValueError:
        log.warning("ignoring the unreadable config of %s", what)
        return {}, stat.version


async def update_config(
    store: MetadataStore, path: str, entity: str, mutate: Callable[[dict[str, str]], None]
) -> None:
    """Read-modify-write of the config at `path` (conditional on its version, retried on a
    race), then the change notification for `entity` (`users/<u>`, `clients/<c>`, ...)."""
    for _ in range(WRITE_ATTEMPTS):
        config, version = await read_config(store, path, entity)
        mutate(config)
        data = paths.encode_config(config)
        try:
            if version is None:
                await store.create(path, data, make_parents=True)
            else:
                await store.set(path, data, version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue
        await paths.notify_config_change(store, entity)
        return
    raise RuntimeError(f"{entity} config changed concurrently {WRITE_ATTEMPTS} times")
