"""The cluster-wide `min.insync.replicas`, as Kafka (4.1 and later) keeps it.

A Kafka cluster created at 4.1 or later holds `min.insync.replicas` as a cluster-level dynamic
config (its eligible-leader-replicas invariant: every broker agrees on each partition's
minimum ISR): the controller writes it once, from its static value, when none is set. Every
topic's DescribeConfigs then shows it with source DYNAMIC_DEFAULT_BROKER_CONFIG unless the
topic overrides it, and an operator changes it with `configs --alter --entity-type brokers
--entity-default`. A wherry broker does the same at its start, before it loads its dynamic
configs: the first broker of a cluster writes it (a conditional write: brokers starting
together write it once), later starts find it set and leave it as it is. The start that
creates the cluster writes it with the cluster id and the persistent paths, in one transaction
(`first_start_nodes`): no broker runs yet that a change notification would tell.
"""

from __future__ import annotations

import logging

from wherry.coordination import paths
from wherry.coordination.store import BadVersionError, MetadataStore, NodeExistsError, NoNodeError

log = logging.getLogger(__name__)

MIN_INSYNC_REPLICAS = "min.insync.replicas"


def first_start_nodes(cluster_id: str | None, static_value: int) -> dict[str, bytes] | None:
    """The nodes a cluster's first start (creating `cluster_id`; None: not a first start)
    creates with the persistent paths: its id and the cluster-level `min.insync.replicas`."""
    if cluster_id is None:
        return None
    return {
        paths.CLUSTER_ID: paths.encode_cluster_id(cluster_id),
        paths.broker_config_path(None): paths.encode_config(
            {MIN_INSYNC_REPLICAS: str(static_value)}
        ),
    }


async def ensure_cluster_min_isr(
    store: MetadataStore, static_value: int, *, created: bool = False
) -> bool:
    """Set the cluster-level `min.insync.replicas` to `static_value` unless one is set;
    True when this call wrote it (and told every broker), or when `created`: this start
    created the cluster, and the value with it (`first_start_nodes`)."""
    if created:
        _said(static_value)
        return True
    path = paths.broker_config_path(None)
    while True:
        try:
            data, stat = await store.get(path)
        except NoNodeError:
            try:
                await store.create(
                    path,
                    paths.encode_config({MIN_INSYNC_REPLICAS: str(static_value)}),
                    make_parents=True,
                )
            except NodeExistsError:
                continue  # another broker wrote the entity meanwhile: look again
            break
        config = paths.decode_config(data)
        if MIN_INSYNC_REPLICAS in config:
            return False
        try:
            await store.set(
                path,
                paths.encode_config({**config, MIN_INSYNC_REPLICAS: str(static_value)}),
                version=stat.version,
            )
        except BadVersionError:
            continue
        break
    await paths.notify_config_change(store, paths.broker_config_entity(None))
    _said(static_value)
    return True


def _said(static_value: int) -> None:
    log.info("Set the cluster-level %s to %d (its static value)", MIN_INSYNC_REPLICAS,
             static_value)
