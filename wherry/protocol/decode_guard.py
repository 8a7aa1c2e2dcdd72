"""The bounds check a request or response body passes before kio's native reader sees it.

kio's native reader reserves room for an array's items as soon as it has read the array's
count, before it reads a single item: a 17-byte Metadata request whose topic array claims
billions of entries makes it ask for hundreds of gigabytes, which aborts the process (an
abort, not an exception anyone could catch). Strings and byte fields it checks against the
bytes left itself.

`check_entity` walks the same layout kio reads -- every field of the entity class, as kio's
field metadata describes it: fixed-size primitives, legacy (int16/int32) and compact
(unsigned varint) lengths, nullable entities, arrays, flexible versions' tagged fields -- and
refuses, before anything is allocated, any array whose count could not fit in the bytes left
(each item takes at least its minimum encoded size), any negative length other than a
nullable field's null (kio itself reads a null array as None where the schema forbids it,
which handlers never expect), any length past the end and any varint longer than five bytes.
It allocates nothing in proportion to what the input claims, so it is safe on any input.

Strings, byte fields and record sets are skipped by their length, never read: the cost is a
few Python operations per field, and runs of fixed-size fields, and arrays of fixed-size
items, are skipped in one step. Known tagged fields are walked within their declared size.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import Field, fields
from typing import Any, Final, TypeAlias

from kio.serial._introspect import is_optional

from wherry.protocol.kio_fields import field_layout, get_field_tag
from wherry.protocol.primitives import INT16, INT32
from wherry.protocol.varint import VarintTooLongError, uvarint_at

__all__ = ["GuardError", "check_entity", "min_size"]

_Buf: TypeAlias = bytes | bytearray | memoryview


class GuardError(ValueError):
    """A body that claims more than its bytes can hold, or is otherwise not readable."""


_FIXED_SIZES: Final = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_LEGACY_LENGTH: Final = {"string": 2, "bytes": 4, "records": 4}

# Operations of a compiled entity plan, each a tuple whose first item is one of these.
_FIXED: Final = 0  # (_FIXED, size)
_LEGACY: Final = 1  # (_LEGACY, length bytes (2 or 4), nullable)
_COMPACT: Final = 2  # (_COMPACT, nullable)
_ARRAY: Final = 3  # (_ARRAY, flexible, item op, item min size, item fixed size or 0, nullable)
_ENTITY: Final = 4  # (_ENTITY, plan, nullable)
_TAGS: Final = 5  # (_TAGS, {tag: op})

_Op: TypeAlias = tuple[Any, ...]


class _Plan:
    """An entity class's ops, its minimum encoded size and, if it has one, its fixed size."""

    __slots__ = ("fixed", "min_size", "name", "ops")

    def __init__(self, name: str) -> None:
        self.name = name
        self.ops: tuple[_Op, ...] = ()
        self.min_size = 0
        self.fixed = 0  # 0: not of a fixed size


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _Plan(cls.__name__)
        _PLANS[cls] = plan  # before compiling: entity types may nest (never cyclically in kio)
        _compile(cls, plan)
    return plan


def _primitive_op(kafka_type: str, flexible: bool, nullable: bool) -> _Op:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return (_FIXED, size)
    if kafka_type not in _LEGACY_LENGTH:
        raise TypeError(f"unknown kafka_type {kafka_type!r}")
    if flexible:
        return (_COMPACT, nullable)
    return (_LEGACY, _LEGACY_LENGTH[kafka_type], nullable)


def _op_min_size(op: _Op) -> int:
    kind = op[0]
    if kind == _FIXED:
        return int(op[1])
    if kind == _LEGACY:
        return int(op[1])
    if kind in (_COMPACT, _TAGS):
        return 1
    if kind == _ARRAY:
        return 1 if op[1] else 4
    # _ENTITY
    return 1 if op[2] else int(op[1].min_size)


def _field_op(field: Field[Any], *, flexible: bool, is_request_header: bool, is_tag: bool) -> _Op:
    if is_request_header and field.name == "client_id":
        return (_LEGACY, 2, True)  # a legacy nullable string in every header version
    layout = field_layout(field, is_tag=is_tag)
    item: _Op
    if isinstance(layout.item, str):
        item = _primitive_op(layout.item, flexible, layout.nullable)
    else:
        item = (_ENTITY, _plan(layout.item), layout.nullable)
    if not layout.array:
        return item
    fixed = item[1] if item[0] == _FIXED else 0
    if item[0] == _ENTITY and item[1].fixed:
        fixed = item[1].fixed
    # kio reads a null array as None even where the schema does not allow it (Kafka refuses
    # it as malformed): only an optional field may be null.
    return (_ARRAY, flexible, item, max(1, _op_min_size(item)), fixed, is_optional(field))


def _compile(cls: type, plan: _Plan) -> None:
    flexible = bool(getattr(cls, "__flexible__", False))
    is_request_header = cls.__name__ == "RequestHeader"
    ops: list[_Op] = []
    tags: dict[int, _Op] = {}
    for f in fields(cls):
        tag = get_field_tag(f)
        op = _field_op(
            f, flexible=flexible, is_request_header=is_request_header, is_tag=tag is not None
        )
        if tag is not None:
            tags[int(tag)] = op
        elif op[0] == _FIXED and ops and ops[-1][0] == _FIXED:
            ops[-1] = (_FIXED, ops[-1][1] + op[1])  # a run of fixed-size fields: one step
        else:
            ops.append(op)
    if flexible:
        ops.append((_TAGS, tags))
    plan.ops = tuple(ops)
    plan.min_size = sum(_op_min_size(op) for op in ops)
    if len(ops) == 1 and ops[0][0] == _FIXED:
        plan.fixed = ops[0][1]
    elif not ops:
        plan.fixed = 0  # an empty non-flexible entity takes no bytes; never an array's item


# Not `wire.Reader`: every request's header and body passes the generated walkers, which
# keep positions in locals (an IndexError past the end is the cheap bounds check; varints are
# `uvarint_at`'s) and raise GuardError; a Reader object per request would cost more than the
# walk itself.
_uvarint = uvarint_at


def _bad_length(n: int, pos: int, end: int, what: str) -> GuardError:
    if n < 0:
        return GuardError(f"{what} {n} at offset {pos}")
    return GuardError(f"{what} {n} at offset {pos} but only {end - pos} bytes left")


def _bad_count(n: int, pos: int, end: int) -> GuardError:
    if n == -1:
        return GuardError(f"null for a non-nullable array at offset {pos}")
    if n < 0:
        return GuardError(f"array count {n} at offset {pos}")
    return GuardError(f"array of {n} items at offset {pos} but only {end - pos} bytes left")


def _tags(buf: _Buf, pos: int, end: int, known: dict[int, _Walker]) -> int:
    """A tagged-field section: unknown tags skipped, known ones walked within their size."""
    count, pos = _uvarint(buf, pos)
    if count * 2 > end - pos:  # a tag and a size take at least a byte each
        raise GuardError(f"{count} tagged fields at offset {pos} but only {end - pos} bytes left")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        if size > end - pos:
            raise GuardError(f"tagged field {tag} of {size} bytes past the end at offset {pos}")
        walk = known.get(tag)
        if walk is not None and walk(buf[pos : pos + size], 0, size) > size:
            raise GuardError(f"tagged field {tag} overruns its {size} bytes")
        pos += size
    return pos


# --- the walkers: one generated Python function per entity class ---------------------------
#
# A walker is `(buf, pos, end) -> position after`, with `end == len(buf)`: reading past the
# end raises IndexError or struct.error, which `check_entity` reports; a position past the
# end after a skip is caught by the next read or by the final check.

_Walker: TypeAlias = Callable[[_Buf, int, int], int]

_WALKERS: dict[int, _Walker] = {}  # by id(plan)
_CLASS_WALKERS: dict[type, _Walker] = {}
_NAMESPACE: dict[str, Any] = {
    "_uvarint": _uvarint,
    "_i16": INT16.unpack_from,
    "_i32": INT32.unpack_from,
    "_bad_length": _bad_length,
    "_bad_count": _bad_count,
    "_tags": _tags,
    "GuardError": GuardError,
}


def _length_code(op_kind: int, legacy_bytes: int, out: list[str], ind: str) -> None:
    """Code that reads a length or count into `n` (-1: null) and moves `pos` past it."""
    if op_kind == _LEGACY:
        out.append(f"{ind}n = {'_i16' if legacy_bytes == 2 else '_i32'}(buf, pos)[0]")
        out.append(f"{ind}pos += {legacy_bytes}")
    else:
        out.append(f"{ind}n = buf[pos]")
        out.append(f"{ind}if n < 0x80:")
        out.append(f"{ind}    pos += 1")
        out.append(f"{ind}elif buf[pos + 1] < 0x80:")  # two bytes: lengths below 16 KiB
        out.append(f"{ind}    n = (n & 0x7F) | (buf[pos + 1] << 7)")
        out.append(f"{ind}    pos += 2")
        out.append(f"{ind}else:")
        out.append(f"{ind}    n, pos = _uvarint(buf, pos)")
        out.append(f"{ind}n -= 1")


def _refusal_code(nullable: bool, size: str, refuse: str, out: list[str], ind: str) -> None:
    """`if`/`elif` branches that run `refuse` on a negative length or count `n` (but a null's
    -1 where `nullable`) and on one whose `size` in bytes passes the end."""
    out.append(f"{ind}if n < 0:")
    if nullable:
        out.append(f"{ind}    if n != -1:")
        out.append(f"{ind}        {refuse}")
    else:
        out.append(f"{ind}    {refuse}")
    out.append(f"{ind}elif {size} > end - pos:")
    out.append(f"{ind}    {refuse}")


def _op_code(op: _Op, out: list[str], ind: str, consts: dict[str, Any]) -> None:
    kind = op[0]
    if kind == _FIXED:
        out.append(f"{ind}pos += {op[1]}")
    elif kind in (_LEGACY, _COMPACT):
        nullable = op[2] if kind == _LEGACY else op[1]
        _length_code(kind, op[1] if kind == _LEGACY else 0, out, ind)
        what = repr("string or bytes length")
        _refusal_code(nullable, "n", f"raise _bad_length(n, pos, end, {what})", out, ind)
        out.append(f"{ind}else:")
        out.append(f"{ind}    pos += n")
    elif kind == _ARRAY:
        _, flexible, item, item_min, item_fixed, nullable = op
        _length_code(_COMPACT if flexible else _LEGACY, 4, out, ind)
        _refusal_code(nullable, f"n * {item_min}", "raise _bad_count(n, pos, end)", out, ind)
        out.append(f"{ind}else:")
        if item_fixed:
            out.append(f"{ind}    pos += n * {item_fixed}")
        else:
            out.append(f"{ind}    for _ in range(n):")
            _op_code(item, out, ind + "        ", consts)
    elif kind == _ENTITY:
        name = f"_w{len(consts)}"
        consts[name] = _walker(op[1])
        if op[2]:
            out.append(f"{ind}if buf[pos] == 0xFF:")  # the null marker, int8 -1
            out.append(f"{ind}    pos += 1")
            out.append(f"{ind}else:")
            out.append(f"{ind}    pos = {name}(buf, pos + 1, end)")
        else:
            out.append(f"{ind}pos = {name}(buf, pos, end)")
    else:  # _TAGS
        name = f"_k{len(consts)}"
        consts[name] = {tag: _op_walker(sub) for tag, sub in op[1].items()}
        out.append(f"{ind}if buf[pos]:")
        out.append(f"{ind}    pos = _tags(buf, pos, end, {name})")
        out.append(f"{ind}else:")
        out.append(f"{ind}    pos += 1")


def _compile_walker(ops: tuple[_Op, ...], name: str) -> _Walker:
    consts: dict[str, Any] = {}
    body: list[str] = []
    for op in ops:
        _op_code(op, body, "    ", consts)
    src = "\n".join([f"def {name}(buf, pos, end):", *body, "    return pos", ""])
    namespace = {**_NAMESPACE, **consts}
    exec(compile(src, f"<decode guard: {name}>", "exec"), namespace)
    walker: _Walker = namespace[name]
    return walker


def _walker(plan: _Plan) -> _Walker:
    walker = _WALKERS.get(id(plan))
    if walker is None:
        walker = _WALKERS[id(plan)] = _compile_walker(plan.ops, f"walk_{plan.name}")
    return walker


def _op_walker(op: _Op) -> _Walker:
    return _compile_walker((op,), "walk_tagged_field")


def check_entity(cls: type, buf: _Buf, offset: int = 0, end: int | None = None) -> int:
    """Check that kio's reader may read an entity of `cls` at `offset` of `buf` (up to `end`,
    the buffer's end by default) without reserving more than the bytes there can fill.

    Returns the offset right after the entity; raises `GuardError` naming what is wrong.
    """
    size = len(buf)
    if end is not None and end != size:
        if not 0 <= offset <= end <= size:
            raise GuardError(f"offset {offset} outside a buffer of {end} bytes")
        return offset + check_entity(cls, buf[offset:end])
    if not 0 <= offset <= size:
        raise GuardError(f"offset {offset} outside a buffer of {size} bytes")
    walker = _CLASS_WALKERS.get(cls)
    if walker is None:
        walker = _CLASS_WALKERS[cls] = _walker(_plan(cls))
    try:
        pos = walker(buf, offset, size)
    except (IndexError, struct.error):
        raise GuardError(f"{cls.__name__} truncated ({size - offset} bytes)") from None
    except VarintTooLongError as e:
        raise GuardError(str(e)) from None
    if pos > size:
        raise GuardError(f"{cls.__name__} truncated: {pos - size} bytes missing")
    return pos


def min_size(cls: type) -> int:
    """The fewest bytes an entity of `cls` takes on the wire."""
    return _plan(cls).min_size
