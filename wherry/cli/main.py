"""The `wherry` command."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from wherry.cli.json_log import JsonFormatter
from wherry.cli.serve import (
    DEFAULT_HTTP_PORT,
    LOG_OPTIONS,
    SERVER_OPTIONS,
    LogLevelError,
    Option,
    OverrideError,
    default_http_listener,
    log_level_number,
    parse_broker_overrides,
    parse_overrides,
    run,
    serve_server,
    serve_until_signal,
    server_config,
    setup_logging,
)
from wherry.server.config import BrokerConfigError
from wherry.server.config_keys import warn_unused

__all__ = ["DEFAULT_HTTP_PORT", "JsonFormatter", "default_http_listener", "dev_defaults", "main"]

F = TypeVar("F", bound=Callable[..., Any])


def _click_options(options: Sequence[Option]) -> Callable[[F], F]:
    """Click options from their declarations (`serve.py`), listed in `--help` in that order."""

    def decorate(f: F) -> F:
        for o in reversed(options):
            kwargs: dict[str, Any] = {"multiple": o.multiple}
            if o.help:
                kwargs["help"] = o.help
            if o.metavar is not None:
                kwargs["metavar"] = o.metavar
            if o.kind == "int":
                kwargs["type"] = int
            elif o.kind == "choice":
                kwargs["type"] = click.Choice(list(o.choices))
            if o.default is not None:
                kwargs["default"] = o.default
                kwargs["show_default"] = True
            f = click.option(o.flag, o.dest, **kwargs)(f)
        return f

    return decorate


_log_options = _click_options(LOG_OPTIONS)


def _overrides_option(help_text: str) -> Callable[[F], F]:
    """`--override KEY=VALUE` (repeatable), passed as `overrides`."""
    return click.option(
        "--override", "overrides", multiple=True, metavar="KEY=VALUE", help=help_text
    )


def _parse_overrides(overrides: tuple[str, ...]) -> dict[str, str]:
    try:
        return parse_overrides(overrides)
    except OverrideError as e:
        raise click.BadParameter(str(e), param_hint="--override") from e


class _LazyGroup(click.Group):
    """A group whose tool commands (`TOOLS`) are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *TOOLS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in TOOLS:
            module, _, attr = TOOLS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attr)
            assert isinstance(command, click.Command)
            self.add_command(command, cmd_name)
        return command


@click.group(cls=_LazyGroup)
@click.version_option(package_name="wherry")
def main() -> None:
    """wherry: a Kafka-compatible commit-log broker."""


@main.command()
@click.argument("properties", required=False, type=click.Path(path_type=Path))
@_click_options(SERVER_OPTIONS)
def server(properties: Path | None, **values: Any) -> None:
    """Run a broker (defaults: id 0, 127.0.0.1:9092, data in ./wherry-data).

    With --zookeeper (zookeeper.connect) brokers of many processes or machines form one
    cluster through ZooKeeper; give each its own --broker-id."""
    from wherry.server.listener_security import SecurityConfigError

    try:
        cfg = server_config(properties, values)
    except OverrideError as e:
        raise click.BadParameter(str(e), param_hint="--override") from e
    except (LogLevelError, BrokerConfigError, SecurityConfigError) as e:
        raise click.ClickException(str(e)) from e
    sys.exit(serve_server(cfg, values["log_level"], values["log_format"]))


def dev_defaults(brokers: int) -> dict[str, str]:
    """What `wherry dev --brokers N` sets unless the overrides or the properties file do:
    internal topics replicated min(3, N) times (Kafka's code default is 3; the quickstart's 1
    suits one broker only)."""
    rf = str(min(3, brokers))
    return {
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": str(min(2, brokers)),
    }


@main.command()
@click.argument("properties", required=False, type=click.Path(path_type=Path))
@click.option(
    "--brokers",
    default=3,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Number of brokers (ids 0..N-1).",
)
@click.option(
    "--base-port",
    default=9092,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Broker N listens on BASE_PORT+N (0: ports chosen by the OS).",
)
@click.option(
    "--http-base-port",
    type=click.IntRange(0, 65535),
    help="Broker N's HTTP listener (metrics, console) on HTTP_BASE_PORT+N "
    "(0: ports chosen by the OS). Default: 9644, or 0 with --base-port 0.",
)
@click.option("--no-http", is_flag=True, help="No HTTP listeners.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Listener host.")
@click.option(
    "--dir",
    "directory",
    default="wherry-dev",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Data: <DIR>/broker-N per broker, the shared store in <DIR>/__meta.",
)
@_overrides_option("Any broker config, Kafka name, for every broker (repeatable).")
@click.option(
    "--broker-override",
    "broker_overrides",
    multiple=True,
    metavar="ID:KEY=VALUE",
    help="A broker config for broker ID only, e.g. 1:broker.rack=b (repeatable).",
)
@_log_options
def dev(
    properties: Path | None,
    brokers: int,
    base_port: int,
    http_base_port: int | None,
    no_http: bool,
    host: str,
    directory: Path,
    overrides: tuple[str, ...],
    broker_overrides: tuple[str, ...],
    log_level: str,
    log_format: str,
) -> None:
    """Run a cluster of several brokers in one process (embedded store, no ZooKeeper).

    Every broker runs for controller (one wins); Ctrl-C or SIGTERM stops them all."""
    from wherry.server.config import BrokerConfigError, read_properties
    from wherry.testing.cluster import AsyncDevCluster

    if base_port and base_port + brokers - 1 > 65535:
        raise click.BadParameter("ports beyond 65535", param_hint="--base-port")
    if http_base_port is None:
        http_base_port = DEFAULT_HTTP_PORT if base_port else 0
    if http_base_port and http_base_port + brokers - 1 > 65535:
        raise click.BadParameter("ports beyond 65535", param_hint="--http-base-port")
    try:
        log_level_number(log_level)
    except LogLevelError as e:
        raise click.ClickException(str(e)) from e
    props = _parse_overrides(overrides)
    try:
        own = parse_broker_overrides(broker_overrides)
    except OverrideError as e:
        raise click.BadParameter(str(e), param_hint="--broker-override") from e
    try:
        given = read_properties(properties) if properties is not None else {}
        for key, value in dev_defaults(brokers).items():
            if key not in props and key not in given:
                props[key] = value
        cluster = AsyncDevCluster(
            directory,
            brokers=brokers,
            base_port=base_port,
            host=host,
            overrides=props,
            properties_file=properties,
            http_base_port=None if no_http else http_base_port,
            broker_overrides=own,
        )
    except (BrokerConfigError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    setup_logging(log_level, log_format)
    warn_unused(cluster.config_for(0).raw, logging.getLogger("wherry.server.config"))
    sys.exit(run(_serve_dev(cluster)))


async def _serve_dev(cluster: object) -> int:
    from wherry.testing.cluster import AsyncDevCluster

    assert isinstance(cluster, AsyncDevCluster)

    async def start() -> int:
        await cluster.start()
        return await cluster.wait_for_controller()

    def announce(controller: int) -> None:
        for b in cluster.broker_ids:
            role = " (controller)" if b == controller else ""
            print(f"wherry broker {b} ready on {cluster.address(b)}{role}", flush=True)
        for b in cluster.broker_ids:
            if (url := cluster.http_url(b)) is not None:
                print(f"wherry broker {b} metrics and console on {url}", flush=True)
        print(
            f"wherry dev cluster ready: {len(cluster.broker_ids)} brokers, "
            f"bootstrap servers {cluster.bootstrap}, controller {controller}",
            flush=True,
        )

    def describe(e: Exception) -> str:
        from wherry.cli.start_errors import describe_start_error

        return describe_start_error(e)

    return await serve_until_signal(start, announce, cluster.stop, describe)


# The tools' commands: name → "module:attribute", imported when the command is run or listed
# in --help, so `wherry server` imports none of them (nor confluent-kafka).
TOOLS: dict[str, str] = {
    "topics": "wherry.cli.topics:topics",
    "groups": "wherry.cli.groups:groups",
    "produce": "wherry.cli.console:produce",
    "consume": "wherry.cli.console:consume",
    "reassign": "wherry.cli.reassign:reassign",
    "elect": "wherry.cli.elect:elect",
    "configs": "wherry.cli.configs:configs",
    "acls": "wherry.cli.acls:acls",
    "verify-replicas": "wherry.cli.verify_replicas:verify_replicas",
    "get-offsets": "wherry.cli.get_offsets:get_offsets",
    "delete-records": "wherry.cli.delete_records:delete_records",
    "transactions": "wherry.cli.transactions:transactions",
    "broker-api-versions": "wherry.cli.broker_api_versions:broker_api_versions",
    "share-groups": "wherry.cli.share_groups:share_groups",
    "features": "wherry.cli.features:features",
    "cluster": "wherry.cli.features:cluster",
    "dump-log": "wherry.cli.dump_log:dump_log",
    "log-dirs": "wherry.cli.log_dirs:log_dirs",
    "state-change-log": "wherry.cli.state_change_log:state_change_log",
    "users": "wherry.cli.users:users",
}
