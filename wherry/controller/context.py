"""What the active controller knows: loaded from the store at failover, kept current
by the controller's own writes and by watches."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from wherry.common.topic_partition import TopicPartition
from wherry.controller.reassignment import Reassignment
from wherry.coordination.paths import BrokerRegistration


@dataclass(frozen=True, slots=True)
class LeaderIsr:
    """A partition's leader and ISR as stored in its state node (Kafka's
    LeaderIsrAndControllerEpoch plus the node's version)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int  # version of the state node: conditional writes check it (partition epoch)


@dataclass(slots=True)
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    assignments: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    states: dict[TopicPartition, LeaderIsr] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    topics_to_delete: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)
    # Ongoing reassignments (`assignments` holds their full replica lists) and the
    # ones that came through the legacy `/admin/reassign_partitions` node.
    reassigning: dict[TopicPartition, Reassignment] = field(default_factory=dict)
    legacy_reassignments: set[TopicPartition] = field(default_factory=set)
    # Brokers in controlled shutdown: alive, but neither leaders nor ISR members.
    shutting_down: set[int] = field(default_factory=set)
    # KIP-112: per broker, the broker epoch and its replicas in a failed log dir then (its
    # LeaderAndIsr answers said KAFKA_STORAGE_ERROR); they neither lead nor join an ISR until
    # the broker registers again (a new epoch: its dirs were checked anew at its start).
    replicas_on_offline_dirs: dict[int, tuple[int, frozenset[TopicPartition]]] = field(
        default_factory=dict
    )

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def all_partitions(self) -> list[TopicPartition]:
        return [tp for t in sorted(self.assignments) for tp in self.partitions_of(t)]

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments.get(tp.topic, {}).get(tp.partition, ())

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.replicas(tp)]

    def partitions_on_brokers(self, broker_ids: set[int]) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_ids.intersection(self.replicas(tp))]

    def is_live(self, broker_id: int) -> bool:
        return broker_id in self.live_brokers

    def leader_candidates(self) -> set[int]:
        """Brokers that may lead or join an ISR: live and not shutting down (Kafka's
        liveBrokerIds, which leaves out the shutting-down ones)."""
        return {b for b in self.live_brokers if b not in self.shutting_down}

    def offline_dir_replicas(self, broker_id: int) -> frozenset[TopicPartition]:
        """The live broker's replicas in failed log dirs (of its current registration)."""
        reg = self.live_brokers.get(broker_id)
        found = self.replicas_on_offline_dirs.get(broker_id)
        if reg is None or found is None or found[0] != reg.epoch:
            return frozenset()
        return found[1]

    def is_replica_online(self, broker_id: int, tp: TopicPartition) -> bool:
        """Kafka's isReplicaOnline: the broker is live and the replica's log dir is not offline."""
        return broker_id in self.live_brokers and tp not in self.offline_dir_replicas(broker_id)

    def candidates_for(self, tp: TopicPartition) -> set[int]:
        """The brokers that may lead `tp` or join its ISR: `leader_candidates` less those whose
        replica of `tp` is in an offline log dir."""
        return {b for b in self.leader_candidates() if self.is_replica_online(b, tp)}

    def reassignment(self, tp: TopicPartition) -> Reassignment:
        """The partition's ongoing reassignment, or its plain replica list."""
        return self.reassigning.get(tp) or Reassignment(self.replicas(tp))

    def set_reassignment(self, tp: TopicPartition, r: Reassignment) -> None:
        """Record the full replica list (in `assignments`) and whether a reassignment runs."""
        self.assignments.setdefault(tp.topic, {})[tp.partition] = r.replicas
        if r.in_progress:
            self.reassigning[tp] = r
        else:
            self.reassigning.pop(tp, None)

    def live_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return tuple(r for r in self.replicas(tp) if r in self.live_brokers)

    def offline_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return tuple(r for r in self.replicas(tp) if not self.is_replica_online(r, tp))

    def is_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_delete

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_of(topic):
            self.states.pop(tp, None)
            self.reassigning.pop(tp, None)
            self.legacy_reassignments.discard(tp)
        self.assignments.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.topic_configs.pop(topic, None)
        self.topics_to_delete.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)
