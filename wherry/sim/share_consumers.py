"""Share consumers (KIP-932) in the world simulation: clients that reach the brokers only by
request frames through the real handlers.

A `ShareConsumer` is one member of the share group `world_shares.GROUP`:
* ShareGroupHeartbeat (v1) to the group coordinator (found with FindCoordinator, `lookup.py`)
  every heartbeat interval, its member id one it chose; the answer's assignment says which
  partitions it fetches; fenced or unknown, it joins again at epoch 0;
* ShareFetch (v1) to an assigned partition's leader as a Metadata answer named it (a broker's
  cache may be behind: possibly a deposed leader, a zombie), asked again after an error or a
  lost answer, in a share session per broker as the real client keeps them: epoch 0 opens it
  with every partition it wants there, later epochs name only the partitions added and the
  ones to forget; an unknown session, a wrong epoch or a lost answer makes the next request
  open a new one. Acknowledgements of the previous records ride on the next ShareFetch to the
  same broker, or go as a ShareAcknowledge (v1) on the session;
* it acknowledges what it was handed after a while (mostly ACCEPT, some RELEASE) or never
  (its locks run out).
What the answers say goes to `world_shares.ShareLedger`.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode

from wherry.share.partition import AckType
from wherry.sim.lookup import ClusterView
from wherry.sim.network import CLIENT_ID
from wherry.sim.wire import SimClients
from wherry.sim.world_shares import GROUP, ShareLedger, ShareWorldConfig, World

__all__ = ["ShareConsumer"]

E = ErrorCode
SHARE_GROUP_HEARTBEAT_KEY: Final = 76
SHARE_FETCH_KEY: Final = 78
SHARE_ACKNOWLEDGE_KEY: Final = 79
VERSION: Final = 1
RETRIABLE = frozenset(
    {E.not_coordinator, E.coordinator_not_available, E.coordinator_load_in_progress}
)
SESSION_ERRORS = frozenset({E.share_session_not_found, E.invalid_share_session_epoch})

# partition -> offset -> acknowledge type
Acks = dict[int, dict[int, int]]


@dataclass(slots=True)
class _Session:
    """The consumer's side of its share session with one broker."""

    epoch: int = 0  # what the next request carries
    partitions: set[int] = field(default_factory=set)


def _batches(offsets: Mapping[int, int]) -> list[dict[str, Any]]:
    return [
        {"first_offset": o, "last_offset": o, "acknowledge_types": [t]}
        for o, t in sorted(offsets.items())
    ]


class ShareConsumer:
    def __init__(self, world: World, index: int, rng: random.Random, config: ShareWorldConfig,
                 ledger: ShareLedger, topic_id: uuid.UUID) -> None:
        self.world = world
        self.rng = rng
        self.config = config
        self.ledger = ledger
        self.topic_id = topic_id
        self.member_id = str(uuid.UUID(int=rng.getrandbits(128)))
        self.epoch = 0
        self.assigned: set[int] = set()
        self.sessions: dict[int, _Session] = {}
        self.pending: dict[int, Acks] = {}  # broker -> acknowledgements for the next fetch
        timeout = config.request_timeout_ms
        name = f"share-consumer-{index}"
        self.coordinator_clients = SimClients(world, CLIENT_ID, client_id=name, timeout_ms=timeout)
        self.clients = SimClients(world, CLIENT_ID, client_id=name, timeout_ms=timeout)
        self.view = ClusterView(self.coordinator_clients, world.broker_ids, rng)
        self.topic = world.tps[0].topic

    def tasks(self) -> list[Coroutine[Any, Any, None]]:
        """Its two loops: heartbeats, and fetches with their acknowledgements."""
        return [self.heartbeats(), self.fetches()]

    # --- membership ----------------------------------------------------------------------------
    async def heartbeats(self) -> None:
        while True:
            b = await self.view.coordinator(GROUP)
            if b is None:
                await asyncio.sleep(0.05)
                continue
            body = {
                "group_id": GROUP,
                "member_id": self.member_id,
                "member_epoch": self.epoch,
                "rack_id": None,
                "subscribed_topic_names": [self.topic] if self.epoch == 0 else None,
            }
            try:
                r = await self.coordinator_clients.call(b, SHARE_GROUP_HEARTBEAT_KEY, VERSION, body)
            except ConnectionError:
                self.view.forget_coordinator(GROUP)
                await asyncio.sleep(self.rng.uniform(20, 100) / 1000)
                continue
            if r.error_code in RETRIABLE:
                self.view.forget_coordinator(GROUP)
                await asyncio.sleep(self.rng.uniform(20, 100) / 1000)
                continue
            if r.error_code != E.none:  # fenced or unknown: give everything up and join again
                self.epoch, self.assigned = 0, set()
                continue
            self.epoch = int(r.member_epoch)
            if r.assignment is not None:
                self.assigned = {
                    int(p) for t in r.assignment.topic_partitions if t.topic_id == self.topic_id
                    for p in t.partitions
                }
            await asyncio.sleep(self.config.heartbeat_interval_ms / 1000)

    # --- fetching and acknowledging ------------------------------------------------------------
    async def fetches(self) -> None:
        rng = self.rng
        while True:
            await asyncio.sleep(rng.uniform(20, 100) / 1000)
            if not self.assigned:
                continue
            p = rng.choice(sorted(self.assigned))
            leaders = await self.view.leaders(self.topic)
            b = leaders.get(p)
            if b is None:
                self.view.forget_leaders(self.topic)
                continue
            got = await self._share_fetch(b, {q for q in self.assigned if leaders.get(q) == b})
            if not got or rng.random() < 0.1:
                continue  # nothing, or never acknowledged: the locks run out
            await asyncio.sleep(rng.uniform(0, 2 * self.config.lock_ms) / 1000)
            acks: Acks = {
                q: {o: int(AckType.ACCEPT) if rng.random() < 0.85 else int(AckType.RELEASE)
                    for o in offsets}
                for q, offsets in got.items()
            }
            if rng.random() < 0.5:
                await self._share_acknowledge(b, acks)
            else:
                self.pending[b] = acks  # carried by the next ShareFetch to `b`

    def _lost(self, b: int) -> None:
        """No usable answer from `b`: its session is given up (the next request opens one),
        and the leaders are asked for again."""
        self.sessions.pop(b, None)
        self.pending.pop(b, None)
        self.view.forget_leaders(self.topic)

    async def _share_fetch(self, b: int, wanted: set[int]) -> dict[int, list[int]]:
        """One ShareFetch to `b` for the partitions it leads: the offsets handed over, by
        partition."""
        session = self.sessions.setdefault(b, _Session())
        acks = {p: a for p, a in self.pending.pop(b, {}).items() if p in wanted}
        if session.epoch == 0:
            acks = {}  # a new session holds nothing to acknowledge
            session.partitions = set()
        named = sorted((wanted - session.partitions) | set(acks))
        forgotten = sorted(session.partitions - wanted)
        body = {
            "group_id": GROUP,
            "member_id": self.member_id,
            "share_session_epoch": session.epoch,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": self.config.max_records,
            "batch_size": self.config.max_records,
            "topics": [{"topic_id": self.topic_id, "partitions": [
                {"partition_index": p, "acknowledgement_batches": _batches(acks.get(p, {}))}
                for p in named
            ]}] if named else [],
            "forgotten_topics_data": (
                [{"topic_id": self.topic_id, "partitions": forgotten}] if forgotten else []
            ),
        }
        try:
            r = await self.clients.call(b, SHARE_FETCH_KEY, VERSION, body)
        except ConnectionError:
            self._lost(b)
            return {}
        if r.error_code != E.none:
            self._lost(b)
            return {}
        session.epoch += 1
        session.partitions = (session.partitions | set(named)) - set(forgotten)
        return self._fetched(b, r, acks)

    def _fetched(self, b: int, r: Any, acks: Acks) -> dict[int, list[int]]:
        got: dict[int, list[int]] = {}
        for part in self._partitions(r):
            p = int(part.partition_index)
            if p in acks and part.acknowledge_error_code == E.none:
                self._accepted(b, p, acks[p])
            ranges = [(int(a.first_offset), int(a.last_offset), int(a.delivery_count))
                      for a in part.acquired_records]
            if part.error_code != E.none:
                self.view.forget_leaders(self.topic)  # not the leader (any more)
            if part.error_code != E.none or not ranges:
                continue
            self.ledger.handed_over(b, self.member_id, p, ranges, bytes(part.records or b""),
                                    self.config.delivery_limit)
            got[p] = [o for first, last, _ in ranges for o in range(first, last + 1)]
        return got

    def _partitions(self, r: Any) -> Iterator[Any]:
        """The partitions of the simulation's topic in a ShareFetch / ShareAcknowledge answer."""
        for t in r.responses:
            if t.topic_id == self.topic_id:
                yield from t.partitions

    def _accepted(self, b: int, p: int, acks: Mapping[int, int]) -> None:
        offsets = [o for o, t in acks.items() if t == AckType.ACCEPT]
        self.ledger.accepted_by(b, self.member_id, p, offsets)

    async def _share_acknowledge(self, b: int, acks: Acks) -> None:
        session = self.sessions.get(b)
        if session is None or session.epoch == 0:
            return  # no session there any more: what it held has gone back
        body = {
            "group_id": GROUP,
            "member_id": self.member_id,
            "share_session_epoch": session.epoch,
            "topics": [{"topic_id": self.topic_id, "partitions": [
                {"partition_index": p, "acknowledgement_batches": _batches(a)}
                for p, a in sorted(acks.items())
            ]}],
        }
        try:
            r = await self.clients.call(b, SHARE_ACKNOWLEDGE_KEY, VERSION, body)
        except ConnectionError:
            self._lost(b)  # unknown outcome: not counted as accepted
            return
        if r.error_code != E.none:
            self._lost(b)
            return
        session.epoch += 1
        for part in self._partitions(r):
            p = int(part.partition_index)
            if p in acks and part.error_code == E.none:
                self._accepted(b, p, acks[p])
