"""AlterReplicaLogDirs (key 34): move replicas of this broker to other log dirs of it
(kafka-reassign-partitions with log dirs, `AdminClient.alterReplicaLogDirs`).

As Kafka's `ReplicaManager.alterReplicaLogDirs`: ALTER on the cluster (else
CLUSTER_AUTHORIZATION_FAILED for every partition); per partition, in this order, a topic name
too long for the future log's directory name gets INVALID_TOPIC_EXCEPTION, a dir that is not
one of `log.dirs` (absolute path) LOG_DIR_NOT_FOUND, a dir that cannot be written
KAFKA_STORAGE_ERROR; a replica this broker does not hold gets REPLICA_NOT_AVAILABLE, or
UNKNOWN_TOPIC_OR_PARTITION when the cluster has no such partition (the dir is remembered for
when the replica is created here). Otherwise NONE: a future log is created in the dir
and filled in the background (`replication/log_dir_mover.py`) while the current log keeps
serving; the dir the replica is already in cancels a move in progress and changes nothing
else. DescribeLogDirs shows a future log with `is_future_key`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.dir_names import future_dir_fits
from wherry.log.errors import LogError
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster

if TYPE_CHECKING:
    from wherry.log.manager import LogManager
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _requested(req: Request) -> dict[TopicPartition, str]:
    """Partition -> destination dir; a partition named twice goes where it was named last."""
    wanted: dict[TopicPartition, str] = {}
    for d in req.body.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted[TopicPartition(t.name, int(p))] = d.path
    return wanted


def _start_moves(lm: LogManager, moves: list[tuple[TopicPartition, Path]]) -> dict[
        TopicPartition, ErrorCode]:
    """Create the future logs (blocking I/O: the replica node's `run_blocking`)."""
    out: dict[TopicPartition, ErrorCode] = {}
    for tp, dest in moves:
        try:
            lm.create_future_log(tp, dest)
            out[tp] = ErrorCode.none
        except LogError as e:
            out[tp] = e.error_code if e.error_code != ErrorCode.unknown_server_error else (
                ErrorCode.kafka_storage_error)
        except OSError:
            out[tp] = ErrorCode.kafka_storage_error
    return out


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    wanted = _requested(req)
    results: dict[TopicPartition, ErrorCode] = {}
    if not authorize_cluster(broker, AclOperation.ALTER):
        results = dict.fromkeys(wanted, ErrorCode.cluster_authorization_failed)
    else:
        lm = broker.replica_manager.log_manager
        moves: list[tuple[TopicPartition, Path]] = []
        for tp, path in wanted.items():
            if not future_dir_fits(tp):
                results[tp] = ErrorCode.invalid_topic_exception
                continue
            try:
                dest = lm.log_dir_online(path)
            except LogError as e:
                results[tp] = e.error_code
                continue
            if lm.get_log(tp) is None:
                lm.set_preferred_dir(tp, dest)
                known = broker.cache.partition(tp.topic, tp.partition) is not None
                results[tp] = (
                    ErrorCode.replica_not_available if known
                    else ErrorCode.unknown_topic_or_partition
                )
                continue
            moves.append((tp, dest))
        if moves:
            results.update(await broker.node.run_blocking(lambda: _start_moves(lm, moves)))
            broker.log_dir_mover.kick()
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, err in results.items():
        by_topic[tp.topic].append({"partition_index": tp.partition, "error_code": err})
    return {
        "throttle_time": 0,
        "results": [
            {"topic_name": topic, "partitions": sorted(parts, key=lambda p: p["partition_index"])}
            for topic, parts in by_topic.items()
        ],
    }
