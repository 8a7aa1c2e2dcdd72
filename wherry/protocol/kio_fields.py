"""How kio lays out one field of an entity class, read from kio's field metadata.

Both of the hand-written walkers of kio's layout -- the bounds check every body passes
(`decode_guard.py`) and the reader that skips unknown tagged fields (`tolerant.py`) -- start
from this: a field is a primitive (by its schema type) or an entity (by its class), alone or as
the items of an array; alone, it may be nullable.
"""

from __future__ import annotations

from dataclasses import Field
from typing import Any, NamedTuple

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

__all__ = ["FieldLayout", "field_layout", "get_field_tag"]


class FieldLayout(NamedTuple):
    item: str | type[Any]  # a primitive's schema type (a str), or an entity's class
    array: bool  # an array of such items (never nullable items)
    nullable: bool  # a field alone: encoded nullable (a tagged field never is)


def field_layout(field: Field[Any], *, is_tag: bool) -> FieldLayout:
    optional = False if is_tag else is_optional(field)
    kind = classify_field(field)
    match kind:
        case PrimitiveField():
            return FieldLayout(get_schema_field_type(field), False, optional)
        case PrimitiveTupleField():
            return FieldLayout(get_schema_field_type(field), True, False)
        case EntityField(entity_type):
            return FieldLayout(entity_type, False, optional)
        case EntityTupleField(entity_type):
            return FieldLayout(entity_type, True, False)
        case _:  # pragma: no cover - classify_field is exhaustive
            raise TypeError(f"unsupported field {field.name}: {kind!r}")
