"""WriteShareGroupState (key 85): a share-partition leader persists its state (acks=all on
`__share_group_state` before the answer)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from wherry.server.handlers.share_state_common import answer
from wherry.share.partition import StateBatch
from wherry.share.state import ShareKey, ShareState

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    async def one(key: ShareKey, p: Any) -> dict[str, Any]:
        state = ShareState(
            p.state_epoch,
            p.leader_epoch,
            p.start_offset,
            tuple(
                StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                for b in p.state_batches
            ),
        )
        err = await broker.shares.coordinator.write(key, state)
        return {"error_code": err, "error_message": None}

    return await answer(broker, req.body, one, {})
