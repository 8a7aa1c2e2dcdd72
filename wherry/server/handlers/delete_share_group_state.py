"""DeleteShareGroupState (key 86): forget a share-partition's state; its state epoch moves
on, so the leaders still holding it are fenced (share/state.py's deletion marker)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from wherry.server.handlers.share_state_common import answer
from wherry.share.state import ShareKey

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    async def one(key: ShareKey, p: Any) -> dict[str, Any]:
        err = await broker.shares.coordinator.delete(key)
        return {"error_code": err, "error_message": None}

    return await answer(broker, req.body, one, {})
