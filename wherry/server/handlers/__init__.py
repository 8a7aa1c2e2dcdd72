"""One module per Kafka API; `HANDLERS` maps API key → (handler, min version, max version).

A handler is `async def handle(broker, request) -> Mapping | None`: it returns the response as
a version-neutral mapping (the codec fits it to the request's version) or None when the
request gets no response (Produce with acks=0). The controller's requests kio lacks
(LeaderAndIsr, StopReplica, UpdateMetadata) return their `interbroker` response dataclasses,
which `codec.encode_response` encodes through `interbroker_codec`. Only what is listed here is
advertised in ApiVersions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from wherry.server.handlers import (
    alter_configs,
    alter_partition,
    api_versions,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    stop_replica,
    sync_group,
    update_metadata,
)

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.protocol.interbroker_codec import InterbrokerResponseBody
    from wherry.server.services import BrokerServices

Handler = Callable[
    ["BrokerServices", "Request"], Awaitable["Mapping[str, Any] | InterbrokerResponseBody | None"]
]

HANDLERS: dict[int, tuple[Handler, int, int]] = {
    0: (produce.handle, 3, 13),
    1: (fetch.handle, 4, 18),
    2: (list_offsets.handle, 1, 11),
    3: (metadata.handle, 0, 13),
    4: (leader_and_isr.handle, 0, 7),
    5: (stop_replica.handle, 0, 4),
    6: (update_metadata.handle, 0, 8),
    8: (offset_commit.handle, 2, 10),
    9: (offset_fetch.handle, 1, 10),
    10: (find_coordinator.handle, 0, 6),
    11: (join_group.handle, 0, 9),
    12: (heartbeat.handle, 0, 4),
    13: (leave_group.handle, 0, 5),
    14: (sync_group.handle, 0, 5),
    15: (describe_groups.handle, 0, 6),
    16: (list_groups.handle, 0, 5),
    18: (api_versions.handle, 0, 4),
    19: (create_topics.handle, 2, 7),
    20: (delete_topics.handle, 1, 6),
    21: (delete_records.handle, 0, 2),
    22: (init_producer_id.handle, 0, 6),
    23: (offset_for_leader_epoch.handle, 2, 4),
    32: (describe_configs.handle, 1, 4),
    33: (alter_configs.handle, 0, 2),
    37: (create_partitions.handle, 0, 3),
    42: (delete_groups.handle, 0, 2),
    44: (incremental_alter_configs.handle, 0, 1),
    47: (offset_delete.handle, 0, 0),
    56: (alter_partition.handle, 2, 3),
    60: (describe_cluster.handle, 0, 2),
}

SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    k: (lo, hi) for k, (_, lo, hi) in HANDLERS.items()
}
