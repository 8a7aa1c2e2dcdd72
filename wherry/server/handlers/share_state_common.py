"""What the share-coordinator APIs (InitializeShareGroupState 83, ReadShareGroupState 84,
WriteShareGroupState 85, DeleteShareGroupState 86, ReadShareGroupStateSummary 87) share:
broker-to-broker requests needing CLUSTER_ACTION on the cluster, answered per partition by
this broker's share coordinator (`coordinator/share_state.py`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster
from wherry.share.state import ShareKey

if TYPE_CHECKING:
    from wherry.server.services import BrokerServices

PartitionAnswer = Callable[[ShareKey, Any], Awaitable[dict[str, Any]]]
_S = TypeVar("_S")


async def answer(
    broker: BrokerServices, body: Any, per_partition: PartitionAnswer, blank: dict[str, Any]
) -> Mapping[str, Any]:
    """`blank`: the fields of a refused partition besides its error."""
    allowed = authorize_cluster(broker, AclOperation.CLUSTER_ACTION)
    results = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            if not allowed:
                parts.append(
                    {**blank, "partition": p.partition,
                     "error_code": ErrorCode.cluster_authorization_failed,
                     "error_message": "Cluster authorization failed."}
                )
                continue
            key = ShareKey(body.group_id, t.topic_id, p.partition)
            parts.append({"partition": p.partition, **(await per_partition(key, p))})
        results.append({"topic_id": t.topic_id, "partitions": parts})
    return {"throttle_time": 0, "results": results}


def read_answer(
    err: ErrorCode, state: _S | None, blank: dict[str, Any], fields: Callable[[_S], dict[str, Any]]
) -> dict[str, Any]:
    """A read partition's answer: the `fields` of its state, or `blank` with the error."""
    if err != ErrorCode.none or state is None:
        return {**blank, "error_code": err, "error_message": None}
    return {"error_code": ErrorCode.none, "error_message": None, **fields(state)}
