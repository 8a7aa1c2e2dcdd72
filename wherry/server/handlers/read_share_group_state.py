"""ReadShareGroupState (key 84): a share-partition's persisted state, for its leader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from wherry.server.handlers.share_state_common import answer, read_answer
from wherry.share.state import ShareKey, ShareState

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

_BLANK = {"state_epoch": -1, "start_offset": -1, "state_batches": []}


def _fields(st: ShareState) -> dict[str, Any]:
    return {
        "state_epoch": st.state_epoch,
        "start_offset": st.start_offset,
        "state_batches": [
            {"first_offset": b.first_offset, "last_offset": b.last_offset,
             "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
            for b in st.batches
        ],
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    async def one(key: ShareKey, p: Any) -> dict[str, Any]:
        err, st = await broker.shares.coordinator.read(key, p.leader_epoch)
        return read_answer(err, st, _BLANK, _fields)

    return await answer(broker, req.body, one, _BLANK)
