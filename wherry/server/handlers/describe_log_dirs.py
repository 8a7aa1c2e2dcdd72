"""DescribeLogDirs (key 35): this broker's log directories and the partitions in each
(kafka-log-dirs --describe).

As Kafka's `ReplicaManager.describeLogDirs`: every log directory with the logs it holds
(all of them, or those of the requested partitions), each log's size (the bytes of its
segments) and offset lag `max(0, HW - LEO)`; a future log (a replica being moved there by
AlterReplicaLogDirs) is listed in its dir with `is_future_key` and the lag
`max(0, current LEO - future LEO)`. A log dir taken offline by an I/O error (KIP-112) is
listed with KAFKA_STORAGE_ERROR and no partitions, as Kafka lists it. Versions 1-4 (kio has
no v0; Kafka 4 dropped it); v4 adds the volume's total and usable bytes.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster

if TYPE_CHECKING:
    from wherry.log.log import Log
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

UNKNOWN_BYTES = -1


def _wanted(req: Request) -> set[TopicPartition] | None:
    topics = req.body.topics
    if topics is None:
        return None
    return {TopicPartition(t.topic, p) for t in topics for p in t.partitions}


def _volume(path: Path) -> tuple[int, int]:
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return UNKNOWN_BYTES, UNKNOWN_BYTES
    return usage.total, usage.free


def _partition(plog: Log, current: Log | None = None) -> dict[str, Any]:
    """A log's entry; `current` is given for a future log (its lag is behind the current)."""
    if current is None:
        lag = plog.high_watermark - plog.log_end_offset
    else:
        lag = current.log_end_offset - plog.log_end_offset
    return {
        "partition_index": plog.topic_partition.partition,
        "partition_size": plog.size_in_bytes,
        "offset_lag": max(0, lag),
        "is_future_key": current is not None,
    }


def _partition_index(partition: Mapping[str, Any]) -> int:
    return int(partition["partition_index"])


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    if not authorize_cluster(broker, AclOperation.DESCRIBE):
        # Kafka: DESCRIBE on the cluster, else no log dirs and the top-level error (v3+;
        # older versions show only the empty list).
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "results": [],
        }
    manager = broker.replica_manager.log_manager
    wanted = _wanted(req)
    by_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {d: {} for d in manager.log_dirs}
    logs, futures = manager.placements()
    for plog, where in logs:
        if (wanted is None or plog.topic_partition in wanted) and where in by_dir:
            by_dir[where].setdefault(plog.topic_partition.topic, []).append(_partition(plog))
    for future, where, current in futures:
        if (wanted is None or future.topic_partition in wanted) and where in by_dir:
            by_dir[where].setdefault(future.topic_partition.topic, []).append(
                _partition(future, current))
    results: list[dict[str, Any]] = []
    for log_dir, topics in by_dir.items():
        if manager.is_dir_offline(log_dir):
            results.append(
                {
                    "error_code": ErrorCode.kafka_storage_error,
                    "log_dir": str(log_dir),
                    "topics": [],
                    "total_bytes": UNKNOWN_BYTES,
                    "usable_bytes": UNKNOWN_BYTES,
                }
            )
            continue
        total, usable = _volume(log_dir)
        entries: list[dict[str, Any]] = [
            {"name": name, "partitions": sorted(parts, key=_partition_index)}
            for name, parts in sorted(topics.items())
        ]
        results.append(
            {
                "error_code": ErrorCode.none,
                "log_dir": str(log_dir),
                "topics": entries,
                "total_bytes": total,
                "usable_bytes": usable,
            }
        )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": results}
