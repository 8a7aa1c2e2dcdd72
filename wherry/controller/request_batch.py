"""Batching the controller's requests, like Kafka's ControllerBrokerRequestBatch (pure).

A controller event adds partition states for several brokers, then builds the batch: one
LeaderAndIsr, one UpdateMetadata and one StopReplica request at most per broker, in Kafka's
order (every LeaderAndIsr, then every UpdateMetadata, then every StopReplica; brokers in
ascending id), addressed only to brokers that are live when the batch is built.

Merging rules (Kafka's):

* LeaderAndIsr: per broker and partition the latest state wins; `is_new` stays set once set.
* StopReplica: per broker and partition the latest leader epoch wins; `delete_partition`
  stays set once set.
* UpdateMetadata: the partition states are shared by every broker that gets one (the latest
  state of a partition wins); a broker may be added without states (it then learns only the
  live brokers).

A broker marked full (`mark_full`) gets a FULL LeaderAndIsr (KIP-516's Type): the caller has
added every partition the broker is a replica of, and the broker stops and deletes the
partitions it holds that the request does not name (its strays, which missed a StopReplica).
It is sent even with no partitions.

Topic ids given with states go into every request naming those topics. Kafka adds an
UpdateMetadata for every LeaderAndIsr partition to all live brokers; here the caller adds it,
since the batch does not know the offline replicas the metadata state carries.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from wherry.protocol.interbroker import (
    BrokerEndpoint,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from wherry.protocol.interbroker_codec import InterbrokerRequestBody

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class BrokerRequest:
    broker_id: int
    body: InterbrokerRequestBody


class RequestBatch:
    def __init__(self, controller_id: int, controller_epoch: int) -> None:
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self._leader_and_isr: dict[int, dict[PartitionKey, LeaderAndIsrPartitionState]] = {}
        self._stop_replica: dict[int, dict[PartitionKey, StopReplicaPartition]] = {}
        self._update_metadata_brokers: set[int] = set()
        self._update_metadata_states: dict[PartitionKey, UpdateMetadataPartitionState] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._full: set[int] = set()

    def is_empty(self) -> bool:
        return not (
            self._leader_and_isr or self._stop_replica or self._update_metadata_brokers
            or self._full
        )

    def mark_full(self, broker_ids: Iterable[int]) -> None:
        """The LeaderAndIsr to each of `broker_ids` names every partition it is a replica of
        (the caller added them): it goes out as FULL."""
        self._full.update(b for b in broker_ids if b >= 0)

    def _add_topic_id(self, topic: str, topic_id: uuid.UUID | None) -> None:
        if topic_id is not None and topic_id.int != 0:
            self._topic_ids[topic] = topic_id

    def add_leader_and_isr(
        self,
        broker_ids: Iterable[int],
        state: LeaderAndIsrPartitionState,
        topic_id: uuid.UUID | None = None,
    ) -> None:
        key = (state.topic_name, state.partition_index)
        self._add_topic_id(state.topic_name, topic_id)
        for b in broker_ids:
            if b < 0:
                continue
            states = self._leader_and_isr.setdefault(b, {})
            old = states.get(key)
            states[key] = replace(state, is_new=True) if old is not None and old.is_new else state

    def add_stop_replica(self, broker_ids: Iterable[int], partition: StopReplicaPartition) -> None:
        key = (partition.topic_name, partition.partition_index)
        for b in broker_ids:
            if b < 0:
                continue
            parts = self._stop_replica.setdefault(b, {})
            old = parts.get(key)
            parts[key] = (
                replace(partition, delete_partition=True)
                if old is not None and old.delete_partition
                else partition
            )

    def add_update_metadata(
        self,
        broker_ids: Iterable[int],
        states: Iterable[UpdateMetadataPartitionState] = (),
        topic_ids: Mapping[str, uuid.UUID] | None = None,
    ) -> None:
        self._update_metadata_brokers.update(b for b in broker_ids if b >= 0)
        for st in states:
            self._update_metadata_states[(st.topic_name, st.partition_index)] = st
        for topic, tid in (topic_ids or {}).items():
            self._add_topic_id(topic, tid)

    @property
    def update_metadata_states(self) -> Mapping[PartitionKey, UpdateMetadataPartitionState]:
        return self._update_metadata_states

    def drop_metadata_sent(
        self,
        sent: dict[PartitionKey, UpdateMetadataPartitionState],
        sent_to: Collection[int],
    ) -> None:
        """Leave out the UpdateMetadata partition states equal to the ones in `sent`, which
        every broker this batch's UpdateMetadata goes to (all of them in `sent_to`) was sent
        earlier in the same event: their queues deliver in order, so the brokers have them
        (a controller failover would send every partition three times); with no state left
        the UpdateMetadata is not sent at all. What remains is added to `sent`, for the next
        batch of the event."""
        if self._update_metadata_brokers.issubset(sent_to):
            for key, st in list(self._update_metadata_states.items()):
                if sent.get(key) == st:
                    del self._update_metadata_states[key]
            if not self._update_metadata_states:  # nothing new: they know the live brokers
                self._update_metadata_brokers.clear()
        sent.update(self._update_metadata_states)

    def _ids_for(self, topics: Iterable[str]) -> dict[str, uuid.UUID]:
        return {t: self._topic_ids[t] for t in dict.fromkeys(topics) if t in self._topic_ids}

    def build(
        self,
        live_broker_epochs: Mapping[int, int],
        live_endpoints: Sequence[BrokerEndpoint],
        *,
        leader_listener: str | None = None,
    ) -> list[BrokerRequest]:
        """The requests, for the brokers in `live_broker_epochs` (broker id → broker epoch);
        `live_endpoints` are the live brokers' endpoints (all of them in UpdateMetadata's live
        brokers; LeaderAndIsr's live leaders get one per leader, on `leader_listener`, the
        inter-broker listener, or the broker's first endpoint)."""
        out: list[BrokerRequest] = []
        endpoints = tuple(live_endpoints)
        one_each: dict[int, BrokerEndpoint] = {}
        for e in endpoints:
            if e.broker_id not in one_each or e.listener == leader_listener:
                one_each[e.broker_id] = e
        for b in sorted(self._leader_and_isr.keys() | self._full):
            lai_states = tuple(self._leader_and_isr.get(b, {}).values())
            full = b in self._full
            if b not in live_broker_epochs or not (lai_states or full):
                continue
            leaders = {s.leader for s in lai_states}
            out.append(
                BrokerRequest(
                    b,
                    LeaderAndIsrRequest(
                        self.controller_id,
                        self.controller_epoch,
                        live_broker_epochs[b],
                        lai_states,
                        self._ids_for(s.topic_name for s in lai_states),
                        tuple(e for b, e in sorted(one_each.items()) if b in leaders),
                        is_full=full,
                    ),
                )
            )
        um_states = tuple(self._update_metadata_states.values())
        um_ids = self._ids_for(s.topic_name for s in um_states)
        for b in sorted(self._update_metadata_brokers):
            if b not in live_broker_epochs:
                continue
            out.append(
                BrokerRequest(
                    b,
                    UpdateMetadataRequest(
                        self.controller_id,
                        self.controller_epoch,
                        live_broker_epochs[b],
                        um_states,
                        endpoints,
                        dict(um_ids),
                    ),
                )
            )
        for b in sorted(self._stop_replica):
            parts = tuple(self._stop_replica[b].values())
            if b not in live_broker_epochs or not parts:
                continue
            out.append(
                BrokerRequest(
                    b,
                    StopReplicaRequest(
                        self.controller_id, self.controller_epoch, live_broker_epochs[b], parts
                    ),
                )
            )
        return out
