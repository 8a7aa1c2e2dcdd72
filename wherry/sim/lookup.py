"""What a simulated client knows of the cluster, as a Kafka client learns it: its coordinator
from FindCoordinator, partition leaders from Metadata, each asked of a broker it picks among
the bootstrap servers (every broker of the world) in request frames through that broker's real
handlers (the next one when a broker does not answer, as a client goes through its bootstrap
list), and kept until an error or a lost answer says to ask again. A broker answers from
its own metadata cache, which may be behind: a client may go to a deposed leader or
coordinator, as a real one does, and learns better from the error it gets there.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from wherry.sim.wire import SimClients

__all__ = ["GROUP_KEY_TYPE", "TRANSACTION_KEY_TYPE", "ClusterView"]

METADATA_KEY: Final = 3
METADATA_VERSION: Final = 12
FIND_COORDINATOR_KEY: Final = 10
FIND_COORDINATOR_VERSION: Final = 4
GROUP_KEY_TYPE: Final = 0
TRANSACTION_KEY_TYPE: Final = 1


class ClusterView:
    """One client's view: its coordinator and the leaders of the topics it reads."""

    def __init__(self, clients: SimClients, bootstrap: Sequence[int], rng: random.Random) -> None:
        self.clients = clients
        self.bootstrap = list(bootstrap)
        self.rng = rng
        self._coordinators: dict[tuple[int, str], int] = {}
        self._leaders: dict[str, dict[int, int]] = {}

    async def _ask(self, api_key: int, version: int, body: dict[str, Any]) -> Any | None:
        """The first answer of the bootstrap brokers, in a random order; None when none
        answered."""
        for b in self.rng.sample(self.bootstrap, len(self.bootstrap)):
            try:
                return await self.clients.call(b, api_key, version, body)
            except ConnectionError:
                continue
        return None

    async def coordinator(self, key: str, key_type: int = GROUP_KEY_TYPE) -> int | None:
        """The coordinator of `key` (a group by default); None while no broker names one."""
        known = self._coordinators.get((key_type, key))
        if known is not None:
            return known
        body = {"key_type": key_type, "coordinator_keys": [key]}
        r = await self._ask(FIND_COORDINATOR_KEY, FIND_COORDINATOR_VERSION, body)
        if r is None:
            return None
        for c in r.coordinators:
            if c.error_code == ErrorCode.none and c.node_id >= 0:
                self._coordinators[(key_type, key)] = int(c.node_id)
                return int(c.node_id)
        return None

    def forget_coordinator(self, key: str, key_type: int = GROUP_KEY_TYPE) -> None:
        """It moved, or it is unreachable: find it again."""
        self._coordinators.pop((key_type, key), None)

    async def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> leader of `topic`, as some broker's Metadata answer had them (partitions
        without a leader left out); asked again after `forget_leaders`."""
        known = self._leaders.get(topic)
        if known is not None:
            return known
        body = {
            "topics": [{"topic_id": None, "name": topic}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        r = await self._ask(METADATA_KEY, METADATA_VERSION, body)
        if r is None:
            return {}
        leaders = {
            int(p.partition_index): int(p.leader_id)
            for t in r.topics
            if t.name == topic and t.error_code == ErrorCode.none
            for p in t.partitions
            if p.error_code == ErrorCode.none and p.leader_id >= 0
        }
        if leaders:
            self._leaders[topic] = leaders
        return leaders

    def forget_leaders(self, topic: str) -> None:
        self._leaders.pop(topic, None)
