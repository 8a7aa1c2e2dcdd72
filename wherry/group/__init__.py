"""Consumer groups: Kafka's classic group protocol and the `__consumer_offsets` log.

Pure (no sockets, no asyncio); time comes in as `now_ms`. The broker wires the coordinator
to the replica manager (`OffsetsStorage`) and to leadership of the offsets topic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wherry.common.lazy import lazy_attributes

if TYPE_CHECKING:
    from wherry.group.config import GroupCoordinatorConfig
    from wherry.group.coordinator import (
        GroupCoordinator,
        LeaveGroupResult,
        MemberIdentity,
        OffsetFetchPartition,
    )
    from wherry.group.group import GroupMetadata, OffsetAndMetadata
    from wherry.group.member import JoinGroupResult, MemberMetadata, SyncGroupResult
    from wherry.group.records import OFFSETS_TOPIC, partition_for
    from wherry.group.state import GroupState
    from wherry.group.storage import OffsetsStorage

__all__ = [
    "OFFSETS_TOPIC",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupMetadata",
    "GroupState",
    "JoinGroupResult",
    "LeaveGroupResult",
    "MemberIdentity",
    "MemberMetadata",
    "OffsetAndMetadata",
    "OffsetFetchPartition",
    "OffsetsStorage",
    "SyncGroupResult",
    "partition_for",
]

# name → (submodule, attribute), imported on first access (PEP 562): importing one
# submodule of this package does not import all the others.
_LAZY: dict[str, tuple[str, str]] = {
    "GroupCoordinator": ("wherry.group.coordinator", "GroupCoordinator"),
    "GroupCoordinatorConfig": ("wherry.group.config", "GroupCoordinatorConfig"),
    "GroupMetadata": ("wherry.group.group", "GroupMetadata"),
    "GroupState": ("wherry.group.state", "GroupState"),
    "JoinGroupResult": ("wherry.group.member", "JoinGroupResult"),
    "LeaveGroupResult": ("wherry.group.coordinator", "LeaveGroupResult"),
    "MemberIdentity": ("wherry.group.coordinator", "MemberIdentity"),
    "MemberMetadata": ("wherry.group.member", "MemberMetadata"),
    "OFFSETS_TOPIC": ("wherry.group.records", "OFFSETS_TOPIC"),
    "OffsetAndMetadata": ("wherry.group.group", "OffsetAndMetadata"),
    "OffsetFetchPartition": ("wherry.group.coordinator", "OffsetFetchPartition"),
    "OffsetsStorage": ("wherry.group.storage", "OffsetsStorage"),
    "SyncGroupResult": ("wherry.group.member", "SyncGroupResult"),
    "partition_for": ("wherry.group.records", "partition_for"),
}


__getattr__ = lazy_attributes(__name__, globals(), _LAZY)
