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

# name → (submodule, attribute), imported on first access (PEP 562): importing one
# submodule of this package does not import all the others.
_LAZY: dict[str, tuple[str, str]] = {
    "AppendInfo": ("wherry.log.log", "AppendInfo"),
    "CLEAN_SHUTDOWN_FILE": ("wherry.log.manager", "CLEAN_SHUTDOWN_FILE"),
    "ConfigError": ("wherry.log.config", "ConfigError"),
    "ConfigKey": ("wherry.log.config", "ConfigKey"),
    "ConfigType": ("wherry.log.config", "ConfigType"),
    "CorruptIndexError": ("wherry.log.errors", "CorruptIndexError"),
    "DuplicateBatch": ("wherry.log.producer_state", "DuplicateBatch"),
    "InvalidProducerEpochError": ("wherry.log.errors", "InvalidProducerEpochError"),
    "InvalidTimestampError": ("wherry.log.log", "InvalidTimestampError"),
    "Log": ("wherry.log.log", "Log"),
    "LogConfig": ("wherry.log.config", "LogConfig"),
    "LogDirLockedError": ("wherry.log.errors", "LogDirLockedError"),
    "LogError": ("wherry.log.errors", "LogError"),
    "LogManager": ("wherry.log.manager", "LogManager"),
    "LogOffsetError": ("wherry.log.errors", "LogOffsetError"),
    "OffsetAndTimestamp": ("wherry.log.log", "OffsetAndTimestamp"),
    "OffsetCheckpointFile": ("wherry.log.checkpoint", "OffsetCheckpointFile"),
    "OffsetOutOfRangeError": ("wherry.log.errors", "OffsetOutOfRangeError"),
    "OutOfOrderSequenceError": ("wherry.log.errors", "OutOfOrderSequenceError"),
    "ProducerStateManager": ("wherry.log.producer_state", "ProducerStateManager"),
    "RecordBatchTooLargeError": ("wherry.log.log", "RecordBatchTooLargeError"),
    "StorageError": ("wherry.log.errors", "StorageError"),
    "TOPIC_CONFIG_KEYS": ("wherry.log.config", "TOPIC_CONFIG_KEYS"),
    "configure_caches": ("wherry.log.cache", "configure"),
}


__getattr__ = lazy_attributes(__name__, globals(), _LAZY)
