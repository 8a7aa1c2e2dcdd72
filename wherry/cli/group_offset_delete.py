"""`wherry groups delete-offsets` on the wire: OffsetDelete (API 47) to the group's coordinator,
found with FindCoordinator, as Kafka's admin client does (confluent-kafka's AdminClient has no
such call). A coordinator that moves or is still loading is asked again until the timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.cli.common import CommandError
from wherry.cli.group_model import TP
from wherry.cli.wire_clients import BrokerClients, bootstrap_addresses
from wherry.outbound.client import RequestError
from wherry.outbound.security import ClientSecurity

__all__ = ["OffsetDeleteResult", "delete_offsets"]

_FIND_COORDINATOR = (10, 3)
_OFFSET_DELETE = (47, 0)
_GROUP_KEY = 0
_MOVING = frozenset((
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
))
_RETRY_S = 0.1


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error: ErrorCode  # the request's own error (the group's), or NONE
    partitions: dict[TP, ErrorCode]  # each asked partition's error (all of them: `error`)


async def _coordinator(peers: BrokerClients, bootstrap: Sequence[tuple[str, int]],
                       group: str) -> tuple[ErrorCode, tuple[str, int] | None]:
    """The group coordinator's address (or the error of the last broker asked)."""
    last: Exception | None = None
    for host, port in bootstrap:
        try:
            resp = await peers.get(host, port).call(
                *_FIND_COORDINATOR, {"key": group, "key_type": _GROUP_KEY})
        except RequestError as e:
            last = e
            continue
        if resp.error_code != ErrorCode.none:
            return ErrorCode(resp.error_code), None
        return ErrorCode.none, (str(resp.host), int(resp.port))
    raise CommandError(f"Cannot reach the cluster at {','.join(f'{h}:{p}' for h, p in bootstrap)}"
                       f": {last}")


async def _delete(peers: BrokerClients, bootstrap: Sequence[tuple[str, int]], group: str,
                  partitions: Sequence[TP], timeout_s: float) -> OffsetDeleteResult:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    body = {"group_id": group, "topics": [
        {"name": t, "partitions": [{"partition_index": p} for p in ps]}
        for t, ps in by_topic.items()]}
    deadline = time.monotonic() + timeout_s
    error = ErrorCode.coordinator_not_available
    while True:
        error, address = await _coordinator(peers, bootstrap, group)
        if address is not None:
            try:
                resp = await peers.get(*address).call(*_OFFSET_DELETE, body)
            except RequestError:
                error = ErrorCode.coordinator_not_available
            else:
                error = ErrorCode(resp.error_code)
                if error == ErrorCode.none:
                    return OffsetDeleteResult(error, {
                        (str(t.name), int(p.partition_index)): ErrorCode(p.error_code)
                        for t in resp.topics for p in t.partitions})
        if error not in _MOVING or time.monotonic() + _RETRY_S > deadline:
            return OffsetDeleteResult(error, dict.fromkeys(partitions, error))
        await asyncio.sleep(_RETRY_S)


def delete_offsets(bootstrap_server: str, security: ClientSecurity, group: str,
                   partitions: Sequence[TP], timeout_s: float,
                   client_id: str) -> OffsetDeleteResult:
    """Delete `group`'s committed offsets of `partitions` (OffsetDelete to its coordinator)."""
    async def run() -> OffsetDeleteResult:
        peers = BrokerClients(timeout_s, client_id, security)
        try:
            return await _delete(peers, bootstrap_addresses(bootstrap_server), group, partitions,
                                 timeout_s)
        finally:
            await peers.close()

    return asyncio.run(run())
