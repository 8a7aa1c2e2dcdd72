"""The JSON files of `wherry reassign`, `wherry elect` and `wherry delete-records`, in Kafka's
formats (pure).

* topics to move (`generate --topics-to-move-json-file`):
  `{"version":1,"topics":[{"topic":"foo"}]}`
* a reassignment (`execute`, `verify`, `cancel --reassignment-json-file`, and what `generate`
  prints): `{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],
  "log_dirs":["any","any"]}]}` (`log_dirs` optional: "any", or the absolute path of the
  log directory the replica is to move to on its broker)
* partitions to elect (`elect --path-to-json-file`): `{"partitions":[{"topic":"t","partition":0}]}`
* offsets to delete records below (`delete-records --offset-json-file`):
  `{"version":1,"partitions":[{"topic":"t","partition":0,"offset":5}]}` (offset -1: the high
  watermark, every record)

Parsing checks everything Kafka's tools check, with their messages, and raises CommandError.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wherry.cli.common import CommandError

TP = tuple[str, int]
Replica = tuple[str, int, int]
"""(topic, partition, broker): Kafka's TopicPartitionReplica."""
ANY_LOG_DIR = "any"


def tp_str(tp: TP) -> str:
    """Kafka's TopicPartition.toString(): `topic-partition`."""
    return f"{tp[0]}-{tp[1]}"


def replica_str(replica: Replica) -> str:
    """Kafka's TopicPartitionReplica.toString(): `topic-partition-broker`."""
    return f"{replica[0]}-{replica[1]}-{replica[2]}"


def tps_str(tps: Iterable[TP], sep: str = ",") -> str:
    return sep.join(tp_str(tp) for tp in sorted(tps))


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise CommandError(f"The input string is not a valid JSON: {e}") from e


def _version(js: Mapping[str, Any]) -> int:
    version = js.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise CommandError(f"Not supported version field value {version}")
    return 1


def _object(js: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(js, dict):
        raise CommandError(f"Expected a JSON object for {what}, got {json.dumps(js)}")
    return js


def _list(js: Mapping[str, Any], key: str, what: str) -> list[Any]:
    value = js.get(key, [])
    if not isinstance(value, list):
        raise CommandError(f"Expected a JSON array for '{key}' in {what}")
    return value


def _field(js: Mapping[str, Any], key: str, kind: type, what: str) -> Any:
    if key not in js:
        raise CommandError(f"No such field exists: `{key}` in {what}")
    value = js[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CommandError(f"Field `{key}` of {what} must be {_KIND[kind]}, "
                           f"got {json.dumps(value)}")
    return value


_KIND = {str: "a string", int: "an integer", list: "an array"}


def _tp(entry: Any, what: str) -> TP:
    obj = _object(entry, what)
    topic = _field(obj, "topic", str, what)
    partition = _field(obj, "partition", int, what)
    if partition < 0:
        raise CommandError(f"Invalid partition {partition} of topic {topic} in {what}")
    return topic, partition


def _duplicates(items: Sequence[Any]) -> list[Any]:
    seen: set[Any] = set()
    dups: list[Any] = []
    for item in items:
        if item in seen and item not in dups:
            dups.append(item)
        seen.add(item)
    return sorted(dups)


# --------------------------------------------------------------------------------------------
# Topics to move


def parse_topics_to_move(text: str) -> list[str]:
    js = _object(_load(text), "the topics to move")
    _version(js)
    topics = [_field(_object(t, "a topic"), "topic", str, "a topic")
              for t in _list(js, "topics", "the topics to move")]
    dups = _duplicates(topics)
    if dups:
        raise CommandError(
            f"List of topics to reassign contains duplicate entries: {', '.join(dups)}")
    if not topics:
        raise CommandError("The topics to move are empty")
    return topics


def parse_broker_list(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",")]
    except ValueError as e:
        raise CommandError(f"Invalid broker list {text!r}: {e}") from e
    dups = _duplicates(brokers)
    if dups:
        raise CommandError(f"Broker list contains duplicate entries: {','.join(map(str, dups))}")
    return brokers


# --------------------------------------------------------------------------------------------
# Reassignments


def parse_reassignment(text: str) -> dict[TP, list[int]]:
    """The partitions and their target replicas (see `parse_reassignment_with_dirs`)."""
    return parse_reassignment_with_dirs(text)[0]


def parse_reassignment_with_dirs(text: str) -> tuple[dict[TP, list[int]], dict[Replica, str]]:
    """The partitions and their target replicas, checked like Kafka's
    parseExecuteAssignmentArgs (empty list, empty replicas, duplicates), and the replicas
    with a log dir other than "any" (topic, partition, broker) -> absolute path."""
    js = _object(_load(text), "the reassignment")
    _version(js)
    entries: list[tuple[TP, list[int]]] = []
    dirs: dict[Replica, str] = {}
    for raw in _list(js, "partitions", "the reassignment"):
        tp = _tp(raw, "a partition")
        what = f"partition {tp_str(tp)}"
        replicas = _field(raw, "replicas", list, what)
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
            raise CommandError(f"Replicas of {what} must be broker ids (integers): "
                               f"{json.dumps(replicas)}")
        dirs.update(_log_dirs(raw, tp, replicas))
        entries.append((tp, list(replicas)))
    if not entries:
        raise CommandError("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in entries):
        raise CommandError("Partition replica list cannot be empty")
    dup_tps = _duplicates([tp for tp, _ in entries])
    if dup_tps:
        raise CommandError("Partition reassignment contains duplicate topic partitions: "
                           + tps_str(dup_tps))
    dup_replicas = [f"{tp_str(tp)} contains multiple entries for "
                    f"{','.join(map(str, _duplicates(replicas)))}"
                    for tp, replicas in sorted(entries) if _duplicates(replicas)]
    if dup_replicas:
        raise CommandError("Partition replica lists may not contain duplicate entries: "
                           + ". ".join(dup_replicas))
    return dict(entries), dirs


def _log_dirs(raw: Mapping[str, Any], tp: TP, replicas: list[int]) -> dict[Replica, str]:
    """A partition's `log_dirs` (default: all "any"): Kafka's size check, then each dir "any"
    or an absolute path (Kafka's tool leaves that check to the broker's LOG_DIR_NOT_FOUND)."""
    log_dirs = raw.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
    if not isinstance(log_dirs, list) or not all(isinstance(d, str) for d in log_dirs):
        raise CommandError(f"Field `log_dirs` of partition {tp_str(tp)} must be an array of "
                           f"strings, got {json.dumps(log_dirs)}")
    if len(log_dirs) != len(replicas):
        raise CommandError(f"Size of replicas list {_java_list(replicas)} is different from "
                           f"size of log dirs list {_java_list(log_dirs)} for partition "
                           f"{tp_str(tp)}")
    out: dict[Replica, str] = {}
    for broker, log_dir in zip(replicas, log_dirs, strict=True):
        if log_dir == ANY_LOG_DIR:
            continue
        if not log_dir.startswith("/"):
            raise CommandError(
                f"Invalid log dir {json.dumps(log_dir)} for replica {broker} of partition "
                f"{tp_str(tp)}: a log dir must be either \"any\" or the absolute path of the "
                "log directory on the broker")
        out[(tp[0], tp[1], broker)] = log_dir
    return out


def _java_list(items: Sequence[Any]) -> str:
    """Java's List.toString(): `[1, 2]`, `[/a, any]`."""
    return "[" + ", ".join(map(str, items)) + "]"


def format_reassignment(assignment: Mapping[TP, Sequence[int]]) -> str:
    """Kafka's formatAsReassignmentJson: compact, partitions sorted, every log dir "any"."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(assignment[(t, p)]),
         "log_dirs": [ANY_LOG_DIR] * len(assignment[(t, p)])}
        for t, p in sorted(assignment)
    ]}, separators=(",", ":"))


# --------------------------------------------------------------------------------------------
# Leader election


def parse_election_partitions(text: str) -> list[TP]:
    js = _load(text)
    if js is None:
        raise CommandError("Replica election data is empty")
    obj = _object(js, "the replica election data")
    if "partitions" not in obj:
        raise CommandError('Replica election data is missing "partitions" field')
    tps = [_tp(p, "a partition") for p in _list(obj, "partitions", "the election data")]
    dups = _duplicates(tps)
    if dups:
        raise CommandError("Replica election data contains duplicate partitions: "
                           + tps_str(dups))
    return sorted(tps)


# --------------------------------------------------------------------------------------------
# Records to delete


def parse_offsets_to_delete(text: str) -> dict[TP, int]:
    """Each partition's offset to delete the records below (Kafka's DeleteRecordsCommand)."""
    js = _object(_load(text), "the offset json file")
    _version(js)
    if "partitions" not in js:
        raise CommandError("Missing partitions field")
    offsets: list[tuple[TP, int]] = []
    for entry in _list(js, "partitions", "the offset json file"):
        tp = _tp(entry, "a partition")
        offsets.append((tp, _field(entry, "offset", int, "a partition")))
    dups = _duplicates([tp for tp, _ in offsets])
    if dups:
        raise CommandError("Offset json file contains duplicate topic partitions: "
                           + tps_str(dups))
    return dict(offsets)
