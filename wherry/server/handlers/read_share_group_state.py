"""ReadShareGroupState (key 84): a share-partition's persisted state, for its leader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.server.handlers.share_state_common import answer
from wherry.share.state import ShareKey

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

_BLANK = {"state_epoch": -1, "start_offset": -1, "state_batches": []}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    async def one(key: ShareKey, p: Any) -> dict[str, Any]:
        err, st = await broker.shares.coordinator.read(key, p.leader_epoch)
        if err != ErrorCode.none or st is None:
            return {**_BLANK, "error_code": err, "error_message": None}
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "state_epoch": st.state_epoch,
            "start_offset": st.start_offset,
            "state_batches": [
                {"first_offset": b.first_offset, "last_offset": b.last_offset,
                 "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                for b in st.batches
            ],
        }

    return await answer(broker, req.body, one, _BLANK)
