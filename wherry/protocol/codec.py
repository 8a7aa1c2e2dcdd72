"""Request/response codec on top of `kio`, sans-I/O.

* `decode_request` reads the fixed request-header prefix itself (so an unknown API key or
  version is reported cleanly), then parses header and body with kio's native reader and, when
  a client sends tagged fields kio does not know, falls back to a reader that skips them.
* `encode_response` builds the response entity for *whatever version the client asked for*
  from a plain, version-neutral mapping (`build_entity`): fields the version lacks are dropped,
  fields it has but the mapping omits get their schema default. Handlers therefore never write
  per-version code.
* `encode_request` and `decode_response` are the client side: a broker reaching another broker
  (replica fetchers, AlterPartition, the controller's requests) encodes with the first and reads
  the answer with the second, which checks the correlation id when told the one it expects.
* LeaderAndIsr, StopReplica and UpdateMetadata (API keys 4-6), which kio lacks, go through
  `interbroker_codec` instead, and ControlledShutdown (key 7) through
  `controlled_shutdown_codec`: their request bodies are the dataclasses of `interbroker`, and
  `encode_response` takes the matching response dataclass (or a mapping of its fields).

Every response header is v0 (correlation id) for non-flexible versions and v1 (correlation id,
tagged fields) for flexible ones, except ApiVersions, whose answers always use v0.
"""

from __future__ import annotations

import datetime
import functools
import io
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from kio.index import UnknownEntity
from kio.index import load_request_schema as _kio_request_schema
from kio.index import load_response_schema as _kio_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.serial.errors import BufferUnderflow
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32

from wherry.protocol.decode_guard import GuardError, check_entity
from wherry.protocol.metadata_response import encode_metadata_body
from wherry.protocol.primitives import INT32 as _SIZE
from wherry.protocol.primitives import REQUEST_PREFIX
from wherry.protocol.produce_request import LEAN_MIN_FRAME_BYTES, decode_produce_request
from wherry.protocol.produce_response import encode_produce_body
from wherry.protocol.response_cache import CACHED_KEYS, ResponseBodyCache

if TYPE_CHECKING:
    from wherry.protocol.interbroker import ControlledShutdownRequest
    from wherry.protocol.interbroker_codec import InterbrokerRequestBody

# kio resolves a schema through importlib on every call; the broker asks for the same few
# thousands of times a second.
load_request_schema = functools.cache(_kio_request_schema)
load_response_schema = functools.cache(_kio_response_schema)
# Encoded bodies of the answers that repeat (`response_cache`)
RESPONSE_BODIES = ResponseBodyCache()


API_VERSIONS_KEY: Final = 18
_PRODUCE_KEY: Final = 0
_METADATA_KEY: Final = 3
# LeaderAndIsr, StopReplica, UpdateMetadata (`interbroker_codec`) and ControlledShutdown
# (`controlled_shutdown_codec`): kio lacks them; their codecs are imported on first use.
_INTERBROKER_KEYS: Final = frozenset((4, 5, 6))
_CONTROLLED_SHUTDOWN_KEY: Final = 7
_FRAME_START = struct.Struct(">ii")  # a response's size and correlation id
_KEY_VERSION = struct.Struct(">hh")  # a request's first fields
_CORRELATION_ID = _SIZE  # the first field of every response header
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ZERO_UUID = uuid.UUID(int=0)


class RequestDecodeError(Exception):
    """A frame that cannot be understood; the connection is closed with a log line."""


class ResponseDecodeError(Exception):
    """A response frame that cannot be read: truncated or malformed, trailing bytes, an API or
    version this codec lacks, or the answer to another request than the one expected."""


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request entity, or an `interbroker` dataclass for API keys 4-7
    size_bytes: int


@dataclass(frozen=True, slots=True)
class UnsupportedVersion:
    """A request whose API key is known but whose version this broker does not serve."""

    api_key: int
    api_version: int
    correlation_id: int


def kio_version_range(api_key: int) -> tuple[int, int] | None:
    """The versions kio can parse for an API key, or None if kio lacks the API."""
    from kio.schema.index import api_key_map

    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = schema_name_map[name]
    return min(versions), max(versions)


def _read(
    cls: type,
    frame: bytes | memoryview,
    offset: int,
    error: type[Exception] = RequestDecodeError,
) -> tuple[Any, int]:
    # kio's native reader reserves an array's room from its count before reading an item:
    # a count the bytes left cannot hold must never reach it (see `decode_guard`).
    try:
        check_entity(cls, frame, offset)
    except GuardError as e:
        raise error(f"malformed {cls.__name__}: {e}") from e
    try:
        return entity_reader(cls)(frame, offset)
    except KeyError as e:
        if "tagged field" not in str(e):
            raise error(f"malformed {cls.__name__}: {e!r}") from e
        from wherry.protocol.tolerant import DecodeError, read_entity_tolerant

        try:
            return read_entity_tolerant(cls, frame, offset)
        except (DecodeError, BufferUnderflow) as e2:
            raise error(f"malformed {cls.__name__}: {e2}") from e2
    except Exception as e:  # the native reader may raise anything on garbage
        raise error(f"malformed {cls.__name__}: {e!r}") from e


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the fixed prefix of a request."""
    if len(frame) < REQUEST_PREFIX.size:
        raise RequestDecodeError(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id = REQUEST_PREFIX.unpack_from(frame, 0)
    return api_key, api_version, correlation_id


# The API versions whose kio request and response schemas are loaded (`load_schemas`).
_SCHEMAS_LOADED: set[tuple[int, int]] = set()


def schemas_to_load(
    frame: bytes | memoryview, supported: Mapping[int, tuple[int, int]]
) -> tuple[int, int] | None:
    """The API key and version of a request frame when decoding and answering it would first
    load kio's schema modules of that version (a few to tens of ms of module execution: the
    caller can have `load_schemas` run in a thread instead of on its event loop); None when
    they are loaded, when the codec of its key is hand-written, or when the version is not in
    `supported` (the decoder refuses it)."""
    if len(frame) < 4:
        return None
    api_key, api_version = _KEY_VERSION.unpack_from(frame, 0)
    if (api_key, api_version) in _SCHEMAS_LOADED:
        return None
    if api_key in _INTERBROKER_KEYS or api_key == _CONTROLLED_SHUTDOWN_KEY:
        return None
    rng = supported.get(api_key)
    if rng is None or not rng[0] <= api_version <= rng[1]:
        return None
    return api_key, api_version


def load_schemas(api_key: int, api_version: int) -> None:
    """Load (and keep) kio's request and response schemas of an API version; thread-safe (the
    import system locks each module while it loads)."""
    load_request_schema(api_key, api_version)
    load_response_schema(api_key, api_version)
    _SCHEMAS_LOADED.add((api_key, api_version))


def decode_request(
    frame: bytes | memoryview, supported: Mapping[int, tuple[int, int]]
) -> Request | UnsupportedVersion:
    """Parse one request frame (without its size prefix).

    `supported` maps API key → (min, max) version this broker serves. An unsupported
    ApiVersions version is returned as `UnsupportedVersion` (the broker answers it with a v0
    response); any other unknown key or version raises RequestDecodeError.

    Produce requests of LEAN_MIN_FRAME_BYTES or more go through
    `produce_request.decode_produce_request` first, whose `records` are views of a writable
    frame (no copy); what it does not read exactly goes to kio. A writable frame (the receive
    buffer's own) is read by kio through a read-only view: kio's readers refuse writable
    buffers.
    """
    api_key, api_version, correlation_id = peek_header(frame)
    rng = supported.get(api_key)
    if rng is None:
        raise RequestDecodeError(f"unknown or unsupported API key {api_key}")
    if not rng[0] <= api_version <= rng[1]:
        if api_key == API_VERSIONS_KEY:
            return UnsupportedVersion(api_key, api_version, correlation_id)
        raise RequestDecodeError(
            f"unsupported version {api_version} of API key {api_key} (supported {rng[0]}-{rng[1]})"
        )
    if api_key == _PRODUCE_KEY and len(frame) >= LEAN_MIN_FRAME_BYTES:
        lean = decode_produce_request(frame)
        if lean is not None:
            header, produce = lean
            return Request(
                api_key, api_version, correlation_id, header.client_id, produce, len(frame)
            )
    if type(frame) is memoryview and not frame.readonly:
        frame = frame.toreadonly()
    if api_key in _INTERBROKER_KEYS or api_key == _CONTROLLED_SHUTDOWN_KEY:
        return _decode_interbroker(frame, api_key)
    try:
        body_cls = load_request_schema(api_key, api_version)
    except UnknownEntity as e:
        raise RequestDecodeError(str(e)) from e
    header, used = _read(body_cls.__header_schema__, frame, 0)
    body, _ = _read(body_cls, frame, used)
    return Request(api_key, api_version, correlation_id, header.client_id, body, len(frame))


def _decode_interbroker(frame: bytes | memoryview, api_key: int) -> Request:
    from wherry.protocol.controlled_shutdown_codec import decode_controlled_shutdown_request
    from wherry.protocol.interbroker_codec import decode_interbroker_request
    from wherry.protocol.tolerant import DecodeError

    try:
        if api_key == _CONTROLLED_SHUTDOWN_KEY:
            cs = decode_controlled_shutdown_request(frame)
            return Request(
                cs.api_key, cs.api_version, cs.correlation_id, cs.client_id, cs.body, len(frame)
            )
        req = decode_interbroker_request(frame)
    except DecodeError as e:
        raise RequestDecodeError(str(e)) from e
    return Request(
        req.api_key, req.api_version, req.correlation_id, req.client_id, req.body, len(frame)
    )


def response_class(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


def _response_header_class(api_key: int, cls: type) -> type:
    # ApiVersions responses always use header v0 so old clients can read the error.
    flexible = bool(getattr(cls, "__flexible__", False))
    return ResponseHeaderV1 if flexible and api_key != API_VERSIONS_KEY else ResponseHeaderV0


def encode_response(
    api_key: int, api_version: int, correlation_id: int, data: Mapping[str, Any] | Any
) -> bytes:
    """Serialize a response (size prefix included) for the requested version.

    For LeaderAndIsr, StopReplica, UpdateMetadata and ControlledShutdown `data` is the
    `interbroker` response dataclass (or a mapping of its fields, e.g. `{"error_code": ...}`).
    """
    if api_key in _INTERBROKER_KEYS:
        from wherry.protocol.interbroker_codec import encode_interbroker_response

        return encode_interbroker_response(api_key, api_version, correlation_id, data)
    if api_key == _CONTROLLED_SHUTDOWN_KEY:
        from wherry.protocol.controlled_shutdown_codec import encode_controlled_shutdown_response

        return encode_controlled_shutdown_response(api_version, correlation_id, data)
    cls = load_response_schema(api_key, api_version)
    # the header: v0 the correlation id, v1 that and no tagged fields (`_response_header_class`)
    tagged = b"\0" if _response_header_class(api_key, cls) is ResponseHeaderV1 else b""
    if api_key == _PRODUCE_KEY and (body := encode_produce_body(api_version, data)) is not None:
        return _FRAME_START.pack(4 + len(tagged) + len(body), correlation_id) + tagged + body
    if api_key == _METADATA_KEY and type(data) is dict:
        body = encode_metadata_body(api_version, data)
        return _FRAME_START.pack(4 + len(tagged) + len(body), correlation_id) + tagged + body
    if api_key in CACHED_KEYS:
        body = RESPONSE_BODIES.body(
            api_key, api_version, data, lambda: _encode_body(cls, data)
        )
        return _FRAME_START.pack(4 + len(tagged) + len(body), correlation_id) + tagged + body
    buf = io.BytesIO()
    buf.write(_FRAME_START.pack(0, correlation_id))
    buf.write(tagged)
    entity_writer(cls)(buf, build_entity(cls, data))
    return _with_size(buf)


def _encode_body(cls: type, data: Mapping[str, Any] | Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(cls)(buf, build_entity(cls, data))
    return buf.getvalue()


def _with_size(buf: io.BytesIO) -> bytes:
    """The frame in `buf` (written after 4 placeholder bytes) with its size prefix filled in."""
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    result = bytes(out)
    del out
    return result


def decode_response(
    api_key: int,
    api_version: int,
    frame: bytes | memoryview,
    *,
    expect_correlation_id: int | None = None,
) -> tuple[int, Any]:
    """(correlation id, body) of one response frame (without its size prefix) to a request of
    `api_key` at `api_version`: a kio response entity, or the `interbroker` response dataclass
    for API keys 4-7.

    With `expect_correlation_id`, a frame answering another request raises before its body is
    read. Anything unreadable raises ResponseDecodeError.
    """
    if len(frame) < _CORRELATION_ID.size:
        raise ResponseDecodeError(f"response of {len(frame)} bytes is shorter than a header")
    (correlation_id,) = _CORRELATION_ID.unpack_from(frame, 0)
    if expect_correlation_id is not None and correlation_id != expect_correlation_id:
        raise ResponseDecodeError(
            f"correlation id {correlation_id} in the answer to request {expect_correlation_id}"
            f" (API key {api_key} v{api_version})"
        )
    if api_key in _INTERBROKER_KEYS or api_key == _CONTROLLED_SHUTDOWN_KEY:
        from wherry.protocol.controlled_shutdown_codec import decode_controlled_shutdown_response
        from wherry.protocol.interbroker_codec import decode_interbroker_response
        from wherry.protocol.tolerant import DecodeError

        try:
            if api_key == _CONTROLLED_SHUTDOWN_KEY:
                return decode_controlled_shutdown_response(api_version, frame)
            return decode_interbroker_response(api_key, api_version, frame)
        except DecodeError as e:
            raise ResponseDecodeError(str(e)) from e
    try:
        cls = load_response_schema(api_key, api_version)
    except UnknownEntity as e:
        raise ResponseDecodeError(str(e)) from e
    # kio's readers return the bytes they consumed, not the new offset.
    _, header_size = _read(_response_header_class(api_key, cls), frame, 0, ResponseDecodeError)
    body, body_size = _read(cls, frame, header_size, ResponseDecodeError)
    if header_size + body_size != len(frame):
        raise ResponseDecodeError(
            f"{len(frame) - header_size - body_size} bytes after {cls.__name__} v{api_version}"
        )
    return correlation_id, body


# --- building entities of any version from version-neutral mappings -----------------------

_Converter = Callable[[Any], Any]


def _zero(kafka_type: str, optional: bool) -> Any:
    if optional:
        return None
    match kafka_type:
        case "string":
            return ""
        case "bytes" | "records":
            return b""
        case "bool":
            return False
        case "error_code":
            return ErrorCode.none
        case "timedelta_i32" | "timedelta_i64":
            return datetime.timedelta(0)
        case "datetime_i64":
            return _EPOCH
        case "uuid":
            return _ZERO_UUID
        case _:
            return 0


def _primitive_converter(kafka_type: str) -> _Converter | None:
    match kafka_type:
        case "error_code":
            return lambda v: v if isinstance(v, ErrorCode) else ErrorCode(int(v))
        case "timedelta_i32" | "timedelta_i64":
            return lambda v: (
                v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=int(v))
            )
        case "datetime_i64":
            return lambda v: (
                v
                if v is None or isinstance(v, datetime.datetime)
                else _EPOCH + datetime.timedelta(milliseconds=int(v))
            )
        case _:
            return None


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    default: Any  # a value, or a zero-arg factory when `factory` is True
    factory: bool
    convert: _Converter | None
    is_array: bool
    optional: bool


_PLANS: dict[type, tuple[_FieldPlan, ...]] = {}


def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    plan = _PLANS.get(cls)
    if plan is not None:
        return plan
    out: list[_FieldPlan] = []
    for f in fields(cls):
        kind = classify_field(f)
        optional = is_optional(f)
        convert: _Converter | None
        if isinstance(kind, EntityField | EntityTupleField):
            sub = kind.type_
            convert = _entity_converter(sub)
            zero: Any = None if optional or kind.is_array else (lambda s=sub: build_entity(s, {}))
            is_factory = not (optional or kind.is_array)
            if kind.is_array:
                zero = ()
        else:
            kafka_type = get_schema_field_type(f)
            convert = _primitive_converter(kafka_type)
            if isinstance(kind, PrimitiveTupleField):
                zero = None if optional else ()
            else:
                zero = _zero(kafka_type, optional)
            is_factory = False
        if f.default is not MISSING:
            zero, is_factory = f.default, False
        elif f.default_factory is not MISSING:
            zero, is_factory = f.default_factory, True
        out.append(_FieldPlan(f.name, zero, is_factory, convert, kind.is_array, optional))
    plan = tuple(out)
    _PLANS[cls] = plan
    return plan


def _entity_converter(sub: type) -> _Converter:
    return lambda v: build_entity(sub, v)


def build_entity(cls: type, data: Mapping[str, Any] | Any) -> Any:
    """Instantiate kio entity `cls` from a mapping, tolerating missing and extra keys."""
    if data is None or isinstance(data, cls):
        return data
    values: Mapping[str, Any]
    if is_dataclass(data) and not isinstance(data, type):
        values = {f.name: getattr(data, f.name) for f in fields(data)}
    else:
        values = cast(Mapping[str, Any], data)
    kwargs: dict[str, Any] = {}
    for p in _plan(cls):
        if p.name in values:
            value = values[p.name]
            if value is not None and p.convert is not None:
                value = tuple(p.convert(v) for v in value) if p.is_array else p.convert(value)
            elif p.is_array and value is not None and not isinstance(value, tuple):
                value = tuple(value)
        else:
            value = p.default() if p.factory else p.default
        kwargs[p.name] = value
    return cls(**kwargs)


def is_response_class(cls: type) -> bool:
    return getattr(cls, "__type__", None) is EntityType.response


def duration_ms(value: datetime.timedelta | int) -> int:
    """kio decodes Kafka's millisecond durations as timedeltas; handlers want ints."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: Mapping[str, Any] | Any,
    *,
    client_id: str | None = "wherry",
) -> bytes:
    """Serialize a request (size prefix included); for clients, tools and benchmarks.

    For LeaderAndIsr, StopReplica, UpdateMetadata and ControlledShutdown `body` is the
    `interbroker` dataclass.
    """
    if api_key == _CONTROLLED_SHUTDOWN_KEY:
        from wherry.protocol.controlled_shutdown_codec import encode_controlled_shutdown_request

        return encode_controlled_shutdown_request(
            api_version, correlation_id, client_id, cast("ControlledShutdownRequest", body)
        )
    if api_key in _INTERBROKER_KEYS:
        from wherry.protocol.interbroker_codec import encode_interbroker_request

        return encode_interbroker_request(
            api_key, api_version, correlation_id, client_id, cast("InterbrokerRequestBody", body)
        )
    cls = load_request_schema(api_key, api_version)
    hdr_cls = cls.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(hdr_cls)(
        buf,
        hdr_cls(
            request_api_key=i16(api_key),
            request_api_version=i16(api_version),
            correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    entity_writer(cls)(buf, build_entity(cls, body))
    return _with_size(buf)

