"""DeleteGroups (key 42): delete empty groups and their offsets (tombstones in the log)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    names = list(dict.fromkeys(req.body.groups_names))
    errors = broker.groups.coordinator.handle_delete_groups(names, broker.clock.now_ms())
    return {
        "throttle_time": 0,
        "results": [{"group_id": g, "error_code": errors[g]} for g in names],
    }
