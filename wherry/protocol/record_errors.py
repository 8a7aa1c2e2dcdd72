"""The errors of record batch handling (`records.py`), each with the Kafka error a broker
answers with."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["CorruptRecordError", "InvalidRecordError", "RecordError", "RecordTooLargeError"]


class RecordError(Exception):
    """Base class of record-batch errors; ``error_code`` is the Kafka error to return."""

    error_code: ErrorCode = ErrorCode.corrupt_message


class CorruptRecordError(RecordError):
    """Bad CRC, bad length field, truncated data, corrupt compressed payload."""

    error_code = ErrorCode.corrupt_message


class InvalidRecordError(RecordError):
    """Structurally valid framing but semantically invalid (old magic, bad counts/deltas...)."""

    error_code = ErrorCode.invalid_record


class RecordTooLargeError(RecordError):
    """Batch larger than ``max.message.bytes``."""

    error_code = ErrorCode.message_too_large
