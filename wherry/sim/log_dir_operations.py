"""Replicas moved between a broker's log dirs as simulated events, through its handlers.

An operator's DescribeLogDirs to a live broker, then AlterReplicaLogDirs moving one of the
replicas of the main topic it lists (logs with data) to another of its log dirs -- or to the
dir it is in, which cancels a move in progress -- go as frames through the broker's request
path. `wherry server`'s log-dir mover then fills a future log in the other dir and promotes it
(the last batches under the log's lock, the directory swap), its copies inline, while the
producers write, followers fetch, the broker crashes (losing what was never fsynced under
`--power-loss`), restarts and resumes the move. The world's checks of acknowledged records
hold across the moves. After healing, with every broker up (`settle_and_check`): no future
log is left (every move finished, or its replica left the broker), and no partition has a log
directory in two log dirs of a broker.
"""

from __future__ import annotations

import random
from typing import Final

from kio.schema.errors import ErrorCode

from wherry.log.dir_names import STRAY_DIR_SUFFIX, is_delete_dir, parse_future_dir_name
from wherry.sim.admin_client import AdminApi, AdminOperations, AdminWorld
from wherry.sim.invariants import InvariantViolation

__all__ = ["LogDirOperations"]

DESCRIBE_LOG_DIRS: Final = AdminApi("DescribeLogDirs", 35, 4, "results")
ALTER_REPLICA_LOG_DIRS: Final = AdminApi(
    "AlterReplicaLogDirs", 34, 2, "results", partitions="partitions"
)
STAY = 0.2  # how often the dir asked for is the one the replica is in (a move cancelled)


class LogDirOperations(AdminOperations):
    INTERVAL_MS = (150, 600)

    def __init__(self, world: AdminWorld, rng: random.Random, topic: str) -> None:
        super().__init__(world, rng)
        self.topic = topic

    async def step(self) -> None:
        """DescribeLogDirs of a live broker, then AlterReplicaLogDirs of one replica it
        lists."""
        live = self.admin.live_brokers()
        if not live:
            return
        rng = self.rng
        broker = rng.choice(live)
        described = await self.admin.call(broker, DESCRIBE_LOG_DIRS, {"topics": None})
        if described is None:
            return
        dirs = sorted(r.log_dir for r in described.results if r.error_code == ErrorCode.none)
        hosted = sorted(
            (t.name, p.partition_index, r.log_dir)
            for r in described.results
            for t in r.topics
            if t.name == self.topic
            for p in t.partitions
            if not p.is_future_key
        )
        if len(dirs) < 2 or not hosted:
            return
        topic, partition, current = rng.choice(hosted)
        others = [d for d in dirs if d != current]
        dest = current if rng.random() < STAY else rng.choice(others)
        about = f"{topic}-{partition} on broker {broker}"
        w = self.world
        w.log_fault(
            f"{w.now_ms()}: AlterReplicaLogDirs {about}: {_short(current)} -> {_short(dest)}"
        )
        body = {"dirs": [{"path": dest, "topics": [{"name": topic, "partitions": [partition]}]}]}
        await self.admin.ask(about, broker, ALTER_REPLICA_LOG_DIRS, body)

    # --- after healing -------------------------------------------------------------------------
    def check(self) -> None:
        for b in self.world.broker_ids:
            node = self.world.node(b)
            if node is None:
                raise InvariantViolation(f"broker {b} is down after healing")
            futures = sorted(str(f.topic_partition) for f in node.log_manager.future_logs())
            if futures:
                raise InvariantViolation(f"broker {b}: moves not finished after healing: {futures}")
            seen: dict[str, str] = {}
            for d in node.log_dirs:
                for child in sorted(d.iterdir()):
                    name = child.name
                    if not child.is_dir() or is_delete_dir(name) or name.endswith(STRAY_DIR_SUFFIX):
                        continue
                    if parse_future_dir_name(name) is not None:
                        raise InvariantViolation(f"broker {b}: a future log {child} is left")
                    if name in seen:
                        raise InvariantViolation(
                            f"broker {b}: {name} has a log in {seen[name]} and in {d.name}"
                        )
                    seen[name] = d.name


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]
