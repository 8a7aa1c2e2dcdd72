"""wherry.log: the durable, segmented per-partition log (Kafka's kafka.log package)."""

from wherry.common.topic_partition import TopicPartition
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
