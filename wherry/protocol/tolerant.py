"""Pure-Python, tolerant kio entity reader.

kio's native ``entity_reader`` raises ``KeyError('Unknown tagged field tag: N')`` when a flexible
message carries a tagged field it does not know.  The Kafka protocol (KIP-482) requires unknown
tagged fields to be skipped, so this module provides a fallback reader that walks the dataclass
fields exactly like kio's ``entity_writer`` writes them (in reverse) and skips unknown tags.

It reuses kio's native primitive readers, so values are bit-for-bit the ones the native reader
produces.  It is slower than the native reader and meant to be used only when the native reader
rejects an unknown tag.

Any malformed input raises :class:`DecodeError` (`wherry.protocol.wire`'s: a ``ValueError``
that is also a ``kio.serial.errors.DecodeError``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any, Final, TypeAlias, TypeVar

from kio.serial import errors as kio_errors
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._parse import get_reader
from kio.serial._shared import NullableEntityMarker
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_nullable_legacy_string,
    read_unsigned_varint,
)

from wherry.protocol.kio_fields import field_layout, get_field_tag
from wherry.protocol.wire import DecodeError

__all__ = ["DecodeError", "read_entity_tolerant"]

E = TypeVar("E")

_Buf: TypeAlias = bytes | bytearray | memoryview
# (buffer, offset) -> (value, bytes consumed), the kio reader convention.
_Reader: TypeAlias = Callable[[_Buf, int], tuple[Any, int]]

_NULL_MARKER: Final = int(NullableEntityMarker.null.value)


# --------------------------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------------------------


def _array_reader(item_reader: _Reader, *, flexible: bool) -> _Reader:
    read_length = read_compact_array_length if flexible else read_legacy_array_length

    def read_array(buf: _Buf, offset: int) -> tuple[tuple[Any, ...] | None, int]:
        length, pos = read_length(buf, offset)
        if length is None or length == -1:
            return None, pos
        if length < 0:
            raise DecodeError(f"negative array length {length}")
        # Like Kafka's generated readers: refuse to allocate more items than there are bytes
        # left (every item takes at least one byte); this also bounds the loop.
        remaining = len(buf) - offset - pos
        if length > remaining:
            raise DecodeError(
                f"array of {length} items but only {remaining} bytes remain in the buffer"
            )
        items = []
        for _ in range(length):
            item, size = item_reader(buf, offset + pos)
            items.append(item)
            pos += size
        return tuple(items), pos

    return read_array


# --------------------------------------------------------------------------------------------
# Entities
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _TaggedField:
    name: str
    reader: _Reader


@dataclass(frozen=True, slots=True)
class _EntityPlan:
    entity_type: type[Any]
    flexible: bool
    fields: tuple[tuple[str, _Reader], ...]
    tagged: dict[int, _TaggedField]
    tagged_defaults: tuple[tuple[str, Any], ...]


def _field_reader(
    field: Field[Any], *, flexible: bool, is_request_header: bool, is_tag: bool
) -> _Reader:
    # RequestHeader.client_id always uses the legacy nullable string format (see kio's writer).
    if is_request_header and field.name == "client_id":
        return read_nullable_legacy_string
    # Tagged fields are "optional" by presence of the tag, so never nullable-encoded.
    layout = field_layout(field, is_tag=is_tag)
    inner: _Reader
    if isinstance(layout.item, str):
        inner = get_reader(layout.item, flexible, layout.nullable)
    else:
        inner = _entity_reader(layout.item, layout.nullable)
    return _array_reader(inner, flexible=flexible) if layout.array else inner


_PLANS: dict[type[Any], _EntityPlan] = {}


def _plan(entity_type: type[Any]) -> _EntityPlan:
    plan = _PLANS.get(entity_type)
    if plan is None:
        plan = _PLANS[entity_type] = _compile_plan(entity_type)
    return plan


def _compile_plan(entity_type: type[Any]) -> _EntityPlan:
    flexible = bool(entity_type.__flexible__)
    is_request_header = entity_type.__name__ == "RequestHeader"
    regular: list[tuple[str, _Reader]] = []
    tagged: dict[int, _TaggedField] = {}
    defaults: list[tuple[str, Any]] = []
    for field in fields(entity_type):
        tag = get_field_tag(field)
        reader = _field_reader(
            field,
            flexible=flexible,
            is_request_header=is_request_header,
            is_tag=tag is not None,
        )
        if tag is None:
            regular.append((field.name, reader))
        else:
            tagged[int(tag)] = _TaggedField(field.name, reader)
            default = (
                field.default if field.default is not MISSING else get_tagged_field_default(field)
            )
            defaults.append((field.name, default))
    if tagged and not flexible:
        raise TypeError(f"{entity_type.__name__}: tagged fields on a non-flexible entity")
    return _EntityPlan(entity_type, flexible, tuple(regular), tagged, tuple(defaults))


def _read_tagged_fields(plan: _EntityPlan, buf: _Buf, offset: int, values: dict[str, Any]) -> int:
    """Read the tagged-field section at ``offset``; returns bytes consumed."""
    count, pos = read_unsigned_varint(buf, offset)
    end_of_buf = len(buf)
    for _ in range(count):
        tag, size = read_unsigned_varint(buf, offset + pos)
        pos += size
        length, size = read_unsigned_varint(buf, offset + pos)
        pos += size
        start = offset + pos
        if start + length > end_of_buf:
            raise DecodeError(
                f"tagged field {tag} of {length} bytes overruns the buffer "
                f"({end_of_buf - start} bytes left)"
            )
        known = plan.tagged.get(int(tag))
        if known is not None:
            value, used = known.reader(buf, start)
            if used > length:
                raise DecodeError(
                    f"tagged field {tag} ({known.name}) declared {length} bytes but used {used}"
                )
            values[known.name] = value
        # Unknown tags (and any padding of known ones) are skipped using the declared size.
        pos += length
    return pos


def _entity_reader(entity_type: type[Any], nullable: bool) -> _Reader:
    def read_entity(buf: _Buf, offset: int) -> tuple[Any, int]:
        pos = 0
        if nullable:
            marker, pos = read_int8(buf, offset)
            if marker == _NULL_MARKER:
                return None, pos
        plan = _plan(entity_type)
        values: dict[str, Any] = {}
        for name, reader in plan.fields:
            value, size = reader(buf, offset + pos)
            values[name] = value
            pos += size
        if plan.flexible:
            for name, default in plan.tagged_defaults:
                values[name] = default
            pos += _read_tagged_fields(plan, buf, offset + pos, values)
        return entity_type(**values), pos

    return read_entity


def read_entity_tolerant(
    entity_type: type[E], buf: bytes | bytearray | memoryview, offset: int = 0
) -> tuple[E, int]:
    """Read one ``entity_type`` at ``offset``; returns ``(entity, bytes_consumed)``.

    Same conventions as ``kio.serial.entity_reader(entity_type)(buf, offset)`` (the second
    item is the number of bytes consumed, not the new offset), but unknown tagged fields are
    skipped instead of raising ``KeyError``.  Raises :class:`DecodeError` on malformed input.
    """
    if not (type(buf) is bytes or (isinstance(buf, memoryview) and buf.readonly)):
        buf = bytes(buf)  # kio's native primitive readers only accept read-only buffers
    if offset < 0 or offset > len(buf):
        raise DecodeError(f"offset {offset} outside a buffer of {len(buf)} bytes")
    try:
        entity, size = _entity_reader(entity_type, False)(buf, offset)
    except DecodeError:
        raise
    except (kio_errors.SerialError, ValueError, OverflowError, IndexError, KeyError) as exc:
        raise DecodeError(f"malformed {entity_type.__name__}: {exc}") from exc
    return entity, size
