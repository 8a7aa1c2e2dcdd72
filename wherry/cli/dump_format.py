"""The lines of `wherry dump-log` (kafka-dump-log's formats), pure: bytes in, text out.

Batches and records of a `.log`, entries and the consistency check of `.index`/`.timeindex`,
producer `.snapshot` entries and the `--offsets-decoder` rendering of `__consumer_offsets`
records. The command and its file handling are in `wherry.cli.dump_log`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator

from wherry.group.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from wherry.log.producer_state import ProducerStateEntry
from wherry.protocol.compression import CODEC_NAMES
from wherry.protocol.records import (
    ATTR_DELETE_HORIZON,
    BatchHeader,
    Record,
    RecordError,
    crc_ok,
    iter_batches,
    iter_records,
    parse_control_record,
)

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}


def _optional_long(value: int) -> str:
    return f"OptionalLong[{value}]" if value >= 0 else "OptionalLong.empty"


def _timestamp_type(header: BatchHeader) -> str:
    return "LogAppendTime" if header.timestamp_type else "CreateTime"


def batch_line(buf: bytes | memoryview, pos: int, header: BatchHeader) -> str:
    """kafka-dump-log's line for one batch at file position `pos`."""
    horizon = header.base_timestamp if header.attributes & ATTR_DELETE_HORIZON else -1
    codec = CODEC_NAMES.get(header.compression, str(header.compression))
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {str(header.is_transactional).lower()} "
        f"isControl: {str(header.is_control).lower()} "
        f"deleteHorizonMs: {_optional_long(horizon)} position: {pos} "
        f"{_timestamp_type(header)}: {header.max_timestamp} size: {header.size_in_bytes} "
        f"magic: {header.magic} compresscodec: {codec} crc: {header.crc & 0xFFFFFFFF} "
        f"isvalid: {str(crc_ok(buf, pos, header)).lower()}"
    )


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def offsets_key_value(key: bytes | None, value: bytes | None) -> tuple[str | None, str]:
    """`--offsets-decoder`: the key and payload of a `__consumer_offsets` record as JSON."""
    if key is None:
        return None, "NULL"
    try:
        decoded = decode_key(key)
    except (RecordFormatError, struct.error, IndexError, UnicodeDecodeError) as e:
        return f"<unparseable key: {e}>", "NULL"
    key_version = struct.unpack_from(">h", key)[0]
    data: dict[str, object]
    if isinstance(decoded, OffsetCommitKey):
        data = {"group": decoded.group, "topic": decoded.topic, "partition": decoded.partition}
    elif isinstance(decoded, GroupMetadataKey):
        data = {"group": decoded.group}
    else:
        return json.dumps({"type": str(key_version), "data": "unknown"}), "NULL"
    key_text = json.dumps({"type": str(key_version), "data": data}, separators=(",", ":"))
    if value is None:
        return key_text, "<DELETE>"
    value_version = struct.unpack_from(">h", value)[0]
    try:
        if isinstance(decoded, OffsetCommitKey):
            oc = decode_offset_commit_value(value)
            body: dict[str, object] = {
                "offset": oc.offset, "leaderEpoch": oc.leader_epoch, "metadata": oc.metadata,
                "commitTimestamp": oc.commit_timestamp_ms,
            }
            if oc.expire_timestamp_ms >= 0:
                body["expireTimestamp"] = oc.expire_timestamp_ms
        else:
            gm = decode_group_metadata_value(value)
            body = {
                "protocolType": gm.protocol_type, "generation": gm.generation,
                "protocol": gm.protocol, "leader": gm.leader,
                "currentStateTimestamp": gm.current_state_timestamp_ms,
                "members": [
                    {"memberId": m.member_id, "groupInstanceId": m.group_instance_id,
                     "clientId": m.client_id, "clientHost": m.client_host,
                     "rebalanceTimeout": m.rebalance_timeout_ms,
                     "sessionTimeout": m.session_timeout_ms}
                    for m in gm.members
                ],
            }
    except (RecordFormatError, struct.error, IndexError, UnicodeDecodeError) as e:
        return key_text, f"<unparseable value: {e}>"
    value_text = json.dumps({"version": str(value_version), "data": body}, separators=(",", ":"))
    return key_text, value_text


def record_line(
    header: BatchHeader, index: int, record: Record, *, print_data: bool, offsets_decoder: bool
) -> str:
    """kafka-dump-log's `| offset: ...` line for one record of a batch."""
    line = f"| offset: {record.offset} {_timestamp_type(header)}: {record.timestamp}"
    line += (
        f" keySize: {-1 if record.key is None else len(record.key)}"
        f" valueSize: {-1 if record.value is None else len(record.value)}"
    )
    if header.base_sequence >= 0:
        line += f" sequence: {header.base_sequence + index}"
    else:
        line += " sequence: -1"
    line += f" headerKeys: [{','.join(k for k, _ in record.headers)}]"
    if header.is_control:
        control_type, coordinator_epoch = parse_control_record(record)
        name = _CONTROL_TYPES.get(control_type)
        if name is not None:
            line += f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
        else:
            line += f" controlType: UNKNOWN({control_type})"
    elif print_data:
        if offsets_decoder:
            key_text, payload = offsets_key_value(record.key, record.value)
        else:
            key_text = None if record.key is None else _text(record.key)
            payload = "" if record.value is None else _text(record.value)
        if key_text is not None:
            line += f" key: {key_text}"
        line += f" payload: {payload}"
    return line


def dump_log_bytes(
    buf: bytes, *, deep: bool, print_data: bool, offsets_decoder: bool
) -> Iterator[str]:
    """The batch (and, if `deep`, record) lines of a segment's bytes; a last line
    `Found N invalid bytes at the end of ...` is the caller's (see `valid_bytes`)."""
    for pos, header in iter_batches(buf):
        yield batch_line(buf, pos, header)
        if deep:
            for i, record in enumerate(iter_records(buf, pos)):
                yield record_line(
                    header, i, record, print_data=print_data, offsets_decoder=offsets_decoder
                )


def valid_bytes(buf: bytes) -> int:
    """Bytes of `buf` covered by complete batches, from the start."""
    end = 0
    try:
        for pos, header in iter_batches(buf):
            end = pos + header.size_in_bytes
    except RecordError:
        pass
    return end


def first_batch_at(log: bytes, position: int) -> BatchHeader | None:
    """The header of the batch at `position` of a segment, None if there is none."""
    for _pos, header in iter_batches(log, position):
        return header
    return None


def offset_index_entries(data: bytes, base_offset: int) -> list[tuple[int, int]]:
    """(absolute offset, position) of each entry; trailing zero entries (preallocation) end
    the list, as Kafka's index does."""
    out: list[tuple[int, int]] = []
    for slot in range(len(data) // OFFSET_ENTRY.size):
        rel, position = OFFSET_ENTRY.unpack_from(data, slot * OFFSET_ENTRY.size)
        if slot > 0 and rel == 0 and position == 0:
            break
        out.append((base_offset + rel, position))
    return out


def time_index_entries(data: bytes, base_offset: int) -> list[tuple[int, int]]:
    """(timestamp, absolute offset) of each entry, zero entries after the first ending it."""
    out: list[tuple[int, int]] = []
    for slot in range(len(data) // TIME_ENTRY.size):
        ts, rel = TIME_ENTRY.unpack_from(data, slot * TIME_ENTRY.size)
        if slot > 0 and ts == 0 and rel == 0:
            break
        out.append((ts, base_offset + rel))
    return out


def offset_index_mismatches(
    entries: list[tuple[int, int]], log: bytes
) -> list[tuple[int, int]]:
    """(index offset, log offset) of entries whose position does not start a batch whose
    last offset is the entry's offset (Kafka's `dumpIndex` check)."""
    out: list[tuple[int, int]] = []
    for offset, position in entries:
        try:
            header = first_batch_at(log, position) if 0 <= position < len(log) else None
        except RecordError:
            header = None
        last = header.last_offset if header is not None else -1
        if last != offset:
            out.append((offset, last))
    return out


def time_index_problems(
    entries: list[tuple[int, int]], log: bytes, offset_entries: list[tuple[int, int]]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Kafka's `dumpTimeIndex` checks: (index timestamp, log timestamp) where the batch holding
    the entry's offset has another max timestamp, and (timestamp, previous timestamp) where
    entries go backwards."""
    mismatches: list[tuple[int, int]] = []
    out_of_order: list[tuple[int, int]] = []
    prev = -1
    for ts, offset in entries:
        start = 0
        for off, position in offset_entries:
            if off <= offset:
                start = position
        found = -1
        try:
            for _pos, header in iter_batches(log, start):
                if header.last_offset >= offset:
                    found = header.max_timestamp
                    break
        except RecordError:
            found = -1
        if found != ts:
            mismatches.append((ts, found))
        if ts < prev:
            out_of_order.append((ts, prev))
        prev = max(prev, ts)
    return mismatches, out_of_order


def snapshot_line(entry: ProducerStateEntry) -> str:
    """kafka-dump-log's line for one producer of a `.snapshot`."""
    last = entry.batches[-1] if entry.batches else None
    return (
        f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
        f"coordinatorEpoch: {entry.coordinator_epoch} "
        f"currentTxnFirstOffset: {_optional_long(entry.current_txn_first_offset)} "
        f"lastTimestamp: {entry.last_timestamp_ms} "
        f"firstSequence: {entry.first_seq} lastSequence: {entry.last_seq} "
        f"lastOffset: {entry.last_data_offset} "
        f"offsetDelta: {last.last_offset - last.first_offset if last else 0} "
        f"timestamp: {last.timestamp_ms if last else -1}"
    )
