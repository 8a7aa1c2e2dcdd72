"""InitializeShareGroupState (key 83): a share-partition (re)starts at a start offset with a
new state epoch, nothing in flight."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from wherry.server.handlers.share_state_common import answer
from wherry.share.state import ShareKey, ShareState

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    async def one(key: ShareKey, p: Any) -> dict[str, Any]:
        coord = broker.shares.coordinator
        err = await coord.write(key, ShareState(p.state_epoch, -1, p.start_offset, ()))
        return {"error_code": err, "error_message": None}

    return await answer(broker, req.body, one, {})
