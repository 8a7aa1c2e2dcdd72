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

# submodule → the names it gives this package, imported on first access (PEP 562):
# importing one submodule of this package does not import all the others.
_LAZY: dict[str, tuple[str, ...]] = {
    "wherry.group.config": ("GroupCoordinatorConfig",),
    "wherry.group.coordinator": (
        "GroupCoordinator",
        "LeaveGroupResult",
        "MemberIdentity",
        "OffsetFetchPartition",
    ),
    "wherry.group.group": ("GroupMetadata", "OffsetAndMetadata"),
    "wherry.group.member": ("JoinGroupResult", "MemberMetadata", "SyncGroupResult"),
    "wherry.group.records": ("OFFSETS_TOPIC", "partition_for"),
    "wherry.group.state": ("GroupState",),
    "wherry.group.storage": ("OffsetsStorage",),
}


__getattr__ = lazy_attributes(__name__, globals(), _LAZY)
