"""Consumer groups: Kafka's classic group protocol and the `__consumer_offsets` log.

Pure (no sockets, no asyncio); time comes in as `now_ms`. The broker wires the coordinator
to the replica manager (`OffsetsStorage`) and to leadership of the offsets topic.
"""

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
