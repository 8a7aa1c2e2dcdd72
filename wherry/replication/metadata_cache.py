"""The broker's view of cluster metadata, updated only by UpdateMetadata."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wherry.protocol.security_protocols import LEADER_DURING_DELETE

if TYPE_CHECKING:
    from wherry.protocol.interbroker import (
        BrokerEndpoint,
        UpdateMetadataPartitionState,
        UpdateMetadataRequest,
    )


@dataclass(frozen=True, slots=True)
class StaleControllerEpoch(Exception):
    received: int
    current: int


class MetadataCache:
    def __init__(self, broker_id: int, inter_broker_listener: str | None = None) -> None:
        self.broker_id = broker_id
        self.inter_broker_listener = inter_broker_listener
        self.controller_id: int | None = None
        self.controller_epoch = -1
        # Live brokers on the inter-broker listener (each one's first endpoint without one),
        # and every endpoint of each: broker id -> listener -> endpoint.
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.endpoints: dict[int, dict[str, BrokerEndpoint]] = {}
        self._partitions: dict[str, dict[int, UpdateMetadataPartitionState]] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._listeners: list[Callable[[], None]] = []
        # Which update last changed each topic (its partitions or its id), and the set of
        # live brokers: what `topic_stamp` gives.
        self._updates = 0
        self._topic_updates: dict[str, int] = {}
        self._brokers_update = 0

    # --- updates -------------------------------------------------------------------------
    def add_listener(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[], None]) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    def update(self, req: UpdateMetadataRequest) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata request; returns the partitions deleted from the cache."""
        if req.controller_epoch < self.controller_epoch:
            raise StaleControllerEpoch(req.controller_epoch, self.controller_epoch)
        self.controller_epoch = req.controller_epoch
        self.controller_id = req.controller_id
        self._updates += 1
        update = self._updates
        changed = self._topic_updates
        endpoints: dict[int, dict[str, BrokerEndpoint]] = {}
        for b in req.live_brokers:
            endpoints.setdefault(b.broker_id, {})[b.listener] = b
        if endpoints.keys() != self.endpoints.keys():
            self._brokers_update = update
        self.endpoints = endpoints
        self.brokers = {
            bid: eps.get(self.inter_broker_listener or "") or next(iter(eps.values()))
            for bid, eps in endpoints.items()
        }
        for name, tid in req.topic_ids.items():
            self._topic_ids[name] = tid
            self._topic_names[tid] = name
            changed[name] = update
        deleted: list[tuple[str, int]] = []
        for st in req.partition_states:
            changed[st.topic_name] = update
            if st.leader == LEADER_DURING_DELETE:
                parts = self._partitions.get(st.topic_name)
                if parts is not None and parts.pop(st.partition_index, None) is not None:
                    deleted.append((st.topic_name, st.partition_index))
                    if not parts:
                        del self._partitions[st.topic_name]
                        gone = self._topic_ids.pop(st.topic_name, None)
                        if gone is not None:
                            self._topic_names.pop(gone, None)
                        del changed[st.topic_name]
            else:
                self._partitions.setdefault(st.topic_name, {})[st.partition_index] = st
        for fn in list(self._listeners):
            fn()
        return deleted

    # --- queries -------------------------------------------------------------------------
    def topics(self) -> list[str]:
        return sorted(self._partitions)

    def contains_topic(self, topic: str) -> bool:
        return topic in self._partitions

    def topic_count(self) -> int:
        return len(self._partitions)

    def partitions(self, topic: str) -> dict[int, UpdateMetadataPartitionState]:
        return self._partitions.get(topic, {})

    def partition(self, topic: str, partition: int) -> UpdateMetadataPartitionState | None:
        return self._partitions.get(topic, {}).get(partition)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self._topic_ids.get(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._topic_names.get(topic_id)

    def topic_stamp(self, topic: str) -> tuple[int, int]:
        """Equal as long as nothing a Metadata answer says of `topic` changed: its partitions,
        its id and which brokers are alive (which decide its leaders' and replicas' errors)."""
        return self._topic_updates.get(topic, -1), self._brokers_update

    def alive_brokers(self, listener: str | None = None) -> list[BrokerEndpoint]:
        """The live brokers, by id; with `listener`, their endpoints on that listener (brokers
        without one are left out, as Kafka leaves them out of Metadata answers)."""
        if listener is None:
            return [self.brokers[k] for k in sorted(self.brokers)]
        return [eps[listener] for _, eps in sorted(self.endpoints.items()) if listener in eps]

    def endpoint(self, broker_id: int, listener: str | None = None) -> BrokerEndpoint | None:
        """A live broker's endpoint on `listener` (the inter-broker one when None)."""
        if listener is None:
            return self.brokers.get(broker_id)
        return self.endpoints.get(broker_id, {}).get(listener)

    def has_partitions(self, topic: str, count: int) -> bool:
        parts = self._partitions.get(topic, {})
        return all(p in parts for p in range(count))

    def all_partitions(self) -> Iterable[UpdateMetadataPartitionState]:
        for parts in self._partitions.values():
            yield from parts.values()
