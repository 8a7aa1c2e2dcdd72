"""`wherry features describe` and `wherry cluster cluster-id`: kafka-features.sh's describe and
kafka-cluster.sh's cluster-id.

`features describe` prints each feature a broker supports (ApiVersions v4, whose answer lists
features from version 0 up), as Kafka's tool prints it:
`Feature: transaction.version<TAB>SupportedMinVersion: 0<TAB>SupportedMaxVersion: 2<TAB>
FinalizedVersionLevel: 2<TAB>Epoch: 0`. Features are changed in the brokers' configuration
(`transaction.version`), so there is no upgrade or downgrade here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from wherry.cli.common import (
    AdminService,
    CommandError,
    admin_options,
    exits_on_error,
)
from wherry.cli.wire_clients import BrokerClients, WireCallError, WireTool

__all__ = ["cluster", "feature_lines", "features"]

_API_VERSIONS = (18, 4)
_handle_errors = exits_on_error("Error: ")
_options = admin_options("Timeout of each request, in ms (wherry extra).")


def feature_lines(supported: dict[str, tuple[int, int]], finalized: dict[str, int],
                  epoch: int) -> list[str]:
    """Kafka's FeatureCommand describe lines, by feature name."""
    return [f"Feature: {name}\tSupportedMinVersion: {lo}\tSupportedMaxVersion: {hi}\t"
            f"FinalizedVersionLevel: {finalized.get(name, 0)}\t"
            f"Epoch: {epoch if epoch >= 0 else '-'}"
            for name, (lo, hi) in sorted(supported.items())]


@click.group()
def features() -> None:
    """Describe the cluster's feature flags (like kafka-features.sh)."""


@features.command()
@_options
@_handle_errors
def describe(bootstrap_server: str, command_config: Path | None, timeout_ms: int) -> None:
    """The features a broker supports and their finalized levels."""
    clients = BrokerClients.configured(command_config, timeout_ms, "wherry-features")

    async def ask() -> Any:
        try:
            return await WireTool(bootstrap_server, clients).call_any(_API_VERSIONS, {
                "client_software_name": "wherry-features", "client_software_version": "1"})
        finally:
            await clients.close()

    try:
        resp = asyncio.run(ask())
    except WireCallError as e:
        raise CommandError(f"Cannot reach the cluster at {bootstrap_server}: {e}") from e
    supported = {str(f.name): (int(f.min_version), int(f.max_version))
                 for f in resp.supported_features}
    finalized = {str(f.name): int(f.max_version_level)
                 for f in resp.finalized_features}
    for line in feature_lines(supported, finalized,
                              int(resp.finalized_features_epoch)):
        click.echo(line)


class _ClusterService(AdminService):
    CLIENT_ID = "wherry-cluster"


@click.group()
def cluster() -> None:
    """The cluster's identity (like kafka-cluster.sh)."""


@cluster.command(name="cluster-id")
@_options
@_handle_errors
def cluster_id(bootstrap_server: str, command_config: Path | None, timeout_ms: int) -> None:
    """Print the cluster's id."""
    svc = _ClusterService.connect(bootstrap_server, command_config, timeout_ms)
    click.echo(f"Cluster ID: {svc.metadata('describeCluster').cluster_id}")
