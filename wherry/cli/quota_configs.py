"""`wherry configs --entity-type users|clients`: client quotas, as kafka-configs.sh shows and
alters them (DescribeClientQuotas / AlterClientQuotas, sent on the wire to the first
bootstrap broker: the client libraries have no call for them).

    wherry configs --bootstrap-server H:P --alter --entity-type clients --entity-name app \\
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    wherry configs --bootstrap-server H:P --alter --entity-type users --entity-default \\
        --add-config request_percentage=200
    wherry configs --bootstrap-server H:P --alter --entity-type users --entity-name alice \\
        --entity-type clients --entity-name app --delete-config producer_byte_rate
    wherry configs --bootstrap-server H:P --describe --entity-type clients [--entity-name app]

With two entity types, the `--entity-name` values go to the `--entity-type` values in order
and `--entity-default` stands for the type left without a name (so the default user with
client `app` is `--entity-type clients --entity-name app --entity-type users
--entity-default`). Output is kafka-configs' (`Quota configs for user-principal 'alice',
client-id 'app' are producer_byte_rate=1048576.0`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from wherry.cli.common import CommandError
from wherry.cli.config_wire import wire_call

DESCRIBE_CLIENT_QUOTAS = (48, 1)
ALTER_CLIENT_QUOTAS = (49, 1)
ENTITY_OF = {"users": "user", "clients": "client-id"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = list[tuple[str, str | None]]  # (entity type, name; None: the default)


def quota_entity(types: Sequence[str], names: Sequence[str], default: bool) -> Entity:
    """The entity of `--entity-type`/`--entity-name`/`--entity-default` (see the module
    docstring); a type with neither a name nor the default is named by neither (describe:
    any)."""
    if len(set(types)) != len(types):
        raise CommandError("Each entity type may be given once")
    if len(names) > len(types):
        raise CommandError("More entity names than entity types")
    out: Entity = []
    given = list(names)
    defaults = 1 if default else 0
    for t in types:
        if given:
            out.append((ENTITY_OF[t], given.pop(0)))
        elif defaults:
            defaults -= 1
            out.append((ENTITY_OF[t], None))
    if defaults:
        raise CommandError("--entity-default without an entity type to apply to")
    return out


def java_double(v: float) -> str:
    """A double as Java's Double.toString prints it (kafka-configs' values)."""
    if v == 0 or 1e-3 <= abs(v) < 1e7:
        return repr(float(v))
    mantissa, _, exp = f"{v:.17e}".partition("e")
    digits = repr(float(mantissa)) if "." in mantissa else mantissa
    return f"{digits}E{int(exp)}"


def _entity_text(entity: Sequence[Any]) -> str:
    parts: dict[str, str] = {}
    for e in entity:
        name = f"'{e.entity_name}'" if e.entity_name is not None else "the default"
        label = {"user": "user-principal", "client-id": "client-id"}.get(e.entity_type,
                                                                          e.entity_type)
        parts[e.entity_type] = f"{label} {name}"
    return ", ".join(parts[t] for t in ("user", "client-id", "ip") if t in parts)


def _check(code: int, message: str | None) -> None:
    if int(code):
        raise CommandError(str(message or f"error code {int(code)}"))


def describe(bootstrap: str, types: Sequence[str], entity: Entity, timeout_s: float
             ) -> list[str]:
    """kafka-configs' lines for the quotas of the entities matching (strictly) the filter."""
    named = {t for t, _ in entity}
    components = [
        {"entity_type": t, "match_type": MATCH_DEFAULT if n is None else MATCH_EXACT,
         "match": n}
        for t, n in entity
    ] + [
        {"entity_type": ENTITY_OF[t], "match_type": MATCH_ANY, "match": None}
        for t in types if ENTITY_OF[t] not in named
    ]
    res = wire_call(bootstrap, DESCRIBE_CLIENT_QUOTAS,
                    {"components": components, "strict": True}, timeout_s)
    _check(res.error_code, res.error_message)
    lines = []
    for entry in res.entries or ():
        values = ", ".join(f"{v.key}={java_double(v.value)}" for v in entry.values)
        lines.append(f"Quota configs for {_entity_text(entry.entity)} are {values}")
    return sorted(lines)


def current_keys(bootstrap: str, entity: Entity, timeout_s: float) -> set[str]:
    components = [{"entity_type": t, "match_type": MATCH_DEFAULT if n is None else MATCH_EXACT,
                   "match": n} for t, n in entity]
    res = wire_call(bootstrap, DESCRIBE_CLIENT_QUOTAS,
                    {"components": components, "strict": True}, timeout_s)
    _check(res.error_code, res.error_message)
    return {v.key for entry in res.entries or () for v in entry.values}


def alter(bootstrap: str, entity: Entity, to_set: dict[str, str], to_delete: Sequence[str],
          timeout_s: float) -> None:
    scram = sorted(k for k in [*to_set, *to_delete] if k.startswith("SCRAM-"))
    if scram:
        raise CommandError(f"{', '.join(scram)}: SCRAM credentials are altered with "
                           "`wherry users`")
    ops: list[dict[str, Any]] = []
    for key, value in to_set.items():
        try:
            number = float(value)
        except ValueError:
            raise CommandError(
                f"Cannot parse quota configuration value for {key}: {value}") from None
        ops.append({"key": key, "value": number, "remove": False})
    if to_delete:
        missing = [k for k in to_delete if k not in current_keys(bootstrap, entity, timeout_s)]
        if missing:
            raise CommandError(f"Invalid config(s): {','.join(missing)}")
    ops += [{"key": k, "value": 0.0, "remove": True} for k in to_delete]
    body = {"entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                         "ops": ops}],
            "validate_only": False}
    res = wire_call(bootstrap, ALTER_CLIENT_QUOTAS, body, timeout_s)
    for entry in res.entries:
        _check(entry.error_code, entry.error_message)


def run(bootstrap: str, timeout_s: float, describe_: bool, types: Sequence[str],
        names: Sequence[str], default: bool, to_set: dict[str, str] | None,
        to_delete: Sequence[str]) -> None:
    entity = quota_entity(types, names, default)
    if describe_:
        for line in describe(bootstrap, types, entity, timeout_s):
            click.echo(line)
        return
    if len(entity) != len(types):
        raise CommandError(f"An entity name must be specified with --alter of {types[0]}")
    alter(bootstrap, entity, to_set or {}, to_delete, timeout_s)
    head_type, head_name = types[0], entity[0][1]
    if head_name is None:
        click.echo(f"Completed updating default config for {head_type} in the cluster.")
    else:
        click.echo(f"Completed updating config for {head_type[:-1]} {head_name}.")
