"""Topic administration on the broker that received the request (Kafka's ZkAdminManager).

Admin requests only *write intent* into the metadata store — the topic's configs and replica
assignment, a deletion marker, a config-change notification. The controller reacts to those
nodes and pushes the result to every broker; the handler then waits until this
broker's metadata cache shows it.
"""

from __future__ import annotations

import asyncio
import random
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from wherry.controller.assignment import (
    InvalidReplicationFactor,
    MixedRackInformation,
    assign_replicas,
)
from wherry.coordination import paths
from wherry.coordination.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    WatchCallback,
)
from wherry.log.config import ConfigError, LogConfig
from wherry.replication.metadata_cache import MetadataCache
from wherry.server import broker_configs
from wherry.server.config import BrokerConfig

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH = 249
# Kafka's controller writes at most this many records for one operation (a topic record, one
# per partition, one per config); a larger CreateTopics or CreatePartitions is refused before
# anything is assigned, so no request can make the broker build millions of partitions.
MAX_RECORDS_PER_OPERATION = 10_000


def _setting(event: asyncio.Event) -> WatchCallback:
    return lambda _e: event.set()


class AdminError(Exception):
    def __init__(self, error_code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def _check_operation_size(records: int) -> None:
    if records > MAX_RECORDS_PER_OPERATION:
        raise AdminError(
            ErrorCode.policy_violation, "Unable to perform excessively large batch operation."
        )


def _storable(name: str) -> bool:
    """Whether `name` can name a node of the store (a client may send any string)."""
    try:
        paths.topic_path(name)
    except ValueError:
        return False
    return True


def validate_topic_name(name: str) -> None:
    if not name:
        raise AdminError(
            ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't be empty"
        )
    if name in (".", ".."):
        raise AdminError(ErrorCode.invalid_topic_exception, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise AdminError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is illegal, it can't be longer than "
            f"{MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}",
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        raise AdminError(
            ErrorCode.invalid_topic_exception,
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'",
        )


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    config: LogConfig


class AdminManager:
    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        cache: MetadataCache,
        rng: random.Random,
    ) -> None:
        self.config = config
        self.store = store
        self.cache = cache
        self.rng = rng

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        try:
            return self.config.log_defaults.with_props(overrides)
        except ConfigError as e:
            raise AdminError(ErrorCode.invalid_config, str(e)) from e

    async def topic_exists(self, name: str) -> bool:
        if not _storable(name):
            return False  # "", "a/b", "..": no topic can have such a name
        return await self.store.exists(paths.topic_path(name)) is not None

    async def _deleted(self, name: str, wait_ms: int) -> bool:
        """Whether no deletion of `name` is pending, waiting up to `wait_ms` for one to end
        (a topic deleted and at once created again: the name is free once the controller
        removed the old topic, which a client cannot tell from its metadata)."""
        if not _storable(name):
            return True
        marker = paths.delete_topic_path(name)
        if wait_ms <= 0:
            return await self.store.exists(marker) is None
        try:
            async with asyncio.timeout(wait_ms / 1000):
                while True:
                    changed = asyncio.Event()
                    if await self.store.exists(marker, _setting(changed)) is None:
                        return True
                    await changed.wait()
        except TimeoutError:
            return False

    async def _existing_topics(self) -> list[str]:
        try:
            return await self.store.get_children(paths.BROKER_TOPICS)
        except NoNodeError:
            return []

    # --- create ------------------------------------------------------------------------
    async def create_topic(
        self,
        name: str,
        *,
        num_partitions: int = -1,
        replication_factor: int = -1,
        assignments: Mapping[int, Sequence[int]] | None = None,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
        deletion_wait_ms: int = 0,
    ) -> CreatedTopic:
        """`deletion_wait_ms`: how long a topic of that name still being deleted is waited
        for; after it, TOPIC_ALREADY_EXISTS "is marked for deletion", as Kafka answers."""
        validate_topic_name(name)
        configs = dict(configs or {})
        if not await self._deleted(name, deletion_wait_ms):
            raise AdminError(
                ErrorCode.topic_already_exists, f"Topic '{name}' is marked for deletion."
            )
        if await self.topic_exists(name):
            raise AdminError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        collides = [
            t
            for t in await self._existing_topics()
            if t != name and t.replace(".", "_") == name.replace(".", "_")
        ]
        if collides:
            raise AdminError(
                ErrorCode.invalid_topic_exception,
                f"Topic '{name}' collides with existing topic: {collides[0]}",
            )
        log_config = self.log_config(configs)
        brokers = sorted(b.broker_id for b in self.cache.alive_brokers())
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise AdminError(
                    ErrorCode.invalid_request,
                    "Both numPartitions or replicationFactor and replicasAssignments "
                    "were set. Both cannot be used at the same time.",
                )
            _check_operation_size(1 + len(assignments) + len(configs))
            assignment = self._validate_manual(assignments, brokers, start=0)
        else:
            n = self.config.num_partitions if num_partitions == -1 else num_partitions
            _check_operation_size(1 + n + len(configs))
            rf = (
                self.config.default_replication_factor
                if replication_factor == -1
                else replication_factor
            )
            if n <= 0:
                raise AdminError(
                    ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
                )
            if rf <= 0:
                raise AdminError(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0.",
                )
            if not brokers:
                raise AdminError(ErrorCode.broker_not_available, "No live brokers")
            try:
                assignment = assign_replicas(brokers, n, rf, rng=self.rng, racks=self._racks())
            except InvalidReplicationFactor as e:
                raise AdminError(
                    ErrorCode.invalid_replication_factor,
                    f"Replication factor: {rf} larger than available brokers: {len(brokers)}.",
                ) from e
            except MixedRackInformation as e:
                raise AdminError(ErrorCode.unknown_server_error, str(e)) from e
        rf_out = len(next(iter(assignment.values())))
        topic_id = uuid.uuid4()
        if not validate_only:
            # Config first: the controller reads it when it sees the topic node.
            await self._write_config(name, configs, notify=False)
            try:
                await self.store.create(
                    paths.topic_path(name),
                    paths.TopicAssignment(topic_id, assignment).to_json(),
                    make_parents=True,
                )
            except NodeExistsError as e:
                raise AdminError(
                    ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
                ) from e
        return CreatedTopic(topic_id, len(assignment), rf_out, log_config)

    def _racks(self) -> dict[int, str | None]:
        """The live brokers' racks (`broker.rack`), for rack-aware assignment."""
        return {b.broker_id: b.rack for b in self.cache.alive_brokers()}

    def _validate_manual(
        self, assignments: Mapping[int, Sequence[int]], brokers: list[int], *, start: int
    ) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        rf: int | None = None
        for i, (p, replicas) in enumerate(sorted(assignments.items())):
            if p != start + i:
                raise AdminError(
                    ErrorCode.invalid_replica_assignment,
                    "Partitions should be a consecutive 0-based integer sequence",
                )
            reps = list(replicas)
            if not reps:
                raise AdminError(
                    ErrorCode.invalid_replica_assignment,
                    f"Replica assignment for partition {p} is empty",
                )
            if len(set(reps)) != len(reps):
                raise AdminError(
                    ErrorCode.invalid_replica_assignment,
                    f"Duplicate brokers not allowed in replica assignment: {reps}",
                )
            unknown = [b for b in reps if b not in brokers]
            if unknown:
                raise AdminError(
                    ErrorCode.broker_not_available,
                    f"Some brokers specified for partition id {p} are not "
                    f"available. Specified brokers: {reps}, available brokers: "
                    f"{brokers}.",
                )
            if rf is not None and len(reps) != rf:
                raise AdminError(
                    ErrorCode.invalid_replica_assignment,
                    "All partitions should have the same number of replicas",
                )
            rf = len(reps)
            out[p] = reps
        return out

    # --- delete ------------------------------------------------------------------------
    async def delete_topic(self, name: str) -> None:
        if not await self.topic_exists(name):
            raise AdminError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        if not self.config.delete_topic_enable:
            raise AdminError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
        try:
            await self.store.create(paths.delete_topic_path(name), b"", make_parents=True)
        except NodeExistsError:
            pass  # deletion already pending

    # --- partitions ----------------------------------------------------------------------
    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        *,
        validate_only: bool,
    ) -> int:
        """Returns the number of partitions added."""
        try:
            if not _storable(name):
                raise NoNodeError(name)
            data, stat = await self.store.get(paths.topic_path(name))
        except NoNodeError as e:
            raise AdminError(
                ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
            ) from e
        if await self.store.exists(paths.delete_topic_path(name)) is not None:
            raise AdminError(
                ErrorCode.invalid_topic_exception, f"The topic '{name}' is queued for deletion."
            )
        current = paths.TopicAssignment.from_json(data)
        existing = len(current.partitions)
        if count < existing:
            raise AdminError(
                ErrorCode.invalid_partitions,
                f"Topic currently has {existing} partitions, which is higher than "
                f"the requested {count}.",
            )
        if count == existing:
            raise AdminError(
                ErrorCode.invalid_partitions, f"Topic already has {existing} partitions."
            )
        if any(current.adding.values()) or any(current.removing.values()):
            raise AdminError(
                ErrorCode.reassignment_in_progress,
                f"A partition reassignment is in progress for the topic '{name}'.",
            )
        added = count - existing
        _check_operation_size(added)
        brokers = sorted(b.broker_id for b in self.cache.alive_brokers())
        rf = len(current.partitions[0])
        if assignments:
            if len(assignments) != added:
                raise AdminError(
                    ErrorCode.invalid_replica_assignment,
                    f"Increasing the number of partitions by {added} but "
                    f"{len(assignments)} assignments provided.",
                )
            new = self._validate_manual(
                {existing + i: list(a) for i, a in enumerate(assignments)}, brokers, start=existing
            )
            if any(len(r) != rf for r in new.values()):
                raise AdminError(
                    ErrorCode.invalid_replica_assignment,
                    f"Inconsistent replication factor between partitions, partition 0 has {rf}",
                )
        else:
            first = current.partitions[0][0]
            start = brokers.index(first) if first in brokers else -1
            try:
                new = assign_replicas(
                    brokers,
                    added,
                    rf,
                    rng=self.rng,
                    start_partition=existing,
                    fixed_start_index=start,
                    racks=self._racks(),
                )
            except InvalidReplicationFactor as e:
                raise AdminError(ErrorCode.invalid_replication_factor, str(e)) from e
            except MixedRackInformation as e:
                raise AdminError(ErrorCode.unknown_server_error, str(e)) from e
        if not validate_only:
            merged = {**current.partitions, **new}

            try:
                await self.store.set(
                    paths.topic_path(name),
                    replace(current, partitions=merged).to_json(),
                    version=stat.version,
                )
            except BadVersionError as e:
                raise AdminError(
                    ErrorCode.reassignment_in_progress, "The topic changed concurrently; retry"
                ) from e
        return added

    # --- configs -------------------------------------------------------------------------
    async def topic_overrides(self, name: str) -> dict[str, str]:
        if not _storable(name):
            return {}
        try:
            data, _ = await self.store.get(paths.topic_config_path(name))
        except NoNodeError:
            return {}
        return paths.decode_config(data)

    async def set_topic_overrides(
        self, name: str, overrides: Mapping[str, str], *, validate_only: bool
    ) -> LogConfig:
        if not await self.topic_exists(name):
            raise AdminError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        cfg = self.log_config(overrides)
        if not validate_only:
            await self._write_config(name, overrides, notify=True)
        return cfg

    async def _write_config(self, name: str, overrides: Mapping[str, str], *, notify: bool) -> None:
        await self._write_entity(
            paths.topic_config_path(name), f"topics/{name}", overrides, notify=notify
        )

    async def _write_entity(
        self, path: str, entity: str, config: Mapping[str, str], *, notify: bool
    ) -> None:
        data = paths.encode_config(config)
        try:
            await self.store.set(path, data)
        except NoNodeError:
            await self.store.create(path, data, make_parents=True)
        if notify:
            await paths.notify_config_change(self.store, entity)

    # --- dynamic broker configs (`/config/brokers/<id>`, `<default>`) -------------------------
    async def broker_config(self, broker_id: int | None) -> dict[str, str]:
        """The dynamic configs stored for a broker (None: the cluster-wide default), its
        passwords decoded."""
        stored = await broker_configs.read_entity(self.store, broker_id)
        return broker_configs.decode_passwords(stored, self.config.raw)

    async def set_broker_config(
        self, resource_name: str, config: Mapping[str, str], *, validate_only: bool
    ) -> None:
        """Replace the dynamic configs of this broker (`resource_name` its id) or of the
        cluster default (empty name), and notify every broker (Kafka's changeBrokerConfig)."""
        from wherry.server import dynamic_apply, dynamic_validation
        from wherry.server.config_keys import KNOWN_KEYS

        static = self.config.raw
        try:
            broker_id = broker_configs.resource_broker_id(resource_name, self.config.broker_id)
            dynamic_validation.validate(
                config,
                per_broker=broker_id is not None,
                known=KNOWN_KEYS.__contains__,  # exact names: prefixed keys are custom
                current=(
                    static,
                    await self.broker_config(None),
                    await self.broker_config(self.config.broker_id),
                ),
                socket_request_max_bytes=self.config.socket_request_max_bytes,
                check_listeners=dynamic_apply.tls_problem,
            )
            stored = broker_configs.encode_passwords(
                config, static, per_broker=broker_id is not None
            )
        except dynamic_validation.DynamicConfigError as e:
            raise AdminError(e.error_code, e.message) from e
        except ValueError as e:  # Kafka's second check, as it stores: INVALID_CONFIG
            raise AdminError(
                ErrorCode.invalid_config,
                f"Invalid config value for resource {broker_configs.resource(resource_name)}: "
                f"{e}",
            ) from e
        if not validate_only:
            await self._write_entity(
                paths.broker_config_path(broker_id),
                paths.broker_config_entity(broker_id),
                stored,
                notify=True,
            )
