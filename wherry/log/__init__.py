"""wherry.log: the durable, segmented per-partition log (Kafka's kafka.log package)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wherry.common.lazy import lazy_attributes
from wherry.common.topic_partition import TopicPartition

if TYPE_CHECKING:
    from wherry.log.cache import configure as configure_caches
    from wherry.log.checkpoint import OffsetCheckpointFile
    from wherry.log.config import TOPIC_CONFIG_KEYS, ConfigError, ConfigKey, ConfigType, LogConfig
    from wherry.log.errors import (
        CorruptIndexError,
        InvalidProducerEpochError,
        LogDirLockedError,
        LogError,
        LogOffsetError,
        OffsetOutOfRangeError,
        OutOfOrderSequenceError,
        StorageError,
    )
    from wherry.log.log import (
        AppendInfo,
        InvalidTimestampError,
        Log,
        OffsetAndTimestamp,
        RecordBatchTooLargeError,
    )
    from wherry.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
    from wherry.log.producer_state import DuplicateBatch, ProducerStateManager

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "TOPIC_CONFIG_KEYS",
    "AppendInfo",
    "ConfigError",
    "ConfigKey",
    "ConfigType",
    "CorruptIndexError",
    "DuplicateBatch",
    "InvalidProducerEpochError",
    "InvalidTimestampError",
    "Log",
    "LogConfig",
    "LogDirLockedError",
    "LogError",
    "LogManager",
    "LogOffsetError",
    "OffsetAndTimestamp",
    "OffsetCheckpointFile",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerStateManager",
    "RecordBatchTooLargeError",
    "StorageError",
    "TopicPartition",
    "configure_caches",
]

# submodule → the names it gives this package, imported on first access (PEP 562):
# importing one submodule of this package does not import all the others.
_LAZY: dict[str, tuple[str, ...]] = {
    "wherry.log.checkpoint": ("OffsetCheckpointFile",),
    "wherry.log.config": (
        "ConfigError",
        "ConfigKey",
        "ConfigType",
        "LogConfig",
        "TOPIC_CONFIG_KEYS",
    ),
    "wherry.log.errors": (
        "CorruptIndexError",
        "InvalidProducerEpochError",
        "LogDirLockedError",
        "LogError",
        "LogOffsetError",
        "OffsetOutOfRangeError",
        "OutOfOrderSequenceError",
        "StorageError",
    ),
    "wherry.log.log": (
        "AppendInfo",
        "InvalidTimestampError",
        "Log",
        "OffsetAndTimestamp",
        "RecordBatchTooLargeError",
    ),
    "wherry.log.manager": ("CLEAN_SHUTDOWN_FILE", "LogManager"),
    "wherry.log.producer_state": ("DuplicateBatch", "ProducerStateManager"),
}


__getattr__ = lazy_attributes(
    __name__,
    globals(),
    _LAZY,
    renamed={"configure_caches": ("wherry.log.cache", "configure")},
)
