"""The `wherry` command."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import click

from wherry.server.config import BrokerConfigError, load_config


def _setup_logging(level: str, data_dir: Path | None = None) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)",
        stream=sys.stderr,
    )
    if data_dir is not None:
        # SPEC H12: state changes go to their own file too, in a parseable format.
        data_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(data_dir / "state-change.log")
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s"))
        sc = logging.getLogger("wherry.state_change")
        sc.addHandler(handler)
        sc.setLevel(logging.INFO)


@click.group()
@click.version_option(package_name="wherry")
def main() -> None:
    """wherry: a Kafka-compatible commit-log broker."""


@main.command()
@click.argument(
    "properties", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--broker-id", type=int, help="broker.id")
@click.option("--listeners", help="listeners, e.g. PLAINTEXT://127.0.0.1:9092")
@click.option("--advertised-listeners", help="advertised.listeners")
@click.option("--log-dirs", help="log.dirs (comma-separated)")
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Any broker config, Kafka name (repeatable).",
)
@click.option("--log-level", default="INFO", show_default=True)
def server(
    properties: Path | None,
    broker_id: int | None,
    listeners: str | None,
    advertised_listeners: str | None,
    log_dirs: str | None,
    overrides: tuple[str, ...],
    log_level: str,
) -> None:
    """Run a broker (defaults: id 0, 127.0.0.1:9092, data in ./wherry-data)."""
    props: dict[str, str] = {}
    for item in overrides:
        if "=" not in item:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--override")
        k, v = item.split("=", 1)
        props[k.strip()] = v.strip()
    for key, value in (
        ("broker.id", broker_id),
        ("listeners", listeners),
        ("advertised.listeners", advertised_listeners),
        ("log.dirs", log_dirs),
    ):
        if value is not None:
            props[key] = str(value)
    try:
        cfg = load_config(properties, props)
    except BrokerConfigError as e:
        raise click.ClickException(str(e)) from e
    _setup_logging(log_level, cfg.data_dir)
    try:
        import uvloop

        code = uvloop.run(_serve(cfg))
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        code = asyncio.run(_serve(cfg))
    sys.exit(code)


async def _serve(cfg: object) -> int:
    from wherry.server.broker import Broker
    from wherry.server.config import BrokerConfig

    assert isinstance(cfg, BrokerConfig)
    broker = Broker(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except Exception as e:
        logging.getLogger("wherry").exception("startup failed: %s", e)
        await broker.stop()
        return 1
    bound = zip(cfg.listeners, broker.bound_ports, strict=True)
    print(f"wherry broker {cfg.broker_id} ready on "
          f"{','.join(f'{ep.host}:{port}' for ep, port in bound)}", flush=True)
    await stop.wait()
    await broker.stop()
    return 0


def _register_tools() -> None:
    from wherry.cli import console, groups, topics

    main.add_command(topics.topics)
    main.add_command(groups.groups)
    main.add_command(console.produce)
    main.add_command(console.consume)


_register_tools()
