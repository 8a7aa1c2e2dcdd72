"""Creating a coordinator's internal topic on first use (`__consumer_offsets` for groups,
`__transaction_state` for transactions, `__share_group_state` for share-partition states), as
Kafka's FindCoordinator does: one creation at a time, in the background, and nothing if the
topic exists; meanwhile clients are told COORDINATOR_NOT_AVAILABLE and retry. A coordinator
places its keys on the topic's actual partition count once it exists
(`adopt_stored_partition_count`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from kio.schema.errors import ErrorCode

from wherry.coordination import paths
from wherry.coordination.store import MetadataStore, NoNodeError
from wherry.replication.metadata_cache import MetadataCache
from wherry.server.admin import AdminError, AdminManager

log = logging.getLogger(__name__)


async def stored_partition_count(store: MetadataStore, topic: str) -> int | None:
    """How many partitions the stored assignment of `topic` has (None: no such topic)."""
    try:
        data, _ = await store.get(paths.topic_path(topic))
    except NoNodeError:
        return None
    return len(paths.TopicAssignment.from_json(data).partitions)


class PlacesKeys(Protocol):
    """A coordinator placing its keys on `partition_count` partitions of its topic."""

    partition_count: int


async def adopt_stored_partition_count(
    store: MetadataStore, topic: str, coordinator: PlacesKeys, setting: str, prefix: str
) -> None:
    """As Kafka: once `topic` exists, `coordinator` places its keys on its actual partition
    count, whatever `setting` (the configured count) says; a difference is logged."""
    count = await stored_partition_count(store, topic)
    if count is None:
        return
    if count != coordinator.partition_count:
        log.info(
            "%s %s has %d partitions (%s is %d)",
            prefix,
            topic,
            count,
            setting,
            coordinator.partition_count,
        )
    coordinator.partition_count = count


class InternalTopic:
    def __init__(
        self,
        name: str,
        cache: MetadataCache,
        admin: Callable[[], AdminManager],
        *,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        prefix: str,
    ) -> None:
        self.name = name
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.configs = dict(configs)
        self._cache = cache
        self._admin = admin
        self._prefix = prefix
        self._task: asyncio.Task[None] | None = None

    def ensure(self) -> None:
        """Start creating the topic unless it exists or is being created."""
        if self._cache.contains_topic(self.name):
            return
        if self._task is not None and not self._task.done():
            return
        self._task = asyncio.get_running_loop().create_task(
            self._create(), name=f"create-{self.name}"
        )

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _create(self) -> None:
        try:
            await self._admin().create_topic(
                self.name,
                num_partitions=self.partitions,
                replication_factor=self.replication_factor,
                configs=self.configs,
            )
            log.info(
                "%s Created %s with %d partitions and replication factor %d",
                self._prefix,
                self.name,
                self.partitions,
                self.replication_factor,
            )
        except AdminError as e:
            if e.error_code != ErrorCode.topic_already_exists:
                log.warning(
                    "%s Could not create %s: %s (%s)",
                    self._prefix,
                    self.name,
                    e.error_code.name,
                    e.message,
                )
        except Exception as e:  # one line (e.g. the metadata store failed); retried on demand
            log.error("%s Could not create %s: %s: %s", self._prefix, self.name,
                      type(e).__name__, e, exc_info=log.isEnabledFor(logging.DEBUG))
