"""`wherry reassign`'s moves of replicas between a broker's log directories.

A reassignment JSON whose `log_dirs` name a directory (not "any") asks for the replica to end in
that directory of its broker. As Kafka's ReassignPartitionsCommand: `execute` sends
AlterReplicaLogDirs (API 34) to each broker concerned -- again and again while the broker
answers REPLICA_NOT_AVAILABLE (a replica the partition reassignment has not created there yet),
until the timeout -- and `verify` reads each replica's current and future directory from the
broker's DescribeLogDirs (API 35). librdkafka has neither call, so both go to the brokers
directly with wherry's outbound client. The states and Kafka's sentences for them are pure.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.cli.common import CommandError
from wherry.cli.kafka_errors import kafka_error_text
from wherry.cli.log_dirs import DESCRIBE_LOG_DIRS, call_broker
from wherry.cli.reassign_json import Replica, replica_str
from wherry.outbound.client import RequestError

ALTER_REPLICA_LOG_DIRS = 34
ALTER_VERSION = 1
DESCRIBE_VERSION = 1
RETRY_INTERVAL_S = 0.1
CLIENT_ID = "reassign-partitions-tool"

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ReplicaDirs:
    """Where a replica is on its broker: its current log dir and the one it moves to."""

    current: str | None
    future: str | None


def _same_dir(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


# ----------------------------------------------------------------------------------- on the wire


def _alter_body(moves: Mapping[Replica, str]) -> dict[str, Any]:
    by_dir: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (topic, partition, _), path in sorted(moves.items()):
        by_dir[path][topic].append(partition)
    return {"dirs": [{"path": path, "topics": [{"name": t, "partitions": ps}
                                               for t, ps in topics.items()]}
                     for path, topics in by_dir.items()]}


async def _gather(calls: Mapping[int, Any]) -> dict[int, Any]:
    answers = await asyncio.gather(*calls.values())
    return dict(zip(calls, answers, strict=True))


def _ask_each(addresses: Mapping[int, Address], api: tuple[int, int],
              bodies: Mapping[int, Any], timeout_s: float, name: str) -> dict[int, Any]:
    """One request to each broker of `bodies` (broker -> request body), all at once."""
    unknown = sorted(b for b in bodies if b not in addresses)
    if unknown:
        raise CommandError(f"Unknown broker id{'s' if len(unknown) > 1 else ''} "
                           f"{','.join(map(str, unknown))}")
    calls = {b: call_broker(addresses[b], api[0], api[1], body, timeout_s, CLIENT_ID)
             for b, body in sorted(bodies.items())}
    try:
        return asyncio.run(_gather(calls))
    except RequestError as e:
        raise CommandError(f"{name} failed: {e}") from e


def alter_replica_log_dirs(addresses: Mapping[int, Address], moves: Mapping[Replica, str],
                           timeout_s: float) -> dict[Replica, int]:
    """AlterReplicaLogDirs to each broker of `moves`; replica -> the broker's error code."""
    bodies = {b: _alter_body({r: d for r, d in moves.items() if r[2] == b})
              for b in {b for _, _, b in moves}}
    answers = _ask_each(addresses, (ALTER_REPLICA_LOG_DIRS, ALTER_VERSION), bodies, timeout_s,
                        "AlterReplicaLogDirs")
    out: dict[Replica, int] = {}
    for broker, response in answers.items():
        for t in response.results:
            for p in t.partitions:
                out[(str(t.topic_name), int(p.partition_index), broker)] = int(p.error_code)
    for replica in moves:
        out.setdefault(replica, int(ErrorCode.unknown_server_error))
    return out


def describe_replica_dirs(addresses: Mapping[int, Address], replicas: set[Replica],
                          timeout_s: float) -> dict[Replica, ReplicaDirs]:
    """Kafka's describeReplicaLogDirs: each replica the brokers hold (absent: not held)."""
    bodies = {b: {"topics": None} for _, _, b in replicas}
    answers = _ask_each(addresses, (DESCRIBE_LOG_DIRS, DESCRIBE_VERSION), bodies, timeout_s,
                        "DescribeLogDirs")
    current: dict[Replica, str] = {}
    future: dict[Replica, str] = {}
    for broker, response in answers.items():
        for result in response.results:
            if int(result.error_code):
                continue  # an offline log dir: its replicas are not found
            for t in result.topics:
                for p in t.partitions:
                    replica = (str(t.name), int(p.partition_index), broker)
                    if replica in replicas:
                        (future if p.is_future_key else current)[replica] = str(result.log_dir)
    return {r: ReplicaDirs(current.get(r), future.get(r))
            for r in replicas if r in current or r in future}


def start_moves(addresses: Mapping[int, Address], moves: Mapping[Replica, str],
                timeout_s: float, wait_s: float, echo: Callable[[str], None],
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> None:
    """Kafka's executeMoves: AlterReplicaLogDirs until every move has started; a replica not
    on its broker yet (REPLICA_NOT_AVAILABLE) is asked again until `wait_s` have passed."""
    deadline = clock() + wait_s
    pending = dict(moves)
    while pending:
        errors = alter_replica_log_dirs(addresses, pending, timeout_s)
        for replica in sorted(pending):
            code = errors[replica]
            if code == ErrorCode.replica_not_available:
                continue
            if code:
                raise CommandError(f"Failed to alter dir for {replica_str(replica)}: "
                                   f"{kafka_error_text(code)}")
            echo(f"Successfully started moving log directory to {pending[replica]} for "
                 f"replica {replica[0]}-{replica[1]} with broker {replica[2]} ")
            del pending[replica]
        if not pending:
            break
        if clock() >= deadline:
            raise CommandError(
                f"Timed out before log directory move{'' if len(pending) == 1 else 's'} could "
                f"be started for: {','.join(replica_str(r) for r in sorted(pending))}")
        sleep(RETRY_INTERVAL_S)


# ------------------------------------------------------------------------------- states (pure)


def move_status_lines(targets: Mapping[Replica, str], found: Mapping[Replica, ReplicaDirs]
                      ) -> tuple[list[str], bool]:
    """Kafka's replicaMoveStatesToString, and whether every move is done (completed, or
    cancelled: the replica is in another dir with no move under way)."""
    lines: list[str] = []
    all_done = True
    for replica in sorted(targets):
        target = targets[replica]
        topic_partition = f"{replica[0]}-{replica[1]}"
        dirs = found.get(replica)
        if dirs is None:
            all_done = False
            lines.append(f"Partition {topic_partition} cannot be found in any live log "
                         f"directory on broker {replica[2]}.")
        elif dirs.current is None:
            all_done = False
            lines.append(f"Partition {topic_partition} is not found in any live log dir on "
                         f"broker {replica[2]}. There is likely an offline log directory on "
                         "the broker.")
        elif dirs.future is not None:
            all_done = False
            if _same_dir(dirs.future, target):
                lines.append(f"Reassignment of replica {replica_str(replica)} is still in "
                             "progress.")
            else:
                lines.append(f"Partition {topic_partition} on broker {replica[2]} is being "
                             f"moved to log dir {dirs.future} instead of {target}.")
        elif _same_dir(dirs.current, target):
            lines.append(f"Reassignment of replica {replica_str(replica)} completed "
                         "successfully.")
        else:
            lines.append(f"Partition {topic_partition} on broker {replica[2]} is not being "
                         f"moved from log dir {dirs.current} to {target}.")
    return lines, all_done
