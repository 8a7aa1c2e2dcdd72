"""The consumer groups other brokers coordinate, for the console, asked as an admin client
(kafka-ui, Redpanda Console) asks: each other live broker over its inter-broker listener,
with the broker's own client security, ListGroups (the groups it coordinates), then
DescribeGroups (state, members) and OffsetFetch (committed offsets) of those; the end of
each partition is this broker's replica's high watermark, or, without one here, ListOffsets
(latest) to the partition's leader (asked too for the partitions of this broker's own groups
that it holds no replica of, `far_ends`).

Only while a console is open (`ConsoleHub` runs `refresh` every few seconds); every request
is bounded (`TIMEOUT_S`). A broker that does not answer keeps its groups of the last answer
marked `stale`, and one INFO line says why until it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from wherry.common.topic_partition import TopicPartition
from wherry.observability.group_lag import group_entry
from wherry.observability.sources import BrokerSources
from wherry.outbound.client import RequestClient, RequestError
from wherry.outbound.connection import OutboundConnection

log = logging.getLogger(__name__)

TIMEOUT_S = 2.0
LIST_OFFSETS = (2, 7)
OFFSET_FETCH = (9, 8)
DESCRIBE_GROUPS = (15, 5)
LIST_GROUPS = (16, 4)
LATEST = -1


class RemoteGroups:
    def __init__(self, src: BrokerSources) -> None:
        self.src = src
        self.groups: dict[int, list[dict[str, Any]]] = {}  # coordinator -> its groups
        # The ends of partitions this broker's own groups committed but holds no replica of.
        self.far_ends: dict[TopicPartition, int] = {}
        self._clients: dict[int, tuple[str, OutboundConnection, RequestClient]] = {}
        self._failing: set[int] = set()

    def view(self) -> list[dict[str, Any]]:
        return [g for b in sorted(self.groups) for g in self.groups[b]]

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for _, conn, _ in clients.values():
            with contextlib.suppress(Exception):
                await conn.close()

    def _client(self, broker_id: int) -> RequestClient | None:
        ep = self.src.cache.endpoint(broker_id)
        if ep is None:
            return None
        peer = f"{ep.host}:{ep.port}"
        have = self._clients.get(broker_id)
        if have is not None and have[0] == peer:
            return have[2]
        if have is not None:
            have[1].abort()
        conn = OutboundConnection(ep.host, ep.port, connect_timeout_s=TIMEOUT_S,
                                  request_timeout_s=TIMEOUT_S, security=self.src.client_security())
        client = RequestClient(conn.connect, client_id=f"console-{self.src.broker_id}",
                               peer=peer)
        self._clients[broker_id] = (peer, conn, client)
        return client

    async def refresh(self) -> None:
        others = sorted(b for b in self.src.cache.brokers if b != self.src.broker_id)
        for gone in set(self.groups) - set(others):
            del self.groups[gone]
        results = await asyncio.gather(*(self._of(b) for b in others), return_exceptions=True)
        for b, result in zip(others, results, strict=True):
            if isinstance(result, BaseException):
                if b not in self._failing:
                    log.info("[Broker id=%d] console: the groups of broker %d are not known "
                             "now: %s", self.src.broker_id, b, result)
                self._failing.add(b)
                for g in self.groups.get(b, []):
                    g["stale"] = True
            else:
                self._failing.discard(b)
                self.groups[b] = result
        self.far_ends = await self._ends(self._local_partitions())

    def _local_partitions(self) -> set[TopicPartition]:
        coordinator = self.src.groups()
        if coordinator is None:
            return set()
        return {tp for g in coordinator.local_groups() for tp in g.all_offsets()}

    async def _of(self, broker_id: int) -> list[dict[str, Any]]:
        client = self._client(broker_id)
        if client is None:
            return []
        listed = await client.call(*LIST_GROUPS, {"states_filter": []})
        ids = sorted(g.group_id for g in listed.groups if g.protocol_type != "share")
        if not ids:
            return []
        described = await client.call(
            *DESCRIBE_GROUPS, {"groups": ids, "include_authorized_operations": False})
        fetched = await client.call(*OFFSET_FETCH, {
            "groups": [{"group_id": g, "topics": None} for g in ids], "require_stable": False})
        committed: dict[str, dict[TopicPartition, int]] = {}
        for g in fetched.groups:
            committed[g.group_id] = {
                TopicPartition(t.name, p.partition_index): int(p.committed_offset)
                for t in g.topics for p in t.partitions
                if p.committed_offset >= 0 and int(p.error_code) == 0
            }
        wanted = {tp for offsets in committed.values() for tp in offsets}
        ends = await self._ends(wanted)
        out = []
        for d in described.groups:
            if int(d.error_code) != 0:
                continue
            offsets = [
                {"topic": tp.topic, "partition": tp.partition, "committed": off,
                 "end": ends.get(tp),
                 "lag": None if ends.get(tp) is None else max(0, ends[tp] - off)}
                for tp, off in sorted(committed.get(d.group_id, {}).items())
            ]
            members = [
                {"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host}
                for m in sorted(d.members, key=lambda m: m.member_id)
            ]
            out.append(group_entry(d.group_id, broker_id, d.group_state, d.protocol_type,
                                   members, offsets))
        return out

    async def _ends(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's high watermark: this broker's replica's, else its leader's answer
        to ListOffsets (latest); a partition whose leader does not answer has none."""
        ends: dict[TopicPartition, int] = {}
        lm = self.src.log_manager()
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            plog = lm.get_log(tp) if lm is not None else None
            if plog is not None:
                ends[tp] = plog.high_watermark
                continue
            state = self.src.cache.partitions(tp.topic).get(tp.partition)
            if state is not None and state.leader >= 0:
                by_leader.setdefault(state.leader, []).append(tp)
        for leader, tps in sorted(by_leader.items()):
            client = self._client(leader)
            if client is None:
                continue
            topics: dict[str, list[dict[str, int]]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "current_leader_epoch": -1,
                     "timestamp": LATEST})
            try:
                answer = await client.call(*LIST_OFFSETS, {
                    "replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            except RequestError:
                continue
            for t in answer.topics:
                for p in t.partitions:
                    if int(p.error_code) == 0 and p.offset >= 0:
                        ends[TopicPartition(t.name, p.partition_index)] = int(p.offset)
        return ends
