"""Exceptions raised by the log layer, each carrying the Kafka error code to answer with."""

from __future__ import annotations

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


class LogError(Exception):
    """Base class of log-layer errors."""

    error_code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class OffsetOutOfRangeError(LogError):
    """A read or a log-start-offset change asked for an offset outside the log."""

    error_code = ErrorCode.offset_out_of_range


class InvalidProducerEpochError(LogError):
    """A producer wrote with an epoch older than the one the partition has seen (fenced)."""

    error_code = ErrorCode.invalid_producer_epoch


class OutOfOrderSequenceError(LogError):
    """A producer's batch does not continue its sequence (gap or too-old duplicate)."""

    error_code = ErrorCode.out_of_order_sequence_number


class StorageError(LogError):
    """An I/O problem with a log directory."""

    error_code = ErrorCode.kafka_storage_error


class LogDirLockedError(StorageError):
    """Another process holds the lock on a log directory."""


class LogDirNotFoundError(LogError):
    """A log directory that is not one of the broker's `log.dirs` (AlterReplicaLogDirs)."""

    error_code = ErrorCode.log_dir_not_found


class LogOffsetError(LogError):
    """Offsets given to the log (follower append, truncation) are not monotonic or valid."""

    error_code = ErrorCode.unknown_server_error


class CorruptIndexError(LogError):
    """An offset or time index file failed its sanity check."""

    error_code = ErrorCode.corrupt_message


class TransactionCoordinatorFencedError(LogError):
    """A transaction marker from an older coordinator epoch than the one the partition saw."""

    error_code = ErrorCode.transaction_coordinator_fenced


class InvalidTxnStateError(LogError):
    """A non-transactional write from a producer whose transaction is ongoing."""

    error_code = ErrorCode.invalid_txn_state
