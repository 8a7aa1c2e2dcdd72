"""`wherry groups delete-offsets` on the wire: OffsetDelete (API 47) to the group's coordinator,
found with FindCoordinator, as Kafka's admin client does (confluent-kafka's AdminClient has no
such call). A coordinator that moves or is still loading is asked again until the timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.cli.common import CommandError
from wherry.cli.group_model import TP
from wherry.cli.wire_clients import BrokerClients, WireCallError, WireTool
from wherry.outbound.security import ClientSecurity

__all__ = ["OffsetDeleteResult", "delete_offsets"]

_OFFSET_DELETE = (47, 0)
_GROUP_KEY = 0


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error: ErrorCode  # the request's own error (the group's), or NONE
    partitions: dict[TP, ErrorCode]  # each asked partition's error (all of them: `error`)


async def _delete(tool: WireTool, group: str, partitions: Sequence[TP],
                  timeout_s: float) -> OffsetDeleteResult:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    body = {"group_id": group, "topics": [
        {"name": t, "partitions": [{"partition_index": p} for p in ps]}
        for t, ps in by_topic.items()]}
    try:
        _, resp = await tool.at_coordinator(group, _GROUP_KEY, _OFFSET_DELETE, body,
                                            lambda r: int(r.error_code), timeout_s)
    except WireCallError as e:
        if e.code is None:  # nothing answered
            raise CommandError(f"Cannot reach the group's coordinator: {e}") from e
        error = ErrorCode(e.code)
        return OffsetDeleteResult(error, dict.fromkeys(partitions, error))
    error = ErrorCode(resp.error_code)
    if error != ErrorCode.none:
        return OffsetDeleteResult(error, dict.fromkeys(partitions, error))
    return OffsetDeleteResult(error, {(str(t.name), int(p.partition_index)): ErrorCode(p.error_code)
                                      for t in resp.topics for p in t.partitions})


def delete_offsets(bootstrap_server: str, security: ClientSecurity, group: str,
                   partitions: Sequence[TP], timeout_s: float,
                   client_id: str) -> OffsetDeleteResult:
    """Delete `group`'s committed offsets of `partitions` (OffsetDelete to its coordinator)."""
    async def run() -> OffsetDeleteResult:
        peers = BrokerClients(timeout_s, client_id, security)
        try:
            return await _delete(WireTool(bootstrap_server, peers), group, partitions,
                                 timeout_s)
        finally:
            await peers.close()

    return asyncio.run(run())
