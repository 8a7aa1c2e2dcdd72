"""One member of a classic group (Kafka's MemberMetadata) and the results sent to members.

A member holds its supported protocols in preference order with their metadata bytes, the
assignment it received, the parked JoinGroup / SyncGroup callbacks while a rebalance is in
progress, and heartbeat bookkeeping. Mutable; owned by its GroupMetadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

__all__ = [
    "NO_GENERATION",
    "NO_LEADER",
    "UNKNOWN_MEMBER_ID",
    "JoinCallback",
    "JoinGroupResult",
    "JoinMember",
    "MemberMetadata",
    "SyncCallback",
    "SyncGroupResult",
]

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NO_LEADER = ""


@dataclass(frozen=True, slots=True)
class JoinMember:
    """A member as the leader sees it in its JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    members: tuple[JoinMember, ...]
    member_id: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    skip_assignment: bool
    error: ErrorCode

    @classmethod
    def failed(cls, member_id: str, error: ErrorCode) -> JoinGroupResult:
        return cls((), member_id, NO_GENERATION, None, None, NO_LEADER, False, error)


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes
    error: ErrorCode

    @classmethod
    def failed(cls, error: ErrorCode) -> SyncGroupResult:
        return cls(None, None, b"", error)


JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]


@dataclass(slots=True, eq=False)
class MemberMetadata:
    member_id: str
    group_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join_callback: JoinCallback | None = None
    awaiting_sync_callback: SyncCallback | None = None
    is_new: bool = False
    heartbeat_satisfied: bool = False
    last_heartbeat_ms: int = field(default=-1)

    @property
    def is_static_member(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync_callback is not None

    @property
    def has_satisfied_heartbeat(self) -> bool:
        """Whether the current heartbeat expectation is met (Kafka's hasSatisfiedHeartbeat)."""
        if self.is_new:
            # New members can be expired while awaiting join, so check this first.
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            # Members waiting on a rebalance automatically satisfy expected heartbeats.
            return True
        return self.heartbeat_satisfied

    @property
    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise ValueError(f"Member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata bytes."""
        if len(protocols) != len(self.supported_protocols):
            return False
        return all(
            a[0] == b[0] and bytes(a[1]) == bytes(b[1])
            for a, b in zip(protocols, self.supported_protocols, strict=True)
        )

    def vote(self, candidates: Iterable[str]) -> str:
        """The first protocol in this member's preference order that is a candidate."""
        cands = set(candidates)
        for name, _ in self.supported_protocols:
            if name in cands:
                return name
        raise ValueError(f"Member {self.member_id} does not support any of the candidates")

    def __repr__(self) -> str:
        return (
            f"MemberMetadata(memberId={self.member_id}, groupInstanceId={self.group_instance_id}, "
            f"clientId={self.client_id}, clientHost={self.client_host}, "
            f"sessionTimeoutMs={self.session_timeout_ms}, "
            f"rebalanceTimeoutMs={self.rebalance_timeout_ms}, "
            f"supportedProtocols={[p for p, _ in self.supported_protocols]})"
        )
