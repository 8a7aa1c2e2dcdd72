"""Where classic groups and KIP-848 consumer groups meet on one coordinator (Kafka 4's
GroupMetadataManager: a group id is one type at a time).

* A consumer group's committed offsets live with the classic groups' offsets, in an Empty
  classic entry of the same id (`offsets_holder`), written and loaded as OffsetCommit records
  like any other: Kafka too keeps offsets apart from the group's own records.
* A KIP-848 member joining where a classic group is: an empty classic group becomes a
  consumer group (its GroupMetadata record is deleted, its offsets stay), whatever
  `group.consumer.migration.policy` says, as Kafka's; a classic group with members is
  converted online (migration.py) when the policy allows upgrades, else refuses with
  GROUP_ID_NOT_FOUND ("not a consumer group").
* A classic member joining a consumer group: an empty one is deleted (downgrade), whatever
  the policy; one with members takes it in
  as a member using the classic protocol (classic_members.py), whose SyncGroup, Heartbeat
  and LeaveGroup the consumer group then serves. When the last member of the consumer
  protocol leaves such a group, it converts back to classic if the policy allows downgrades.

Pure: time passed in, writes through `OffsetsStorage`.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from wherry.group.classic_members import ClassicJoin, ClassicMembers
from wherry.group.config import GroupCoordinatorConfig
from wherry.group.consumer_coordinator import (
    ConsumerGroupManager,
    HeartbeatCallback,
    HeartbeatRequest,
    HeartbeatResult,
    TopicsImage,
)
from wherry.group.consumer_group import ConsumerGroup
from wherry.group.group import GroupMetadata
from wherry.group.member import JoinCallback, JoinGroupResult, SyncCallback
from wherry.group.metadata_manager import GroupMetadataManager
from wherry.group.migration import GroupMigration
from wherry.group.rebalance import Rebalancer
from wherry.group.records import group_metadata_key
from wherry.group.state import GroupState
from wherry.group.storage import OffsetsStorage

log = logging.getLogger(__name__)

__all__ = ["ConsumerGroupBridge"]

_E = GroupState.EMPTY
_D = GroupState.DEAD


class ConsumerGroupBridge:
    def __init__(
        self,
        config: GroupCoordinatorConfig,
        manager: GroupMetadataManager,
        consumer: ConsumerGroupManager,
        storage: OffsetsStorage,
        rebalancer: Rebalancer,
        *,
        log_prefix: str,
    ) -> None:
        self.config = config
        self._manager = manager
        self._consumer = consumer
        self._storage = storage
        self._prefix = log_prefix
        self.classic = ClassicMembers(consumer, log_prefix=log_prefix)
        self.migration = GroupMigration(
            config, manager, rebalancer, consumer, storage, log_prefix=log_prefix
        )
        consumer.downgrade = self.migration.maybe_downgrade

    def offsets_holder(self, group_id: str, now_ms: int) -> GroupMetadata:
        """The Empty classic entry holding a consumer group's offsets."""
        return self._manager.add_group(GroupMetadata(group_id, _E, now_ms))

    def classic_join_refusal(self, group_id: str) -> ErrorCode | None:
        """JoinGroup of a classic member where a consumer group is (None: go on as classic)."""
        consumer_group = self._consumer.get(group_id)
        if consumer_group is None:
            return None
        if consumer_group.members:  # served by it (join_consumer_group)
            return ErrorCode.inconsistent_group_protocol
        # An empty group converts whatever the policy, as Kafka's does.
        log.info("%s Converting empty consumer group %s to classic", self._prefix, group_id)
        self._consumer.delete(group_id)
        return None

    # --- classic members of consumer groups ---------------------------------------------------
    def join_consumer_group(
        self,
        group_id: str,
        req: ClassicJoin,
        topics: TopicsImage | None,
        now_ms: int,
        callback: JoinCallback,
    ) -> bool:
        """JoinGroup of a classic member where a consumer group with members is: served by it
        (True), else left to the classic path (False)."""
        group = self._consumer.get(group_id)
        if group is None or not group.members:
            return False
        cfg = self.config
        if not (
            cfg.group_min_session_timeout_ms
            <= req.session_timeout_ms
            <= cfg.group_max_session_timeout_ms
        ):
            callback(JoinGroupResult.failed(req.member_id, ErrorCode.invalid_session_timeout))
            return True
        self.classic.join(group, req, topics or TopicsImage({}), now_ms, callback)
        return True

    def sync_consumer_group(
        self,
        group_id: str,
        member: tuple[str, str | None, int],
        protocol: tuple[str | None, str | None],
        now_ms: int,
        callback: SyncCallback,
    ) -> bool:
        group = self._consumer.get(group_id)
        if group is None:
            return False
        member_id, instance_id, generation = member
        self.classic.sync(group, member_id, instance_id, generation, protocol, now_ms, callback)
        return True

    def heartbeat_consumer_group(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> ErrorCode | None:
        group = self._consumer.get(group_id)
        if group is None:
            return None
        return self.classic.heartbeat(group, member_id, instance_id, generation, now_ms)

    def leave_consumer_group(
        self,
        group_id: str,
        members: list[tuple[str, str | None, str | None]],
        topics: TopicsImage | None,
    ) -> list[tuple[str, str | None, ErrorCode]] | None:
        group = self._consumer.get(group_id)
        if group is None:
            return None
        return self.classic.leave(group, members, topics)

    # --- KIP-848 members ------------------------------------------------------------------------
    def _take_over_classic_group(
        self, group_id: str, topics: TopicsImage, now_ms: int
    ) -> ErrorCode | None:
        if self._consumer.get(group_id) is not None:
            return None
        group = self._manager.get_group(group_id)
        if group is None or group.is_(_D):
            return None
        if not group.is_(_E) or group.size:
            if not self.migration.can_upgrade(group):
                return ErrorCode.group_id_not_found
            try:
                self.migration.upgrade(group, topics, now_ms)
            except ValueError as e:
                log.warning(
                    "%s Cannot upgrade classic group %s to consumer group because the embedded "
                    "consumer protocol is malformed: %s",
                    self._prefix,
                    group_id,
                    e,
                )
                return ErrorCode.group_id_not_found
            return None
        if group.generation_id > 0 or group.protocol_type is not None:
            # An empty group converts whatever the policy, as Kafka's does.
            log.info("%s Converting empty classic group %s to consumer", self._prefix, group_id)
            p = self._manager.partition_for(group_id)
            self._storage.append(p, [(group_metadata_key(group_id), None)], lambda _e, _o: None)
            group.generation_id = 0
            group.protocol_type = None
            group.protocol_name = None
        return None

    def heartbeat(
        self,
        req: HeartbeatRequest,
        topics: TopicsImage,
        callback: HeartbeatCallback,
        now_ms: int,
        status: ErrorCode | None,
    ) -> None:
        """ConsumerGroupHeartbeat; `status` is the coordinator's check of the group id."""
        if not req.group_id:
            callback(HeartbeatResult.failed(ErrorCode.invalid_request, "GroupId can't be empty."))
            return
        invalid = self._consumer.invalid_request(req)
        if invalid is not None:
            callback(HeartbeatResult.failed(ErrorCode.invalid_request, invalid))
            return
        if status is None and req.member_epoch == 0:
            refused = self._take_over_classic_group(req.group_id, topics, now_ms)
            if refused is not None:
                message = f"Group {req.group_id} is not a consumer group."
                callback(HeartbeatResult.failed(refused, message))
                return
        if status is not None:
            callback(HeartbeatResult.failed(status))
            return
        self._consumer.heartbeat(req, topics, now_ms, callback)

    def describe(
        self, group_id: str, status: ErrorCode | None
    ) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        """ConsumerGroupDescribe of one group."""
        if status is not None:
            return status, None, None
        group = self._consumer.get(group_id)
        if group is not None:
            return ErrorCode.none, None, group
        classic = self._manager.get_group(group_id)
        if classic is not None and not classic.is_(_D) and not classic.is_(_E):
            return ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.", None
        return ErrorCode.group_id_not_found, f"Group {group_id} not found.", None
