"""`wherry configs`: a kafka-configs.sh look-alike for topic, broker and group configs, a
broker's log levels (`--entity-type broker-loggers`: each logger's level, set or unset while
it runs), and users' and client ids' quotas (`--entity-type users|clients`,
`cli/quota_configs.py`).

`--describe` prints the dynamic configs of an entity (DescribeConfigs), with `--all` every
config (static ones included, for a broker: what it was started with and the defaults);
`--alter` sets (`--add-config k=v,k2=[a,b]`) and removes (`--delete-config k,k2`) them with
IncrementalAlterConfigs, one resource per call (librdkafka accepts one BROKER resource per
request). Entity types: `topics`, `groups` and `brokers` (`--entity-name ID` or
`--entity-default`, the cluster-wide default, which the client libraries cannot name:
`config_wire`), `broker-loggers` (on the wire too). Output and messages are kafka-configs'
("Dynamic configs for broker 1 are:", "Completed updating config for topic t."); failures
print `Error while executing config command : <message>` to stderr and exit with status 1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import click
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from wherry.cli.common import AdminService, CommandError, admin_options, exits_on_error
from wherry.cli.config_wire import (
    BROKER_LOGGER_RESOURCE,
    alter_default_broker,
    alter_resource,
    describe_default_broker,
    describe_resource,
)
from wherry.cli.share_groups import group_ids

ENTITY_TYPES = ("topics", "brokers", "broker-loggers", "groups", "users", "clients")
QUOTA_ENTITY_TYPES = ("users", "clients")
_handle_errors = exits_on_error("Error while executing config command : ")
_common_options = admin_options("Overall timeout of each request to the cluster (wherry extra).")
# Kafka's split: a comma or `=` not inside `[...]`.
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


def parse_add_config(text: str) -> dict[str, str]:
    """`k=v,k2=[a,b]` → {"k": "v", "k2": "a,b"} (kafka-configs' --add-config syntax)."""
    out: dict[str, str] = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        parts = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item.strip())
        if len(parts) != 2 or not parts[0]:
            raise CommandError('Invalid entity config: all configs to be added must be in the '
                               'format "key=val".')
        key, value = parts
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value.strip()
    return out


def parse_delete_config(items: Iterable[str]) -> list[str]:
    return [k.strip() for item in items for k in item.split(",") if k.strip()]


def kafka_source_name(src: Any) -> str:
    """Kafka's name of a config source (confluent-kafka calls DYNAMIC_GROUP_CONFIG
    GROUP_CONFIG)."""
    name = src.name if isinstance(src, ConfigSource) else ConfigSource(int(src)).name
    return "DYNAMIC_GROUP_CONFIG" if name == "GROUP_CONFIG" else str(name)


def source_name(entry: ConfigEntry) -> str:
    return kafka_source_name(entry.source)


def entry_line(entry: ConfigEntry) -> str:
    """The line of a ConfigEntry: its own value first, then its other synonyms
    (confluent-kafka keys synonyms by name, so a same-named one at another level may hide
    the entry's own)."""
    own = source_name(entry)
    synonyms = getattr(entry, "synonyms", None) or {}
    if not synonyms:  # none at all (a key without a default): Kafka prints `synonyms={}`
        return config_line(entry.name, entry.value, own, bool(entry.is_sensitive), [])
    others = [(source_name(s), s.name, s.value) for s in synonyms.values()
              if source_name(s) != own]
    return config_line(entry.name, entry.value, own, bool(entry.is_sensitive),
                       [(own, entry.name, entry.value), *others])


def config_line(name: str, value: str | None, source: str, sensitive: bool,
                synonyms: Iterable[tuple[str, str, str | None]]) -> str:
    """`  name=value sensitive=false synonyms={SOURCE:name=value, ...}` (Kafka's format)."""
    shown = "null" if sensitive or value is None else value
    syn = ", ".join(f"{src}:{n}={'null' if v is None else v}" for src, n, v in synonyms)
    return f"  {name}={shown} sensitive={str(sensitive).lower()} synonyms={{{syn}}}"


class ConfigService(AdminService):
    """The admin calls of `wherry configs`."""

    CLIENT_ID = "wherry-configs"

    def describe(self, rtype: ResourceType, name: str) -> dict[str, ConfigEntry]:
        futs = self.admin.describe_configs([ConfigResource(rtype, name)],
                                           request_timeout=self.timeout_s)
        result: dict[str, ConfigEntry] = {}
        for fut in futs.values():
            result = self._wait(fut, "describeConfigs")
        return result

    def broker_address(self, broker_id: int) -> str:
        """HOST:PORT of a broker of the cluster (a broker's own resources go to it)."""
        broker = self.metadata("describeCluster").brokers.get(broker_id)
        if broker is None:
            raise CommandError(f"Broker {broker_id} is not in the cluster")
        return f"{broker.host}:{broker.port}"

    def alter(self, rtype: ResourceType, name: str, entries: list[ConfigEntry]) -> None:
        res = ConfigResource(rtype, name, incremental_configs=entries)
        futs = self.admin.incremental_alter_configs([res], request_timeout=self.timeout_s)
        for fut in futs.values():
            self._wait(fut, "incrementalAlterConfigs")


def _dynamic_source(entity_type: str) -> ConfigSource | None:
    """The source --describe lists of an entity (None: all, a broker's log levels)."""
    if entity_type == "topics":
        return ConfigSource.DYNAMIC_TOPIC_CONFIG
    if entity_type == "groups":
        return ConfigSource.GROUP_CONFIG
    if entity_type == "broker-loggers":
        return None
    return ConfigSource.DYNAMIC_BROKER_CONFIG


def _entity_label(entity_type: str, name: str) -> str:
    return f"{entity_type[:-1]} {name}"  # topic t, broker 1, broker-logger 1


def _check_args(describe: bool, alter: bool, entity_type: str, entity_name: str | None,
                entity_default: bool, add: str | None, delete: Sequence[str],
                describe_all: bool = False) -> None:
    if describe == alter:
        raise CommandError("Command must include exactly one action: --describe, --alter")
    if describe_all and not describe:
        raise CommandError("--all can only be used with --describe")
    if entity_name is not None and entity_default:
        raise CommandError("--entity-name and --entity-default cannot be used together")
    if entity_default and entity_type in ("topics", "broker-loggers", "groups"):
        raise CommandError(f"--entity-default is not supported for {entity_type}")
    if entity_type == "broker-loggers" and entity_name is None and describe:
        raise CommandError("An entity name must be specified with --describe of broker-loggers")
    if entity_type in ("brokers", "broker-loggers") and entity_name is not None:
        try:
            int(entity_name)
        except ValueError:
            raise CommandError(f"The entity name for {entity_type} must be a valid integer "
                               f"broker id, but it is: {entity_name}") from None
    if alter:
        if entity_name is None and not entity_default:
            raise CommandError(f"An entity name must be specified with --alter of {entity_type}")
        if add is None and not delete:
            raise CommandError("At least one of --add-config or --delete-config must be "
                               "specified with --alter")
    elif add is not None or delete:
        raise CommandError("--add-config and --delete-config can only be used with --alter")


@click.command()
@_common_options
@click.option("--describe", "describe", is_flag=True, help="List configs for the entity.")
@click.option("--alter", "alter", is_flag=True, help="Alter the configuration of the entity.")
@click.option("--all", "describe_all", is_flag=True,
              help="With --describe: list all configs for the entity, including static configs "
                   "if available.")
@click.option("--entity-type", "entity_types", required=True, multiple=True,
              type=click.Choice(ENTITY_TYPES),
              help="Type of entity (topics/brokers/broker-loggers/groups/users/clients); users "
                   "and clients together name a user's client.")
@click.option("--entity-name", "entity_names", multiple=True,
              help="Name of entity (topic name / broker id / group id / user / client id).")
@click.option("--entity-default", is_flag=True,
              help="The cluster-wide default broker configs, or the default user or client id.")
@click.option("--add-config", metavar="K1=V1,K2=[A,B]", help="Configs to add or update.")
@click.option("--delete-config", "delete_config", multiple=True, metavar="K1,K2",
              help="Config keys to remove (comma-separated, repeatable).")
@_handle_errors
def configs(
    bootstrap_server: str, command_config: Path | None, timeout_ms: int, describe: bool,
    alter: bool, entity_types: tuple[str, ...], entity_names: tuple[str, ...],
    entity_default: bool, add_config: str | None, delete_config: tuple[str, ...],
    describe_all: bool,
) -> None:
    """Describe or alter topic, broker and group configs, brokers' log levels, and users' and
    client ids' quotas (like kafka-configs.sh)."""
    if any(t in QUOTA_ENTITY_TYPES for t in entity_types):
        if command_config is not None:
            raise CommandError("Quotas are described and altered on a PLAINTEXT listener: "
                               "--command-config is not supported with users and clients")
        _quotas(bootstrap_server, timeout_ms, describe, alter, entity_types, entity_names,
                entity_default, add_config, delete_config)
        return
    if len(entity_types) > 1 or len(entity_names) > 1:
        raise CommandError("Only users and clients may be combined as entity types")
    entity_type = entity_types[0]
    entity_name = entity_names[0] if entity_names else None
    _check_args(describe, alter, entity_type, entity_name, entity_default, add_config,
                delete_config, describe_all)
    rtype = {"topics": ResourceType.TOPIC, "groups": ResourceType.GROUP}.get(
        entity_type, ResourceType.BROKER)
    svc = ConfigService.connect(bootstrap_server, command_config, timeout_ms)
    if alter:
        to_set = parse_add_config(add_config) if add_config is not None else {}
        to_delete = parse_delete_config(delete_config)
        both = sorted(set(to_set) & set(to_delete))
        if both:
            raise CommandError(f"Invalid config(s): {','.join(both)} are both added and deleted")
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in to_set.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in to_delete]
        name = "" if entity_default else str(entity_name)
        if entity_type == "topics" and name not in svc.metadata().topics:
            raise CommandError(f"The topic '{name}' does not exist.")
        ops: list[tuple[str, str | None, int]] = [(k, v, 0) for k, v in to_set.items()]
        ops += [(k, None, 1) for k in to_delete]
        if entity_default:
            alter_default_broker(bootstrap_server, ops, svc.timeout_s)
        elif entity_type == "broker-loggers":
            alter_resource(svc.broker_address(int(name)), BROKER_LOGGER_RESOURCE, name, ops,
                           svc.timeout_s)
        else:
            svc.alter(rtype, name, entries)
        if entity_default:
            click.echo("Completed updating default config for brokers in the cluster.")
        else:
            click.echo(f"Completed updating config for {_entity_label(entity_type, name)}.")
        return
    if entity_name is not None:
        names = [entity_name]
    elif entity_type == "topics":
        names = sorted(svc.metadata().topics)
    elif entity_type == "groups":
        names = group_ids(bootstrap_server, command_config, timeout_ms)
    elif not entity_default:  # every broker, then the cluster default (as kafka-configs)
        names = [str(b) for b in sorted(svc.metadata().brokers)]
    else:
        names = []
    wanted = None if describe_all else _dynamic_source(entity_type)
    for name in names:
        if entity_type == "broker-loggers":  # every logger, no synonyms (as Kafka)
            loggers = describe_resource(svc.broker_address(int(name)), BROKER_LOGGER_RESOURCE,
                                        name, svc.timeout_s)
            lines = [config_line(c.name, c.value, c.source, c.sensitive, c.synonyms)
                     for c in loggers]
        else:
            entries = svc.describe(rtype, name)
            shown = None if wanted is None else kafka_source_name(wanted)
            lines = [entry_line(entry) for _, entry in sorted(entries.items())
                     if shown is None or source_name(entry) == shown]
        click.echo(f"{'All' if describe_all else 'Dynamic'} configs for "
                   f"{_entity_label(entity_type, name)} are:")
        for line in lines:
            click.echo(line)
    if entity_type == "brokers" and entity_name is None:
        click.echo("Default configs for brokers in the cluster are:")
        for c in sorted(describe_default_broker(bootstrap_server, svc.timeout_s),
                        key=lambda c: c.name):
            if describe_all or c.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.name:
                click.echo(config_line(c.name, c.value, c.source, c.sensitive, c.synonyms))


def _quotas(bootstrap_server: str, timeout_ms: int, describe: bool, alter: bool,
            types: Sequence[str], names: Sequence[str], default: bool, add: str | None,
            delete: Sequence[str]) -> None:
    from wherry.cli import quota_configs

    if any(t not in QUOTA_ENTITY_TYPES for t in types):
        raise CommandError("Only users and clients may be combined as entity types")
    if describe == alter:
        raise CommandError("Command must include exactly one action: --describe, --alter")
    if alter and add is None and not delete:
        raise CommandError("At least one of --add-config or --delete-config must be "
                           "specified with --alter")
    if describe and (add is not None or delete):
        raise CommandError("--add-config and --delete-config can only be used with --alter")
    to_set = parse_add_config(add) if add is not None else {}
    to_delete = parse_delete_config(delete)
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise CommandError(f"Invalid config(s): {','.join(both)} are both added and deleted")
    quota_configs.run(bootstrap_server, timeout_ms / 1000, describe, types, names, default,
                      to_set, to_delete)
