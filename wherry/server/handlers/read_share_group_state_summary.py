"""ReadShareGroupStateSummary (key 87): a share-partition's start offset and epochs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from wherry.server.handlers.share_state_common import answer, read_answer
from wherry.share.state import ShareKey, ShareState

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

_BLANK = {"state_epoch": -1, "leader_epoch": -1, "start_offset": -1}


def _fields(st: ShareState) -> dict[str, Any]:
    return {
        "state_epoch": st.state_epoch,
        "leader_epoch": st.leader_epoch,
        "start_offset": st.start_offset,
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    async def one(key: ShareKey, p: Any) -> dict[str, Any]:
        err, st = broker.shares.coordinator.summary(key)
        return read_answer(err, st, _BLANK, _fields)

    return await answer(broker, req.body, one, _BLANK)
