"""The share-partition leaders' persister (Kafka's DefaultStatePersister): a
share-partition's state read from, written to and deleted at its share coordinator -- the
leader of its `__share_group_state` partition -- locally when that is this broker
(`coordinator/share_state.py`), else over the wire (Read/Write/DeleteShareGroupState through an
`outbound.RequestClient` on a connection `connect_to` opens: the broker's sockets, or the
simulated network carrying the same frames); retried while the coordinator moves or loads, up
to the write timeout. The topic is created on first use (`ensure_topic`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from wherry.coordinator.share_state import ShareStateCoordinator
from wherry.coordinator.txn_markers import BrokerClients, ConnectTo
from wherry.outbound.client import RequestClient, RequestError
from wherry.replication.metadata_cache import MetadataCache
from wherry.runtime.clock import Clock
from wherry.share.partition import StateBatch
from wherry.share.state import SHARE_STATE_TOPIC, ShareKey, ShareState, state_partition_for

log = logging.getLogger(__name__)

__all__ = ["RETRIABLE", "SharePersister", "StatePersister"]

RETRIABLE = (
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.unknown_topic_or_partition,
)


class StatePersister(Protocol):
    """What a share-partition leader needs of its persister."""

    async def read(
        self, key: ShareKey, leader_epoch: int
    ) -> tuple[ErrorCode, ShareState | None]: ...

    async def write(self, key: ShareKey, state: ShareState) -> ErrorCode: ...

    async def delete(self, key: ShareKey) -> ErrorCode: ...

    def close(self) -> None: ...


class SharePersister:
    def __init__(
        self,
        broker_id: int,
        cache: MetadataCache,
        clock: Clock,
        coordinator: ShareStateCoordinator,
        *,
        write_timeout_ms: int,
        connect_to: ConnectTo,
        ensure_topic: Callable[[], None],
    ) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.clock = clock
        self.coordinator = coordinator
        self._write_timeout_ms = write_timeout_ms
        self._ensure_topic = ensure_topic
        self._clients = BrokerClients(connect_to, f"share-{broker_id}")
        self._prefix = f"[SharePersister id={broker_id}]"

    def close(self) -> None:
        self._clients.close()

    def abandon(self) -> None:
        """The process dies: nothing is closed, nothing more is sent."""
        self._clients.forget()

    async def read(
        self, key: ShareKey, leader_epoch: int
    ) -> tuple[ErrorCode, ShareState | None]:
        async def local() -> tuple[ErrorCode, ShareState | None]:
            return await self.coordinator.read(key, leader_epoch)

        async def remote(client: RequestClient) -> tuple[ErrorCode, ShareState | None]:
            r = await client.call(
                84, 0,
                {
                    "group_id": key.group_id,
                    "topics": [{"topic_id": key.topic_id, "partitions": [
                        {"partition": key.partition, "leader_epoch": leader_epoch}]}],
                },
            )
            p = r.results[0].partitions[0]
            if p.error_code != ErrorCode.none:
                return ErrorCode(p.error_code), None
            if p.state_epoch < 0 and p.start_offset < 0:
                return ErrorCode.none, None
            return ErrorCode.none, ShareState(
                p.state_epoch, leader_epoch, p.start_offset,
                tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                                 b.delivery_count) for b in p.state_batches),
            )

        return await self.with_coordinator(key, local, remote)

    async def delete(self, key: ShareKey) -> ErrorCode:
        async def local() -> tuple[ErrorCode, None]:
            return await self.coordinator.delete(key), None

        async def remote(client: RequestClient) -> tuple[ErrorCode, None]:
            r = await client.call(
                86, 0,
                {"group_id": key.group_id, "topics": [{"topic_id": key.topic_id, "partitions": [
                    {"partition": key.partition}]}]},
            )
            return ErrorCode(r.results[0].partitions[0].error_code), None

        err, _ = await self.with_coordinator(key, local, remote)
        return err

    async def write(self, key: ShareKey, state: ShareState) -> ErrorCode:
        async def local() -> tuple[ErrorCode, None]:
            return await self.coordinator.write(key, state), None

        async def remote(client: RequestClient) -> tuple[ErrorCode, None]:
            r = await client.call(
                85, 0,
                {
                    "group_id": key.group_id,
                    "topics": [{"topic_id": key.topic_id, "partitions": [{
                        "partition": key.partition,
                        "state_epoch": state.state_epoch,
                        "leader_epoch": state.leader_epoch,
                        "start_offset": state.start_offset,
                        "state_batches": [
                            {"first_offset": b.first_offset, "last_offset": b.last_offset,
                             "delivery_state": b.delivery_state,
                             "delivery_count": b.delivery_count}
                            for b in state.batches
                        ],
                    }]}],
                },
            )
            return ErrorCode(r.results[0].partitions[0].error_code), None

        err, _ = await self.with_coordinator(key, local, remote)
        return err

    async def with_coordinator(self, key: ShareKey, local: Any, remote: Any) -> Any:
        """`local()` when this broker is the key's share coordinator, else `remote(client)`
        over the wire to it; retried while it moves or loads, up to the write timeout."""
        cache = self.cache
        deadline = self.clock.monotonic_ms() + self._write_timeout_ms
        delay = 0.05
        err: ErrorCode = ErrorCode.coordinator_not_available
        while True:
            if not cache.contains_topic(SHARE_STATE_TOPIC):
                self._ensure_topic()
                err = ErrorCode.coordinator_not_available
            else:
                p = state_partition_for(key, self.coordinator.partition_count())
                st = cache.partition(SHARE_STATE_TOPIC, p)
                leader = st.leader if st is not None else -1
                try:
                    if leader == self.broker_id:
                        res = await local()
                    elif leader < 0:
                        res = (ErrorCode.coordinator_not_available, None)
                    else:
                        res = await remote(self._client(leader))
                    err = res[0]
                    if err not in RETRIABLE:
                        return res
                except RequestError as e:
                    log.info("%s share coordinator %d: %s", self._prefix, leader, e)
                    err = ErrorCode.coordinator_not_available
            if self.clock.monotonic_ms() + delay * 1000 > deadline:
                return (err, None)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _client(self, broker_id: int) -> RequestClient:
        ep = self.cache.endpoint(broker_id)
        if ep is None:
            raise RequestError(f"broker {broker_id} is not alive")
        return self._clients.get(broker_id, ep.host, ep.port)
