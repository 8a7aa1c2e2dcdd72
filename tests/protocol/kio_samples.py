"""Random kio entities of any schema, from kio's own field metadata, and every (API key,
version) kio knows: what the decode guard's tests check against kio's writer and reader."""

from __future__ import annotations

import datetime
import io
import random
import uuid
from dataclasses import MISSING, fields
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer

from wherry.protocol.codec import load_request_schema, load_response_schema
from wherry.protocol.kio_fields import field_layout, get_field_tag

_ERRORS = list(ErrorCode)
_UTC = datetime.UTC


def all_schemas() -> list[tuple[int, int, str, type]]:
    """(api key, version, "request" | "response", entity class) of every schema kio has."""
    out = []
    for key, name in sorted(api_key_map.items()):
        for version in sorted(schema_name_map[name]):
            loads = (("request", load_request_schema), ("response", load_response_schema))
            for kind, load in loads:
                try:
                    out.append((key, version, kind, load(key, version)))
                except Exception:
                    continue
    return out


def _primitive(kafka_type: str, rnd: random.Random, optional: bool) -> Any:
    if optional and rnd.random() < 0.2:
        return None
    match kafka_type:
        case "bool":
            return rnd.random() < 0.5
        case "int8":
            return rnd.randint(-128, 127)
        case "int16":
            return rnd.randint(-(2**15), 2**15 - 1)
        case "uint16":
            return rnd.randint(0, 2**16 - 1)
        case "int32":
            return rnd.randint(-(2**31), 2**31 - 1)
        case "int64":
            return rnd.randint(-(2**63), 2**63 - 1)
        case "float64":
            return rnd.random() * 1e6
        case "error_code":
            return rnd.choice(_ERRORS)
        case "timedelta_i32":
            return datetime.timedelta(milliseconds=rnd.randint(0, 2**31 - 1))
        case "timedelta_i64":
            return datetime.timedelta(milliseconds=rnd.randint(0, 2**40))
        case "datetime_i64":
            return datetime.datetime.fromtimestamp(rnd.randint(0, 2**31) / 1000, _UTC)
        case "uuid":
            return uuid.UUID(int=rnd.getrandbits(128) or 1)
        case "string":
            return "".join(rnd.choice("abcé-_.漢") for _ in range(rnd.randint(0, 300)))
        case "bytes" | "records":
            return rnd.randbytes(rnd.choice((0, 1, 5, 200)))
    raise AssertionError(kafka_type)


def _random_item(item: str | type, rnd: random.Random, depth: int) -> Any:
    """An array's item: never null."""
    if isinstance(item, str):
        return _primitive(item, rnd, False)
    return random_entity(item, rnd, depth + 1)


def random_entity(cls: type, rnd: random.Random, depth: int = 0) -> Any:
    values: dict[str, Any] = {}
    for f in fields(cls):
        tagged = get_field_tag(f) is not None
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if tagged and has_default and rnd.random() < 0.5:
            continue  # left at its default (not written)
        # nullable as the field's type says, tagged or not
        item, array, optional = field_layout(f, is_tag=False)
        n = rnd.choice(((0, 1, 3, 40), (0, 1, 2), (0, 1))[min(depth, 2)])
        if array:
            values[f.name] = tuple(_random_item(item, rnd, depth) for _ in range(n))
        elif isinstance(item, str):
            values[f.name] = _primitive(item, rnd, optional)
        else:
            values[f.name] = (
                None if optional and rnd.random() < 0.2 else random_entity(item, rnd, depth + 1)
            )
    return cls(**values)


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def kio_response_frame(api_key: int, version: int, correlation_id: int, data: Any) -> bytes:
    """A response frame (size prefix, header, body) written by kio alone, from the mapping
    `codec.build_entity` reads: what the broker's own writers and kept bodies must equal."""
    from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
    from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1

    from wherry.protocol.codec import build_entity

    cls = load_response_schema(api_key, version)
    flexible = cls.__flexible__ and api_key != 18
    header_cls = ResponseHeaderV1 if flexible else ResponseHeaderV0
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    entity_writer(cls)(buf, build_entity(cls, data))
    body = buf.getvalue()
    return len(body).to_bytes(4, "big") + body
