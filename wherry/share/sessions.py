"""Share sessions (KIP-932's ShareSessionCache), pure.

A share consumer opens a session with each partition leader it fetches from (ShareFetch with
`share_session_epoch` 0), then sends epoch 1, 2, ... so that a request names only what
changed: partitions it adds, and forgotten ones. Epoch -1 closes the session (its last
acknowledgements ride on that request). A session idle longer than the eviction time is
dropped; a request on it then gets SHARE_SESSION_NOT_FOUND and the client opens a new one.
A session belongs to the client connection that last used it: when that connection closes
the session is closed with it (Kafka's share session cache does the same), so what the
member held goes back to the other members at once rather than after its locks expire.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "ShareSession", "ShareSessionCache"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    last_used_ms: int
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    connection_id: int = -1


class ShareSessionCache:
    def __init__(self, *, max_sessions: int = 1_000, evict_after_ms: int = 120_000) -> None:
        self.max_sessions = max_sessions
        self.evict_after_ms = evict_after_ms
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def open(
        self, group_id: str, member_id: str, now_ms: int, connection_id: int = -1
    ) -> ShareSession | ErrorCode:
        """A new session for the member (a previous one is replaced: the caller releases what
        the old one held)."""
        key = (group_id, member_id)
        if key not in self.sessions and len(self.sessions) >= self.max_sessions:
            self.evict(now_ms)
            if len(self.sessions) >= self.max_sessions:
                return ErrorCode.share_session_limit_reached
        s = ShareSession(group_id, member_id, 1, now_ms, connection_id=connection_id)
        self.sessions[key] = s
        return s

    def use(
        self, group_id: str, member_id: str, epoch: int, now_ms: int, connection_id: int = -1
    ) -> ShareSession | ErrorCode:
        """The session a request with `epoch` >= 1 continues; its epoch moves on."""
        s = self.sessions.get((group_id, member_id))
        if s is None:
            return ErrorCode.share_session_not_found
        if s.epoch != epoch:
            return ErrorCode.invalid_share_session_epoch
        s.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
        s.last_used_ms = now_ms
        if connection_id >= 0:
            s.connection_id = connection_id
        return s

    def peek(self, group_id: str, member_id: str, epoch: int) -> ShareSession | ErrorCode:
        """Check a request's epoch against the session without moving it on."""
        s = self.sessions.get((group_id, member_id))
        if s is None:
            return ErrorCode.share_session_not_found
        if s.epoch != epoch:
            return ErrorCode.invalid_share_session_epoch
        return s

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def close_connection(self, connection_id: int) -> list[ShareSession]:
        """Close the sessions of a connection that is gone; the sessions closed."""
        gone = [s for s in self.sessions.values() if s.connection_id == connection_id >= 0]
        for s in gone:
            del self.sessions[(s.group_id, s.member_id)]
        return gone

    def evict(self, now_ms: int) -> list[ShareSession]:
        gone = [
            s for s in self.sessions.values() if now_ms - s.last_used_ms >= self.evict_after_ms
        ]
        for s in gone:
            del self.sessions[(s.group_id, s.member_id)]
        return gone
