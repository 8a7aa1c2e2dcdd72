"""The names of partition directories inside a log dir, as Kafka names them.

* `<topic>-<partition>`: a partition's log.
* `<topic>-<partition>.<unique id>-delete`: a deleted log waiting for its files to go. The name
  must fit the file system's 255 bytes: a long topic is cut (Kafka's `logDeleteDirName`, the
  topic part shortened to what the `-<partition>.<unique id>-delete` tail leaves). Such a
  directory is recognised by its suffix alone; its topic is never read back.
* `<topic>-<partition>.<unique id>-future`: a future log of AlterReplicaLogDirs (Kafka's
  `logFutureDirName`). Its topic must be read back at startup, so it is never shortened: a
  partition whose future name would not fit is refused a move with INVALID_TOPIC_EXCEPTION, as
  Kafka refuses it ("The topic name is too long.").
* `-stray` likewise for a replica a broker holds outside its assignment (shortened as `-delete`).

The unique id is a UUID's 32 hex digits. Pure: names only, no I/O.
"""

from __future__ import annotations

from wherry.common.topic_partition import TopicPartition

__all__ = [
    "DELETE_DIR_SUFFIX",
    "FUTURE_DIR_SUFFIX",
    "MAX_DIR_NAME_BYTES",
    "STRAY_DIR_SUFFIX",
    "delete_dir_name",
    "future_dir_fits",
    "future_dir_name",
    "is_delete_dir",
    "parse_future_dir_name",
    "stray_dir_name",
    "unique_id",
]

MAX_DIR_NAME_BYTES = 255
"""A file name's limit on Linux file systems (NAME_MAX), in bytes."""

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
UNIQUE_ID_LENGTH = 32


def unique_id() -> str:
    """A fresh unique id for a directory name: a random UUID without dashes (`uuid` imported
    here: a start names no directory before it answers)."""
    import uuid

    return uuid.uuid4().hex


def _capped(tp: TopicPartition, suffix: str, unique: str | None) -> str:
    tail = f"-{tp.partition}.{unique or unique_id()}{suffix}"
    room = MAX_DIR_NAME_BYTES - len(tail.encode())
    topic = tp.topic.encode()[: max(0, room)].decode(errors="ignore")
    return topic + tail


def delete_dir_name(tp: TopicPartition, unique: str | None = None) -> str:
    """`<topic>-<partition>.<unique id>-delete`, the topic cut so the name fits 255 bytes."""
    return _capped(tp, DELETE_DIR_SUFFIX, unique)


def stray_dir_name(tp: TopicPartition, unique: str | None = None) -> str:
    """`<topic>-<partition>.<unique id>-stray`, cut as `delete_dir_name`."""
    return _capped(tp, STRAY_DIR_SUFFIX, unique)


def is_delete_dir(name: str) -> bool:
    """Whether a directory name is a deleted log's (also a shortened one)."""
    return name.endswith(DELETE_DIR_SUFFIX)


def future_dir_name(tp: TopicPartition, unique: str | None = None) -> str:
    """`<topic>-<partition>.<unique id>-future`, never shortened (see `future_dir_fits`)."""
    return f"{tp.dir_name}.{unique or unique_id()}{FUTURE_DIR_SUFFIX}"


def future_dir_fits(tp: TopicPartition) -> bool:
    """Whether `tp`'s future log directory name fits 255 bytes (else no move is possible)."""
    return len(future_dir_name(tp, "0" * UNIQUE_ID_LENGTH).encode()) <= MAX_DIR_NAME_BYTES


def parse_future_dir_name(name: str) -> TopicPartition | None:
    """The partition a future log's directory name is of, or None when it is not one."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    stem = name[: -len(FUTURE_DIR_SUFFIX)]
    base, dot, unique = stem.rpartition(".")
    if not dot or not base or not unique:
        return None
    try:
        return TopicPartition.parse(base)
    except ValueError:
        return None
