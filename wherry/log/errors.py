"""Exceptions raised by the log layer, each carrying the Kafka error code to answer with."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kio.schema.errors import ErrorCode

__all__ = [
    "CorruptIndexError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "LogDirLockedError",
    "LogDirNotFoundError",
    "LogError",
    "LogOffsetError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "StorageError",
    "TransactionCoordinatorFencedError",
]


class _Code:
    """An error class's Kafka error code, by name: kio's error codes are imported when one is
    first read (a broker's start imports the log layer long before it answers with one)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> ErrorCode:
        from kio.schema.errors import ErrorCode

        code: ErrorCode = getattr(ErrorCode, self.name)
        return code


class LogError(Exception):
    """Base class of log-layer errors."""

    error_code = _Code("unknown_server_error")

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class OffsetOutOfRangeError(LogError):
    """A read or a log-start-offset change asked for an offset outside the log."""

    error_code = _Code("offset_out_of_range")


class InvalidProducerEpochError(LogError):
    """A producer wrote with an epoch older than the one the partition has seen (fenced)."""

    error_code = _Code("invalid_producer_epoch")


class OutOfOrderSequenceError(LogError):
    """A producer's batch does not continue its sequence (gap or too-old duplicate)."""

    error_code = _Code("out_of_order_sequence_number")


class StorageError(LogError):
    """An I/O problem with a log directory."""

    error_code = _Code("kafka_storage_error")


class LogDirLockedError(StorageError):
    """Another process holds the lock on a log directory."""


class LogDirNotFoundError(LogError):
    """A log directory that is not one of the broker's `log.dirs` (AlterReplicaLogDirs)."""

    error_code = _Code("log_dir_not_found")


class LogOffsetError(LogError):
    """Offsets given to the log (follower append, truncation) are not monotonic or valid."""

    error_code = _Code("unknown_server_error")


class CorruptIndexError(LogError):
    """An offset or time index file failed its sanity check."""

    error_code = _Code("corrupt_message")


class TransactionCoordinatorFencedError(LogError):
    """A transaction marker from an older coordinator epoch than the one the partition saw."""

    error_code = _Code("transaction_coordinator_fenced")


class InvalidTxnStateError(LogError):
    """A non-transactional write from a producer whose transaction is ongoing."""

    error_code = _Code("invalid_txn_state")
