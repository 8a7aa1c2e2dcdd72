"""Checks of the record batches appended to a partition log (Kafka 3.9's LogValidator, for
magic 2 batches, appended as bytes).

A client's batches (`Log.append_as_leader`) are validated (framing, CRC, records,
max.message.bytes, no control batches, a sequence for idempotent batches, keys on compacted
topics, CreateTime timestamps within message.timestamp.{before,after}.max.ms, size within
segment.bytes), then get their offsets, the leader epoch and, with LogAppendTime, the append
time patched in place. Replicated batches (`Log.append_as_follower`) keep their offsets and
must be CRC-valid and in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LONG_MAX, LogConfig
from wherry.log.errors import LogError, LogOffsetError
from wherry.log.producer_state import EndTxnMarker, read_marker
from wherry.protocol.records import (
    ATTR_CONTROL,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    crc_ok,
    iter_batches,
    iter_records,
    null_key_records,
    parse_header,
    patch_batch,
    patched_header,
    set_log_append_time,
    validate_batch,
)

__all__ = [
    "InvalidTimestampError",
    "RecordBatchTooLargeError",
    "RecordValidationError",
    "assign_offsets",
    "batch_markers",
    "parse_batches",
    "validate_client_batches",
    "validate_replicated_batches",
]


_NONE: AbstractSet[int] = frozenset()


class RecordValidationError(LogError):
    """Records of a batch the topic cannot accept (Kafka's RecordValidationException,
    KIP-467): the whole append fails with INVALID_RECORD, and `record_errors` names each
    offending record as (index in its batch, message) for the Produce response (v8+)."""

    error_code = ErrorCode.invalid_record

    def __init__(self, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InvalidTimestampError(RecordValidationError):
    """A CreateTime record timestamp is outside message.timestamp.{before,after}.max.ms
    (INVALID_TIMESTAMP, whatever else the other records have)."""

    error_code = ErrorCode.invalid_timestamp


class RecordBatchTooLargeError(LogError):
    """The append is larger than segment.bytes."""

    error_code = ErrorCode.record_list_too_large


def parse_batches(buf: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
    """All batches of an append buffer; the buffer must be exactly whole batches."""
    if len(buf) == 0:
        raise InvalidRecordError("append has no record batch")
    batches = list(iter_batches(buf))
    end = batches[-1][0] + batches[-1][1].size_in_bytes if batches else 0
    if end != len(buf):
        raise CorruptRecordError(
            f"append of {len(buf)} bytes holds {end} bytes of whole batches (torn batch)"
        )
    return batches


def validate_client_batches(
    buf: bytearray | memoryview,
    batches: Sequence[tuple[int, BatchHeader]],
    config: LogConfig,
    *,
    topic_partition: TopicPartition,
    now_ms: int,
    validate: bool,
    allow_control: bool = False,
) -> None:
    """Check a client's batches before offsets are assigned (`validate=False` skips the
    `validate_batch` checks the caller already made, except max.message.bytes). Only the
    coordinator (`allow_control`: transaction markers) may append control batches."""
    view = memoryview(buf) if validate else None
    compact = config.compact
    bounds = None if config.log_append_time else _timestamp_bounds(config)
    # KIP-467: every record the topic cannot accept, (index in its batch, message, is a
    # timestamp error), one per record (its key is checked first, as Kafka's LogValidator)
    record_errors: list[tuple[int, str, bool]] = []
    for pos, header in batches:
        size = header.batch_length + LOG_OVERHEAD
        if view is not None:
            validate_batch(view[pos : pos + size], max_message_bytes=config.max_message_bytes)
        elif size > config.max_message_bytes:
            # The caller validated the batch (CRC included) against the config it read;
            # the config may have changed since.
            raise RecordTooLargeError(
                f"record batch is {size} bytes, larger than max.message.bytes "
                f"{config.max_message_bytes}"
            )
        if header.attributes & ATTR_CONTROL:
            if not allow_control:
                raise InvalidRecordError("clients are not allowed to write control records")
            continue
        keyless: AbstractSet[int] = _NONE
        if compact:
            keyless = set(null_key_records(buf, pos))
            record_errors.extend(
                (i, f"Compacted topic cannot accept message without key in topic partition "
                 f"{topic_partition}.", False)
                for i in sorted(keyless)
            )
        if bounds is not None:
            record_errors.extend(
                (i, msg, True)
                for i, msg in _timestamp_errors(buf, pos, bounds, now_ms)
                if i not in keyless
            )
        if header.producer_id >= 0 and header.base_sequence < 0:
            raise InvalidRecordError(
                f"invalid sequence number {header.base_sequence} in record batch with "
                f"producer id {header.producer_id}"
            )
    if view is not None:
        view.release()
    if record_errors:
        errors = [(i, msg) for i, msg, _ in sorted(record_errors)]
        if any(is_ts for _, _, is_ts in record_errors):
            raise InvalidTimestampError(
                "One or more records have been rejected due to invalid timestamp", errors
            )
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        raise RecordValidationError(
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]",
            errors,
        )
    if len(buf) > config.segment_bytes:
        raise RecordBatchTooLargeError(
            f"message batch size is {len(buf)} bytes in append to partition "
            f"{topic_partition} which exceeds the maximum configured segment size "
            f"of {config.segment_bytes}"
        )


def _timestamp_bounds(config: LogConfig) -> tuple[int, int] | None:
    """How far before and after the broker's clock a CreateTime timestamp may be
    (message.timestamp.{before,after}.max.ms, or the older difference.max.ms); None if
    there is no bound."""
    before = config.message_timestamp_before_max_ms
    if before == LONG_MAX:
        before = config.message_timestamp_difference_max_ms
    after = config.message_timestamp_after_max_ms
    if after == LONG_MAX:
        after = config.message_timestamp_difference_max_ms
    if before == LONG_MAX and after == LONG_MAX:
        return None
    return before, after


def _timestamp_errors(
    buf: bytearray | memoryview, pos: int, bounds: tuple[int, int], now_ms: int
) -> list[tuple[int, str]]:
    """(index, message) of each CreateTime record of the batch at `pos` outside `bounds`
    (`_timestamp_bounds`)."""
    before, after = bounds
    out: list[tuple[int, str]] = []
    for i, record in enumerate(iter_records(buf, pos)):
        if record.timestamp < 0:
            continue
        diff = now_ms - record.timestamp
        if diff > before or -diff > after:
            out.append(
                (
                    i,
                    f"Timestamp {record.timestamp} of message with offset "
                    f"{record.offset} is out of range. The timestamp should be within "
                    f"[{now_ms - before if before != LONG_MAX else '-inf'}, "
                    f"{now_ms + after if after != LONG_MAX else 'inf'}]",
                )
            )
    return out


def assign_offsets(
    buf: bytearray | memoryview,
    batches: Sequence[tuple[int, BatchHeader]],
    *,
    first_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None,
) -> list[tuple[int, BatchHeader]]:
    """Patch consecutive offsets from `first_offset`, the leader epoch and (unless None) the
    LogAppendTime into the batches; returns (position, new header) of each."""
    next_offset = first_offset
    out: list[tuple[int, BatchHeader]] = []
    for pos, header in batches:
        patch_batch(buf, pos, base_offset=next_offset, partition_leader_epoch=leader_epoch)
        if log_append_time_ms is not None:
            set_log_append_time(buf, pos, log_append_time_ms)
            patched = parse_header(buf, pos)
        else:  # only the two fields outside the CRC changed: no need to read them back
            patched = patched_header(
                header, base_offset=next_offset, partition_leader_epoch=leader_epoch
            )
        out.append((pos, patched))
        next_offset = patched.base_offset + patched.last_offset_delta + 1
    return out


def batch_markers(
    buf: bytes | bytearray | memoryview, batches: Sequence[tuple[int, BatchHeader]]
) -> list[EndTxnMarker | None]:
    """The COMMIT/ABORT marker of each control batch with a producer id (None for the
    others)."""
    return [
        read_marker(buf, pos)
        if header.attributes & ATTR_CONTROL and header.producer_id >= 0
        else None
        for pos, header in batches
    ]


def validate_replicated_batches(
    records: bytes | bytearray | memoryview,
    batches: Sequence[tuple[int, BatchHeader]],
    config: LogConfig,
    *,
    topic_partition: TopicPartition,
    log_end_offset: int,
) -> None:
    """Check batches from the leader: CRC-valid, at or after `log_end_offset`, in order."""
    expected = log_end_offset
    for pos, header in batches:
        if not crc_ok(records, pos, header):
            raise CorruptRecordError(
                f"replicated batch at offset {header.base_offset} failed its CRC check"
            )
        if header.base_offset < expected or header.last_offset_delta < 0:
            raise LogOffsetError(
                f"out of order offsets in append to {topic_partition}: batch "
                f"{header.base_offset}..{header.last_offset} after offset {expected - 1}"
            )
        expected = header.next_offset
    if len(records) > config.segment_bytes:
        raise RecordBatchTooLargeError(
            f"replicated batch of {len(records)} bytes exceeds segment.bytes "
            f"{config.segment_bytes}"
        )
