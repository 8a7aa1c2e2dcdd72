"""The group coordinator's delayed operations (Kafka's DelayedJoin, InitialDelayedJoin,
DelayedSync and DelayedHeartbeat), parked in the coordinator's purgatories.

They only hold a reference to the group (and the generation or member they wait for) and call
back through `RebalanceCallbacks` with themselves; the callbacks own the logic (the
coordinator's rebalance machinery implements them). Watch keys:
`join_key(group)`, `sync_key(group)`, `member_key(group, member)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from wherry.purgatory.operation import DelayedOperation

if TYPE_CHECKING:
    from wherry.group.group import GroupMetadata

__all__ = [
    "DelayedHeartbeat",
    "DelayedJoin",
    "DelayedSync",
    "GroupOperation",
    "InitialDelayedJoin",
    "RebalanceCallbacks",
    "join_key",
    "member_key",
    "sync_key",
]


def join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


def member_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("member", group_id, member_id)


class RebalanceCallbacks(Protocol):
    """What the delayed operations call: completion checks, completions and expirations."""

    def watch_join(self, op: DelayedJoin) -> None:
        """Park `op` in the rebalance purgatory under `join_key` of its group."""
        ...

    def try_complete_join(self, op: DelayedJoin) -> bool: ...

    def on_complete_join(self, group: GroupMetadata) -> None: ...

    def try_complete_pending_sync(self, op: DelayedSync) -> bool: ...

    def on_expire_pending_sync(self, op: DelayedSync) -> None: ...

    def try_complete_heartbeat(self, op: DelayedHeartbeat) -> bool: ...

    def on_expire_heartbeat(self, op: DelayedHeartbeat) -> None: ...


class GroupOperation(DelayedOperation):
    """A delayed operation on one group; it calls back through `RebalanceCallbacks`."""

    def __init__(self, callbacks: RebalanceCallbacks, group: GroupMetadata, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.callbacks = callbacks
        self.group = group

    def on_complete(self) -> None:
        """Nothing unless a subclass says otherwise (the callbacks did the work)."""


class DelayedJoin(GroupOperation):
    """Completes when every known member has rejoined, or at the rebalance timeout."""

    def try_complete(self) -> bool:
        return self.callbacks.try_complete_join(self)

    def on_complete(self) -> None:
        self.callbacks.on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an empty group waits `group.initial.rebalance.delay.ms`, and
    again (up to the rebalance timeout) while new members keep arriving, so a group that
    starts many consumers at once does not rebalance once per consumer."""

    def __init__(
        self,
        callbacks: RebalanceCallbacks,
        group: GroupMetadata,
        configured_delay_ms: int,
        delay_ms: int,
        remaining_ms: int,
    ) -> None:
        super().__init__(callbacks, group, delay_ms)
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.configured_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - self.delay_ms, 0)
            self.callbacks.watch_join(
                InitialDelayedJoin(
                    self.callbacks, group, self.configured_delay_ms, delay, remaining
                )
            )
        else:
            super().on_complete()


class DelayedSync(GroupOperation):
    """After a join completes, members that never send SyncGroup are removed at the timeout."""

    def __init__(
        self,
        callbacks: RebalanceCallbacks,
        group: GroupMetadata,
        generation_id: int,
        delay_ms: int,
    ) -> None:
        super().__init__(callbacks, group, delay_ms)
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        return self.callbacks.try_complete_pending_sync(self)

    def on_expiration(self) -> None:
        self.callbacks.on_expire_pending_sync(self)


class DelayedHeartbeat(GroupOperation):
    """A member's session: expires (and the member is removed) unless a heartbeat arrives."""

    def __init__(
        self,
        callbacks: RebalanceCallbacks,
        group: GroupMetadata,
        member_id: str,
        is_pending: bool,
        timeout_ms: int,
    ) -> None:
        super().__init__(callbacks, group, timeout_ms)
        self.member_id = member_id
        self.is_pending = is_pending

    def try_complete(self) -> bool:
        return self.callbacks.try_complete_heartbeat(self)

    def on_expiration(self) -> None:
        self.callbacks.on_expire_heartbeat(self)
