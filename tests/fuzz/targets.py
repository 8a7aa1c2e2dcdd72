"""The fuzz targets: one input, one decode path (or one request through a broker).

An input is a selector byte and a payload. The selector (its value modulo `len(TARGETS)`)
names the target:

``request``      the payload is one request frame (no size prefix) on a PLAINTEXT connection,
                 through the broker's `handle_frame`: kio or the lean codecs, then the handler
                 of its API key, as a socket would drive it
``sasl``         the payload is a sequence of frames (each a 2-byte length and the frame) on
                 one fresh SASL_PLAINTEXT connection: SaslHandshake / SaslAuthenticate
                 (PLAIN, SCRAM-SHA-256/512) through the SASL gate, raw tokens after a v0
                 handshake, then whatever an authenticated connection may send
``records``      the payload is a record batch (first byte: fix up the CRC or not): the
                 produce validation, the record walk and every codec's decompression
``response``     the payload is a response frame a broker reads from a peer (first two bytes:
                 which API and version): the inter-broker and ControlledShutdown codecs, the
                 lean Fetch v12 reader and kio's response readers
``sasl-tokens``  the payload is a sequence of tokens straight to a PLAIN or SCRAM server
``coordinator``  the payload is a key or value of the group, consumer-group, share-group,
                 transaction or share-state records read back from the internal topics
``lean``         the payload is a request frame for the hand-written readers, whatever its
                 size: the lean Produce reader (which the broker uses for frames of 128 KiB
                 or more) and the ApiVersions reader of the start

`Outcome` says what happened. A native abort or a hang kills or stalls the process; the
supervisor (`run.py`) records those. Python exceptions are caught here: an exception type the
path documents (a decode error, a clean close) is fine; any other is a finding, recorded by
the caller with the signature `finding_signature` gives it.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import crc32c

SELECTORS = ("request", "sasl", "records", "response", "sasl-tokens", "coordinator", "lean")
# APIs whose answer may legitimately wait longer than the deadline, as Kafka's do: a Fetch's
# max wait, a rebalance, an admin request's `timeout_ms` for the controller's work, and every
# API that appends with acks=all semantics -- Produce, the coordinators' writes to
# `__consumer_offsets`, `__transaction_state` and `__share_group_state` (OffsetCommit,
# LeaveGroup, InitProducerId, AddPartitionsToTxn, EndTxn, TxnOffsetCommit, DeleteGroups,
# OffsetDelete, the share-state and share-offset writes) and WriteTxnMarkers -- which waits
# for the ISR up to its timeout. An input may make the broker lead a partition with a broker
# that does not exist in its ISR (a LeaderAndIsr from a "controller"), and then such a write
# waits, by design; a time-out there is no hang. DescribeShareGroupOffsets reads the share
# state through the persister, which retries while the share coordinator is unavailable or
# loading (its topic being created, its leader a broker an input invented) up to
# `share.coordinator.write.timeout.ms`, as Kafka's persister does.
WAITING_KEYS = frozenset({0, 1, 8, 11, 13, 14, 19, 20, 21, 22, 24, 25, 26, 27, 28, 37, 42, 43,
                          45, 47, 68, 76, 78, 79, 83, 85, 86, 90, 91, 92})
WAITING_DEADLINE_S = 0.02
# In process there is no socket round trip: a waiting API is given less (what it does before it
# waits runs within it), and a broker that makes many inputs wait costs the run less.
INPROC_WAITING_DEADLINE_S = 0.005
_U16 = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one input did: `kind` is ``ok`` (answered, or a decode error the path documents),
    ``closed`` (a clean close), ``waiting`` (a waiting API past the deadline), ``hang``
    (anything else past the deadline) or ``error`` (an exception the path does not
    document: a traceback in the broker's log); `detail` names it."""

    target: str
    kind: str
    detail: str = ""
    signature: str = ""


def target_of(data: bytes) -> str:
    return SELECTORS[data[0] % len(SELECTORS)] if data else SELECTORS[0]


def make_input(target: str, payload: bytes) -> bytes:
    return bytes([SELECTORS.index(target)]) + payload


def split_frames(payload: bytes) -> Iterator[bytes]:
    """The frames of a ``sasl`` / ``sasl-tokens`` payload (2-byte length + bytes each; a
    short tail is the last frame)."""
    pos = 0
    while pos < len(payload):
        if pos + 2 > len(payload):
            yield payload[pos:]
            return
        (n,) = _U16.unpack_from(payload, pos)
        pos += 2
        yield payload[pos : pos + n]
        pos += n


def join_frames(frames: list[bytes]) -> bytes:
    return b"".join(_U16.pack(len(f)) + f for f in frames)


def finding_signature(exc: BaseException) -> str:
    """The exception's type and the innermost frame of wherry's (or kio's) code it passed:
    inputs with one cause share a signature."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = "?"
    for fr in reversed(frames):
        if "/wherry/" in fr.filename or "/kio/" in fr.filename:
            where = f"{fr.filename.rsplit('/', 2)[-2]}/{fr.filename.rsplit('/', 1)[-1]}:{fr.lineno}"
            break
    return f"{type(exc).__name__}@{where}"


def short_hash(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:12]


def _error(target: str, exc: BaseException) -> Outcome:
    return Outcome(target, "error", f"{type(exc).__name__}: {exc}"[:300], finding_signature(exc))


# --- pure targets ----------------------------------------------------------------------------


def run_records(payload: bytes) -> Outcome:
    from wherry.protocol import compression, records
    from wherry.protocol.record_errors import (
        CorruptRecordError,
        InvalidRecordError,
        RecordTooLargeError,
    )

    if not payload:
        return Outcome("records", "ok")
    fix_crc, codec_hint = payload[0] & 1, payload[0] >> 1
    data = bytearray(payload[1:])
    if fix_crc and len(data) >= records.BATCH_HEADER_SIZE:
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    clean = (
        InvalidRecordError,
        CorruptRecordError,
        RecordTooLargeError,
        compression.CompressionError,
    )
    try:
        try:
            records.validate_batch(bytes(data), max_message_bytes=1 << 20, null_keys=[])
        except clean:
            pass
        try:
            for _pos, _header in records.iter_batches(bytes(data)):
                pass
        except clean:
            pass
        try:
            for _rec in records.iter_records(bytes(data)):
                pass
        except clean:
            pass
        try:  # the codecs on their own, the record batch's payload as a compressed one
            compression.decompress(codec_hint % 5, bytes(data[61:] if fix_crc else data))
        except (compression.CompressionError, compression.UnsupportedCompressionError):
            pass
    except Exception as e:
        return _error("records", e)
    return Outcome("records", "ok")


# (api key, version) pairs the `response` target reads, indexed by the payload's first byte.
def _response_apis() -> list[tuple[int, int]]:
    from wherry.server.handlers.versions import SUPPORTED_VERSIONS

    peer_read = {
        1: (12, 12),  # the followers' Fetch (the lean reader)
        4: (0, 7),
        5: (0, 4),
        6: (0, 8),
        7: (0, 3),
        3: (12, 12),  # Metadata, ListOffsets, OffsetForLeaderEpoch, AlterPartition,
        2: (4, 4),  # ApiVersions, SaslHandshake/Authenticate, WriteTxnMarkers: what brokers
        23: (4, 4),  # and the tools read from brokers
        56: (3, 3),
        18: (0, 3),
        17: (1, 1),
        36: (2, 2),
        27: (1, 1),
    }
    out = [(k, v) for k, (lo, hi) in peer_read.items() for v in range(lo, hi + 1)]
    assert all(k in SUPPORTED_VERSIONS for k, _ in out)
    return out


RESPONSE_APIS = _response_apis()


def run_response(payload: bytes) -> Outcome:
    from wherry.protocol.codec import ResponseDecodeError, decode_response
    from wherry.protocol.fetch_response import decode_fetch_v12_response

    if len(payload) < 1:
        return Outcome("response", "ok")
    key, version = RESPONSE_APIS[payload[0] % len(RESPONSE_APIS)]
    frame = payload[1:]
    try:
        if key == 1:
            try:
                decode_fetch_v12_response(memoryview(bytearray(frame)))
            except (ValueError, ResponseDecodeError):
                pass
        try:
            decode_response(key, version, frame)
        except ResponseDecodeError:
            pass
    except Exception as e:
        return _error("response", e)
    return Outcome("response", "ok")


def run_sasl_tokens(payload: bytes) -> Outcome:
    from wherry.security.plain import PlainServer
    from wherry.security.sasl_mechanism import SaslAuthenticationError
    from wherry.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramServer

    if not payload:
        return Outcome("sasl-tokens", "ok")
    which = payload[0] % 3
    server: Any
    if which == 0:
        server = PlainServer({"alice": "alice-secret"})
    else:
        mech = SCRAM_SHA_256 if which == 1 else SCRAM_SHA_512
        server = ScramServer(mech, _scram_lookup(mech.mechanism_name))
    try:
        for token in split_frames(payload[1:]):
            try:
                server.evaluate(token)
            except SaslAuthenticationError:
                break
            if server.complete:
                break
    except Exception as e:
        return _error("sasl-tokens", e)
    return Outcome("sasl-tokens", "ok")


def _scram_lookup(mechanism: str) -> Callable[[str], Any]:
    """The credential lookup a SCRAM server gets: one known user, `carol`."""
    from wherry.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, generate_credential

    if not _SCRAM_CREDS:
        for m in (SCRAM_SHA_256, SCRAM_SHA_512):
            _SCRAM_CREDS[m.mechanism_name] = generate_credential(
                m, "carol-secret", iterations=4096, salt=b"fuzz-salt"
            )
    cred = _SCRAM_CREDS[mechanism]
    return lambda user: cred if user == "carol" else None


_SCRAM_CREDS: dict[str, Any] = {}


def _coordinator_decoders() -> list[Callable[[bytes], object]]:
    from wherry.group import consumer_group_records as cg
    from wherry.group import records as gr
    from wherry.group import share_group_records as sg
    from wherry.share import state as ss
    from wherry.txn import records as tr

    return [
        gr.decode_key,
        gr.decode_offset_commit_value,
        gr.decode_group_metadata_value,
        gr.parse_subscription_topics,
        tr.decode_key,
        tr.decode_value,
        cg.decode_consumer_group_key,
        cg.decode_epoch_value,
        cg.decode_partition_metadata,
        cg.decode_member_metadata,
        cg.decode_target_member,
        cg.decode_current_assignment,
        sg.decode_share_group_key,
        sg.decode_group_metadata,
        sg.decode_member_metadata,
        sg.decode_current_assignment,
        sg.decode_state_metadata,
        ss.decode_key,
        ss.decode_value,
    ]


_COORDINATOR: list[Callable[[bytes], object]] = []


def run_coordinator(payload: bytes) -> Outcome:
    if not _COORDINATOR:
        _COORDINATOR.extend(_coordinator_decoders())
    if not payload:
        return Outcome("coordinator", "ok")
    decode = _COORDINATOR[payload[0] % len(_COORDINATOR)]
    try:
        try:
            decode(payload[1:])
        # Every records module's RecordFormatError is a ValueError; the share-state loader
        # also takes struct.error for a damaged record (it skips it with a log line).
        except (ValueError, struct.error):
            pass
    except Exception as e:
        return _error("coordinator", e)
    return Outcome("coordinator", "ok")


# --- through a broker --------------------------------------------------------------------------


class BrokerTargets:
    """The ``request`` and ``sasl`` targets against a started broker on `loop`."""

    def __init__(self, broker: Any, loop: asyncio.AbstractEventLoop, deadline_s: float) -> None:
        from wherry.server.network import ConnectionInfo

        self.broker = broker
        self.loop = loop
        self.deadline_s = deadline_s
        self._conn_cls = ConnectionInfo
        self._next_id = 1_000_000

    def _conn(self, listener: str) -> Any:
        self._next_id += 1
        protocol = "SASL_PLAINTEXT" if listener == "SASL_PLAINTEXT" else "PLAINTEXT"
        return self._conn_cls("127.0.0.1:40000", listener, self._next_id,
                              security_protocol=protocol)

    def run_request(self, payload: bytes) -> Outcome:
        return self._run("request", "PLAINTEXT", [payload])

    def run_sasl(self, payload: bytes) -> Outcome:
        return self._run("sasl", "SASL_PLAINTEXT", list(split_frames(payload))[:16])

    def _run(self, target: str, listener: str, frames: list[bytes]) -> Outcome:
        conn = self._conn(listener)
        last = Outcome(target, "ok")
        for frame in frames:
            last = self.loop.run_until_complete(self._one(target, conn, frame))
            if last.kind != "ok":
                break
        return last

    async def _one(self, target: str, conn: Any, frame: bytes) -> Outcome:
        from wherry.protocol.codec import RequestDecodeError
        from wherry.server.network import CloseConnection, Deferred

        key = struct.unpack_from(">h", frame)[0] if len(frame) >= 2 else -1
        if key in _PARTITION_KEYS and _asks_many_partitions(frame):
            return Outcome(target, "ok", "decoded; too many partitions to create")
        # An API that may wait is given a short while: what it waits for (a Fetch's max wait,
        # the ISR, a rebalance) is no hang, and waiting it out would spend the fuzzer's time.
        deadline_s = min(self.deadline_s, INPROC_WAITING_DEADLINE_S) if key in WAITING_KEYS else (
            self.deadline_s)
        try:
            async with asyncio.timeout(deadline_s):
                answer = await self.broker.handle_frame(conn, memoryview(bytearray(frame)))
                if isinstance(answer, Deferred):
                    await answer.answer
        except TimeoutError:
            if key in WAITING_KEYS:
                return Outcome(target, "waiting", f"API key {key}")
            return Outcome(target, "hang", f"API key {key} not answered in {self.deadline_s}s",
                           f"hang@key{key}")
        except CloseConnection as e:
            cause = e.__cause__
            if cause is None or isinstance(cause, RequestDecodeError):
                return Outcome(target, "closed", str(e)[:200])
            sasl_error = type(cause).__name__ in ("SaslStateError", "SaslAuthenticationError")
            if sasl_error:
                return Outcome(target, "closed", str(e)[:200])
            return _error(target, cause)
        except Exception as e:
            return _error(target, e)
        return Outcome(target, "ok")


# CreateTopics and CreatePartitions: an input asking for more than `MAX_PARTITIONS`
# partitions is decoded but not created. Kafka creates them too; here they would take seconds
# per input and leave a broker that slows every input after them.
_PARTITION_KEYS = frozenset({19, 37})
MAX_PARTITIONS = 64


def _asks_many_partitions(frame: bytes) -> bool:
    from wherry.protocol.codec import Request, RequestDecodeError, decode_request
    from wherry.server.handlers.versions import SUPPORTED_VERSIONS

    try:
        req = decode_request(frame, SUPPORTED_VERSIONS)
    except RequestDecodeError:
        return False
    if not isinstance(req, Request):
        return False
    total = 0
    for topic in getattr(req.body, "topics", None) or ():
        total += max(int(getattr(topic, "num_partitions", 0) or 0),
                     int(getattr(topic, "count", 0) or 0), 1)
        total += len(getattr(topic, "assignments", None) or ())
    return total > MAX_PARTITIONS


def run_lean(payload: bytes) -> Outcome:
    from wherry.protocol.produce_request import decode_produce_request
    from wherry.server.handlers.api_versions import early_answer

    try:
        decode_produce_request(memoryview(bytearray(payload)))
        early_answer(memoryview(payload))
    except Exception as e:
        return _error("lean", e)
    return Outcome("lean", "ok")


PURE: dict[str, Callable[[bytes], Outcome]] = {
    "lean": run_lean,
    "records": run_records,
    "response": run_response,
    "sasl-tokens": run_sasl_tokens,
    "coordinator": run_coordinator,
}


def run_input(data: bytes, broker: BrokerTargets | None) -> Outcome:
    """One input through its target (`broker` None: the broker targets only decode)."""
    target = target_of(data)
    payload = data[1:]
    if target in PURE:
        return PURE[target](payload)
    if broker is None:
        return decode_only(target, payload)
    if target == "request":
        return broker.run_request(payload)
    return broker.run_sasl(payload)


def decode_only(target: str, payload: bytes) -> Outcome:
    """A ``request`` / ``sasl`` input through the request decoder alone (no broker)."""
    from wherry.protocol.codec import RequestDecodeError, decode_request
    from wherry.server.handlers.versions import SUPPORTED_VERSIONS

    frames = [payload] if target == "request" else list(split_frames(payload))[:16]
    try:
        for frame in frames:
            try:
                decode_request(frame, SUPPORTED_VERSIONS)
            except RequestDecodeError:
                pass
    except Exception as e:
        return _error(target, e)
    return Outcome(target, "ok")
