"""Kafka's meta.properties: which cluster and broker a log dir belongs to.

A log dir that already holds a `meta.properties` of another cluster or broker is refused (the
broker does not start); one without it gets it written as Kafka's BrokerMetadataCheckpoint
does: written, fsynced, renamed, the directory fsynced (once the listeners are bound, so a first
start does not wait for the fsyncs before it answers).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from wherry.log.checkpoint import atomic_write


def read_meta_properties(meta: Path) -> dict[str, str]:
    """The `key=value` lines of a meta.properties file (comments skipped)."""
    return dict(
        line.split("=", 1)
        for line in meta.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )


def check_meta_properties(
    log_dirs: Iterable[Path], cluster_id: str, broker_id: int
) -> list[Path]:
    """Refuse a log dir that belongs to another cluster or broker; the dirs without the file
    (`write_meta_properties` writes it there once the listeners are bound: Kafka checkpoints
    the broker's metadata after its socket server is up)."""
    missing: list[Path] = []
    for d in log_dirs:
        meta = Path(d) / "meta.properties"
        if meta.exists():
            props = read_meta_properties(meta)
            if props.get("cluster.id", cluster_id) != cluster_id:
                raise RuntimeError(
                    f"The cluster id {cluster_id} doesn't match the "
                    f"stored cluster id {props['cluster.id']} in {meta}"
                )
            if int(props.get("broker.id", broker_id)) != broker_id:
                raise RuntimeError(
                    f"Configured broker.id {broker_id} doesn't match "
                    f"stored broker.id {props['broker.id']} in {meta}"
                )
        else:
            missing.append(Path(d))
    return missing


def write_meta_properties(log_dirs: Iterable[Path], cluster_id: str, broker_id: int) -> None:
    """Write (durably) the meta.properties of each of `log_dirs`."""
    for d in log_dirs:
        atomic_write(
            d / "meta.properties",
            f"version=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n".encode(),
        )
