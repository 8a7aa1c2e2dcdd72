"""ElectLeaders (key 43, v0–v2): preferred (0) or unclean (1) leader election on demand
(KIP-183, KIP-460).

The controller decides (`Controller.elect_leaders`); a broker whose controller instance is not
active answers NOT_CONTROLLER for every partition asked (and at the top level from v1, which
has one). ``topic_partitions`` null means every partition the metadata cache knows; the answer
then leaves out the partitions that needed no election (ELECTION_NOT_NEEDED), as Kafka's does.
v0 has no election type: it is a preferred election.

Like Kafka's DelayedElectLeader, the answer waits (at most the request's timeout) until this
broker's metadata shows the partitions elected without error led by their new leader — the
preferred replica, or for an unclean election any leader — so a client that asks for metadata
next sees it; a partition still not shown when the time is up gets REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.codec import duration_ms
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

PREFERRED = 0
UNCLEAN = 1
_Result = tuple[ErrorCode, str | None]


def requested_partitions(topic_partitions: Iterable[Any] | None) -> list[TopicPartition] | None:
    """The request's partitions in order, each once; None when it asks for all."""
    if topic_partitions is None:
        return None
    out: dict[TopicPartition, None] = {}
    for t in topic_partitions:
        for p in t.partitions:
            out[TopicPartition(t.topic, int(p))] = None
    return list(out)


def response(error: ErrorCode, results: Mapping[TopicPartition, _Result]) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, (code, message) in results.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition_id": tp.partition, "error_code": code, "error_message": message}
        )
    return {
        "throttle_time": 0,
        "error_code": error,
        "replica_election_results": [
            {"topic": topic, "partition_result": parts} for topic, parts in by_topic.items()
        ],
    }


def _all_partitions(broker: BrokerServices) -> list[TopicPartition]:
    return [TopicPartition(p.topic_name, p.partition_index) for p in broker.cache.all_partitions()]


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    election_type = int(getattr(body, "election_type", PREFERRED))
    requested = requested_partitions(body.topic_partitions)
    if not authorize_cluster(broker, AclOperation.ALTER):
        # Kafka: ALTER on the cluster; the error at the top and for each partition asked
        # (none when all were asked).
        denied = (ErrorCode.cluster_authorization_failed, None)
        return response(
            ErrorCode.cluster_authorization_failed, dict.fromkeys(requested or (), denied)
        )
    controller = getattr(broker, "controller", None)
    results: dict[TopicPartition, _Result] | None = None
    if election_type not in (PREFERRED, UNCLEAN):
        message = f"Unknown election type {election_type}"
        return response(
            ErrorCode.invalid_request,
            {tp: (ErrorCode.invalid_request, message) for tp in requested or ()},
        )
    if controller is not None and controller.active:
        results = await controller.elect_leaders(election_type, requested)
    if results is None:
        asked = requested if requested is not None else _all_partitions(broker)
        not_controller = (ErrorCode.not_controller, None)
        return response(ErrorCode.not_controller, dict.fromkeys(asked, not_controller))
    if requested is None:
        results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.election_not_needed}
    elected = [tp for tp, (code, _) in results.items() if code == ErrorCode.none]
    if elected:
        shown = await _wait_until_shown(broker, elected, election_type, duration_ms(body.timeout))
        for tp in elected:
            if tp not in shown:
                results[tp] = (ErrorCode.request_timed_out, None)
    return response(ErrorCode.none, results)


async def _wait_until_shown(
    broker: BrokerServices, partitions: list[TopicPartition], election_type: int, timeout_ms: int
) -> set[TopicPartition]:
    """The partitions whose new leadership this broker's metadata shows within the timeout."""

    def shown(tp: TopicPartition) -> bool:
        state = broker.cache.partition(tp.topic, tp.partition)
        if state is None or state.leader < 0:
            return False
        return election_type != PREFERRED or (
            bool(state.replicas) and state.leader == state.replicas[0]
        )

    await broker.wait_for_metadata(lambda: all(shown(tp) for tp in partitions), max(timeout_ms, 0))
    return {tp for tp in partitions if shown(tp)}
