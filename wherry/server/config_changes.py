"""What a broker does with the store's `/config/changes` notifications (Kafka's ZooKeeper
config-change mechanism): topic overrides reloaded and applied to their logs, dynamic broker
configs, client quotas, group configs and SCRAM credentials reloaded."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from wherry.coordination import paths
from wherry.coordination.store import NoNodeError

# What applies a change (TLS stores, limits, the cleaner...) is imported with the first one:
# a broker's start needs only `load_topic_overrides` of this module, before its bind.
if TYPE_CHECKING:
    from typing import Protocol

    from wherry.coordination.store import MetadataStore
    from wherry.log.config import LogConfig
    from wherry.log.manager import LogManager
    from wherry.security.scram_store import ScramCredentialCache
    from wherry.server.broker_configs import DynamicBrokerConfig
    from wherry.server.client_quotas import ClientQuotas
    from wherry.server.dynamic_apply import Reconfigurable
    from wherry.server.shares import ShareRuntime

    class ConfigChangeTarget(Reconfigurable, Protocol):
        """What of a broker a config change reaches."""

        @property
        def store(self) -> MetadataStore: ...
        @property
        def log_manager(self) -> LogManager: ...
        @property
        def client_quotas(self) -> ClientQuotas: ...
        @property
        def shares(self) -> ShareRuntime: ...
        @property
        def scram_credentials(self) -> ScramCredentialCache: ...
        @property
        def log_prefix(self) -> str: ...

        def topic_log_config(self, topic: str) -> LogConfig: ...
        def log_defaults(self) -> LogConfig: ...
        async def reload_topic_overrides(self, topics: list[str]) -> dict[str, str]:
            """Reload those topics' stored overrides; the first one's, as now in force."""
            ...
        def on_topic_overrides(self, topic: str, overrides: dict[str, str]) -> None:
            """The active controller's view of a topic's overrides, when this broker hosts it."""
            ...


log = logging.getLogger("wherry.server.broker")


async def load_topic_overrides(
    store: MetadataStore,
    dynamic_config: DynamicBrokerConfig,
    overrides: dict[str, dict[str, str]],
    topics: list[str] | None = None,
) -> None:
    """Read the stored overrides of `topics` (every topic's when None) into `overrides`."""
    if topics is None:
        try:
            topics = await store.get_children(paths.CONFIG_TOPICS)
        except NoNodeError:
            topics = []
    for t in topics:
        try:
            data, _ = await store.get(paths.topic_config_path(t))
            overrides[t] = paths.decode_config(data)
        except NoNodeError:
            overrides.pop(t, None)
        dynamic_config.update_topic(t, overrides.get(t))


async def apply_config_change(broker: ConfigChangeTarget, path: str, data: bytes) -> None:
    """One `/config/changes` notification."""
    prefix = broker.log_prefix
    try:
        entity = json.loads(data).get("entity_path", "")
    except ValueError:
        log.warning("%s ignoring unreadable config change %s", prefix, path)
        return
    if entity.startswith(("users/", "clients/")):  # a user's SCRAM credentials: below
        await broker.client_quotas.apply_change(broker.store, entity)
    if entity.startswith("topics/"):
        topic = entity.split("/", 1)[1]
        overrides = await broker.reload_topic_overrides([topic])
        if await broker.store.exists(paths.topic_path(topic)) is None:
            return  # deleted since (a notification found at start): nothing to apply
        broker.log_manager.update_config(topic, broker.topic_log_config(topic))
        broker.on_topic_overrides(topic, overrides)
        log.info("%s applied config change for topic %s", prefix, topic)
    elif broker.dynamic_config.applies_to(entity):
        from wherry.server.dynamic_apply import apply_dynamic

        await broker.dynamic_config.load(broker.store)
        await apply_dynamic(broker)
        # Dynamic log defaults apply at once to every topic (under its own overrides).
        lm = broker.log_manager
        lm.update_default_config(broker.log_defaults())
        for topic in sorted({tp.topic for tp in lm.topic_partitions()}):
            lm.update_config(topic, broker.topic_log_config(topic))
        log.info("%s applied dynamic broker config change (%s)", prefix, entity)
    elif entity.startswith("groups/"):
        broker.shares.on_group_config_change(paths.desanitize(entity.split("/", 1)[1]))
        log.info("%s applied config change for group %s", prefix, entity[7:])
    elif (scram_user := _scram_user_of(entity)) is not None:
        await broker.scram_credentials.reload_user(broker.store, scram_user)
        log.info("%s reloaded the SCRAM credentials of user %s", prefix, scram_user)


def _scram_user_of(entity: str) -> str | None:
    from wherry.security.scram_store import user_of_entity

    return user_of_entity(entity)
