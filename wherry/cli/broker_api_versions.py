"""`wherry broker-api-versions`: a kafka-broker-api-versions.sh look-alike.

For each broker of the cluster (Metadata), its ApiVersions answer in Kafka's words
(NodeApiVersions): one line per API, `Produce(0): 3 to 13 [usable: 13]` -- the versions the
broker serves, and the newest this tool's codecs and the broker share -- or `[unusable: node
too new]` / `[unusable: node too old]`; `Name(key): UNSUPPORTED` for an API the codecs know and
the broker does not serve; `UNKNOWN(key): ...` for one the codecs do not know. What a client
compatibility problem is first looked for with.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from wherry.cli.common import CommandError, admin_options, exits_on_error
from wherry.cli.wire_clients import BrokerClients, bootstrap_addresses
from wherry.outbound.client import RequestError

__all__ = ["api_lines", "broker_api_versions"]

_METADATA = (3, 12)
_API_VERSIONS = (18, 3)
_CLIENT_ID = "wherry-broker-api-versions"
_handle_errors = exits_on_error("Error: ")


def _known() -> dict[int, tuple[str, int, int]]:
    """The APIs this tool's codecs read and write: key -> (Kafka's name, oldest, newest)."""
    from kio.schema.index import api_key_map

    from wherry.observability.request_stats import API_NAMES
    from wherry.protocol.codec import kio_version_range
    from wherry.server.handlers.versions import SUPPORTED_VERSIONS

    out: dict[int, tuple[str, int, int]] = {}
    for key, module in api_key_map.items():
        versions = kio_version_range(key)
        if versions is not None:
            name = API_NAMES.get(key) or "".join(w.capitalize() for w in module.split("_"))
            out[key] = (name, *versions)
    for key in (4, 5, 6, 7):  # wherry's own inter-broker codecs, which kio lacks
        out[key] = (API_NAMES[key], *SUPPORTED_VERSIONS[key])
    return out


def _range(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo} to {hi}"


def api_lines(served: dict[int, tuple[int, int]], known: dict[int, tuple[str, int, int]]
              ) -> list[str]:
    """Kafka's NodeApiVersions.toString lines, by API key."""
    lines: dict[int, str] = {}
    for key, (lo, hi) in served.items():
        if key not in known:
            lines[key] = f"UNKNOWN({key}): {_range(lo, hi)}"
            continue
        name, oldest, newest = known[key]
        if newest < lo:
            usable = "[unusable: node too new]"
        elif hi < oldest:
            usable = "[unusable: node too old]"
        else:
            usable = f"[usable: {min(newest, hi)}]"
        lines[key] = f"{name}({key}): {_range(lo, hi)} {usable}"
    for key, (name, _, _) in known.items():
        lines.setdefault(key, f"{name}({key}): UNSUPPORTED")
    return [lines[k] for k in sorted(lines)]


async def _versions(clients: BrokerClients, bootstrap: str
                    ) -> list[tuple[str, dict[int, tuple[int, int]] | str]]:
    """Each broker's `host:port (id: N rack: R)` and its served versions (or its error)."""
    metadata: Any = None
    errors = []
    for host, port in bootstrap_addresses(bootstrap):
        try:
            metadata = await clients.get(host, port).call(*_METADATA, {
                "topics": [], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False})
            break
        except RequestError as e:
            errors.append(str(e))
    if metadata is None:
        raise CommandError(f"Cannot reach the cluster at {bootstrap}: {'; '.join(errors)}")
    out: list[tuple[str, dict[int, tuple[int, int]] | str]] = []
    for b in sorted(metadata.brokers, key=lambda b: int(b.node_id)):
        node = f"{b.host}:{b.port} (id: {b.node_id} rack: {b.rack if b.rack else 'null'})"
        try:
            resp = await clients.get(str(b.host), int(b.port)).call(*_API_VERSIONS, {
                "client_software_name": "wherry-broker-api-versions",
                "client_software_version": "1"})
        except RequestError as e:
            out.append((node, str(e)))
            continue
        out.append((node, {int(a.api_key): (int(a.min_version), int(a.max_version))
                           for a in resp.api_keys}))
    return out


@click.command("broker-api-versions")
@admin_options("Timeout of each request, in ms (wherry extra).")
@_handle_errors
def broker_api_versions(bootstrap_server: str, command_config: Path | None,
                        timeout_ms: int) -> None:
    """Print the API versions each broker serves (like kafka-broker-api-versions.sh)."""
    clients = BrokerClients.configured(command_config, timeout_ms, _CLIENT_ID)

    async def main() -> list[tuple[str, dict[int, tuple[int, int]] | str]]:
        try:
            return await _versions(clients, bootstrap_server)
        finally:
            await clients.close()

    known = _known()
    for node, answer in asyncio.run(main()):
        if isinstance(answer, str):
            click.echo(f"{node} -> ERROR: {answer}")
        else:
            click.echo(f"{node} -> (\n\t" + ",\n\t".join(api_lines(answer, known)) + "\n)")
