"""The console's page of the serving broker: the settings it was started with (secrets
hidden, as Kafka's DescribeConfigs answers null for a sensitive value) and the use of each of
its log dirs (the bytes and partitions of its logs there, the file system's size and free
space, offline or not). Plain JSON-ready data."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wherry.observability.sources import BrokerSources

HIDDEN = "(hidden)"
_SENSITIVE_PARTS = ("password", "secret", "jaas.config", ".key", "credential")


def is_sensitive(key: str) -> bool:
    k = key.lower()
    return any(part in k for part in _SENSITIVE_PARTS)


def shown_config(raw: Mapping[str, str]) -> list[list[str]]:
    return [[k, HIDDEN if is_sensitive(k) else v] for k, v in sorted(raw.items())]


def log_dir_usage(src: BrokerSources) -> list[dict[str, Any]]:
    lm = src.log_manager()
    if lm is None:
        return []
    per_dir: dict[Path, list[int]] = {d: [0, 0] for d in lm.log_dirs}
    for plog in lm.all_logs():
        for d, use in per_dir.items():
            if d in plog.dir.parents:
                use[0] += plog.size_in_bytes
                use[1] += 1
                break
    out = []
    for d, (size, partitions) in per_dir.items():
        total = free = None
        with contextlib.suppress(OSError):
            usage = shutil.disk_usage(d)
            total, free = usage.total, usage.free
        out.append(
            {
                "path": str(d),
                "offline": lm.is_dir_offline(d),
                "bytes": size,
                "partitions": partitions,
                "disk_total": total,
                "disk_free": free,
            }
        )
    return out


def broker_detail(src: BrokerSources) -> dict[str, Any]:
    return {
        "id": src.broker_id,
        "config": shown_config(src.config),
        "log_dirs": log_dir_usage(src),
    }
