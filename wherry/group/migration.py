"""Online migration between classic groups and KIP-848 consumer groups (Kafka 4's
convertToConsumerGroup / convertToClassicGroup), under `group.consumer.migration.policy`.

* Upgrade: a member of the consumer protocol joining a classic group with members converts
  it, when the policy allows upgrades, the group uses the embedded consumer protocol and its
  size is within `group.consumer.max.size`. Parked JoinGroups and SyncGroups are answered
  REBALANCE_IN_PROGRESS; every classic member becomes a member of the consumer group at the
  classic generation (group and assignment epoch alike), Stable, owning and targeted at what
  its last assignment gave it. The classic group's metadata record is deleted (tombstone) and
  the consumer group's records follow with the joining member's heartbeat.
* Downgrade: when the last member of the consumer protocol leaves (or is fenced) and classic
  members remain, the group becomes a classic group, when the policy allows downgrades and
  the members fit `group.max.size`: generation = the group epoch, protocol type "consumer",
  each member's target assignment as its classic assignment; the consumer group's records are
  deleted (tombstones), the classic group's metadata is written, and a rebalance starts.

Offsets stay where they are: a group's committed offsets are kept apart from its records,
in the classic entry of its id, which is carried over in both directions.

Pure: time passed in, writes through the group managers' storage.
"""

from __future__ import annotations

import logging
import uuid

from kio.schema.errors import ErrorCode

from wherry.group import consumer_protocol as cp
from wherry.group.config import GroupCoordinatorConfig
from wherry.group.consumer_coordinator import ConsumerGroupManager, TopicsImage
from wherry.group.consumer_group import ConsumerGroup, ConsumerMember
from wherry.group.consumer_group_records import ClassicMemberMetadata
from wherry.group.group import GroupMetadata
from wherry.group.member import JoinGroupResult, MemberMetadata, SyncGroupResult
from wherry.group.metadata_manager import GroupMetadataManager
from wherry.group.rebalance import Rebalancer
from wherry.group.reconciliation import MemberAssignment, MemberState
from wherry.group.records import group_metadata_key
from wherry.group.state import GroupState
from wherry.group.storage import OffsetsStorage

log = logging.getLogger(__name__)

__all__ = ["GroupMigration", "downgrade_allowed", "upgrade_allowed"]


def upgrade_allowed(policy: str) -> bool:
    return policy in ("upgrade", "bidirectional")


def downgrade_allowed(policy: str) -> bool:
    return policy in ("downgrade", "bidirectional")


class GroupMigration:
    def __init__(
        self,
        config: GroupCoordinatorConfig,
        manager: GroupMetadataManager,
        rebalancer: Rebalancer,
        consumer: ConsumerGroupManager,
        storage: OffsetsStorage,
        *,
        log_prefix: str,
    ) -> None:
        self.config = config
        self._manager = manager
        self._rebalancer = rebalancer
        self._consumer = consumer
        self._storage = storage
        self._prefix = log_prefix

    # --- upgrade ---------------------------------------------------------------------------
    def can_upgrade(self, group: GroupMetadata) -> bool:
        """Kafka's validateOnlineUpgrade."""
        why = None
        if not upgrade_allowed(self.config.consumer.migration_policy):
            why = "the online upgrade is disabled"
        elif group.protocol_type != cp.CONSUMER_PROTOCOL_TYPE:
            why = "the group does not use the consumer embedded protocol"
        elif group.size > self.config.consumer.max_size:
            why = "the group size exceeds the consumer group maximum size"
        if why is not None:
            log.info(
                "%s Cannot upgrade classic group %s to consumer group because %s.",
                self._prefix,
                group.group_id,
                why,
            )
        return why is None

    def upgrade(self, classic: GroupMetadata, topics: TopicsImage, now_ms: int) -> ConsumerGroup:
        """Convert `classic` to a consumer group; ValueError if a member's embedded consumer
        protocol does not parse (the group then stays classic)."""
        group = _consumer_group_of(classic, topics)
        for m in classic.all_member_metadata():
            classic.maybe_invoke_join_callback(
                m, JoinGroupResult.failed(m.member_id, ErrorCode.rebalance_in_progress)
            )
            classic.maybe_invoke_sync_callback(
                m, SyncGroupResult.failed(ErrorCode.rebalance_in_progress)
            )
        self._rebalancer.retire(classic)
        holder = GroupMetadata(classic.group_id, GroupState.EMPTY, now_ms)
        holder.share_offsets_of(classic)
        self._manager.replace_group(holder)
        p = self._manager.partition_for(classic.group_id)
        gid = classic.group_id
        self._storage.append(
            p, [(group_metadata_key(gid), None)], lambda e, _o: _warn(self._prefix, gid, e)
        )
        self._consumer.update_subscriptions(group, topics)
        self._consumer.adopt(group, now_ms)
        log.info(
            "%s Converted classic group %s (generation %d, %d members) to a consumer group",
            self._prefix,
            group.group_id,
            group.group_epoch,
            len(group.members),
        )
        return group

    # --- downgrade -------------------------------------------------------------------------
    def maybe_downgrade(self, group: ConsumerGroup, leaving_id: str, now_ms: int) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember, then the conversion: True if
        `group` became a classic group without the leaving member."""
        if not group.all_classic_except(leaving_id) or len(group.members) <= 1:
            return False
        why = None
        if not downgrade_allowed(self.config.consumer.migration_policy):
            why = "the online downgrade is disabled"
        elif len(group.members) - 1 > self.config.group_max_size:
            why = "its group size is greater than classic group max size"
        if why is not None:
            log.info(
                "%s Cannot downgrade consumer group %s to classic group because %s.",
                self._prefix,
                group.group_id,
                why,
            )
            return False
        try:
            classic = _classic_group_of(group, leaving_id, now_ms)
        except ValueError as e:  # members with no protocol in common (read from the log)
            log.warning(
                "%s Cannot downgrade consumer group %s to classic group: %s",
                self._prefix,
                group.group_id,
                e,
            )
            return False
        holder = self._manager.get_group(group.group_id)
        if holder is not None:
            classic.share_offsets_of(holder)
            holder.transition_to(GroupState.DEAD, now_ms)
        self._manager.replace_group(classic)
        gid = group.group_id
        self._consumer.drop(gid, lambda e: _warn(self._prefix, gid, e))
        assignment = {m.member_id: m.assignment for m in classic.all_member_metadata()}
        self._manager.store_group(classic, assignment, lambda e: _warn(self._prefix, gid, e))
        for m in classic.all_member_metadata():
            self._rebalancer.complete_and_schedule_next_heartbeat_expiration(classic, m)
        log.info(
            "%s Converted consumer group %s to a classic group (generation %d, %d members)",
            self._prefix,
            group.group_id,
            classic.generation_id,
            classic.size,
        )
        self._rebalancer.prepare_rebalance(
            classic, f"Downgrade group {group.group_id} from consumer to classic."
        )
        return True


def _warn(prefix: str, group_id: str, error: ErrorCode) -> None:
    if error != ErrorCode.none:
        log.warning(
            "%s Writing the conversion of group %s failed: %s", prefix, group_id, error.name
        )


def _consumer_group_of(classic: GroupMetadata, topics: TopicsImage) -> ConsumerGroup:
    """Kafka's ConsumerGroup.fromClassicGroup."""
    gen = classic.generation_id
    group = ConsumerGroup(classic.group_id)
    group.group_epoch = group.assignment_epoch = gen
    for m in classic.all_member_metadata():
        name = classic.protocol_name
        metadata = (
            m.metadata(name) if name in m.protocol_names and name else m.supported_protocols[0][1]
        )
        subscription = cp.decode_subscription(metadata)
        assigned: dict[uuid.UUID, frozenset[int]] = {}
        for topic, parts in cp.decode_assignment(m.assignment).items():
            meta = topics.get(topic)
            if meta is None:
                continue
            free = frozenset(
                p
                for p in parts
                if 0 <= p < meta.num_partitions and group.owner_of(meta.topic_id, p) is None
            )
            if free:
                assigned[meta.topic_id] = free
        member = ConsumerMember(
            m.member_id,
            instance_id=m.group_instance_id,
            rack_id=subscription.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            classic=ClassicMemberMetadata(
                m.session_timeout_ms, tuple((n, bytes(d)) for n, d in m.supported_protocols)
            ),
        )
        group.add_member(member)
        group.set_assignment(member, MemberAssignment(MemberState.STABLE, gen, gen, assigned, {}))
        group.target[m.member_id] = dict(assigned)
    return group


def _classic_group_of(group: ConsumerGroup, leaving_id: str, now_ms: int) -> GroupMetadata:
    """Kafka's ClassicGroup.fromConsumerGroup (without the leaving member)."""
    classic = GroupMetadata(group.group_id, GroupState.STABLE, now_ms)
    classic.generation_id = group.group_epoch
    classic.protocol_type = cp.CONSUMER_PROTOCOL_TYPE
    for mid, m in group.members.items():
        if mid == leaving_id or m.classic is None:
            continue
        classic.add(
            MemberMetadata(
                member_id=mid,
                group_id=group.group_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.classic.session_timeout_ms,
                protocol_type=cp.CONSUMER_PROTOCOL_TYPE,
                supported_protocols=list(m.classic.supported_protocols),
            )
        )
    protocol = classic.select_protocol()
    classic.protocol_name = protocol
    classic.subscribed_topics = classic.compute_subscribed_topics()
    names = {t.topic_id: t.name for t in group.subscribed_topics.values()}
    for cm in classic.all_member_metadata():
        target = group.target.get(cm.member_id, {})
        try:
            version = cp.protocol_version(cm.metadata(protocol))
        except ValueError:
            version = 0
        cm.assignment = cp.encode_assignment(
            {names[t]: ps for t, ps in target.items() if t in names}, version
        )
    return classic
