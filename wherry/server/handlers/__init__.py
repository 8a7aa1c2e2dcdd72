"""One module per Kafka API; `HANDLERS` maps API key → (handler, min version, max version).

A handler is `async def handle(broker, request) -> Mapping | None`: it returns the response as
a version-neutral mapping (the codec fits it to the request's version) or None when the
request gets no response (Produce with acks=0). The requests kio lacks (LeaderAndIsr,
StopReplica, UpdateMetadata, ControlledShutdown) return their `interbroker` response dataclasses,
which `codec.encode_response` encodes through `interbroker_codec`. Only what is listed here (with
its versions in `versions.py`) is advertised in ApiVersions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from wherry.server.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_partition,
    alter_partition_reassignments,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    controlled_shutdown,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
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
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    stop_replica,
    sync_group,
    txn_offset_commit,
    update_metadata,
    write_txn_markers,
)
from wherry.server.handlers.versions import SUPPORTED_VERSIONS

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.protocol.interbroker import ControlledShutdownResponse
    from wherry.protocol.interbroker_codec import InterbrokerResponseBody
    from wherry.server.services import BrokerServices

Handler = Callable[
    ["BrokerServices", "Request"],
    Awaitable["Mapping[str, Any] | InterbrokerResponseBody | ControlledShutdownResponse | None"],
]

HANDLERS: dict[int, Handler] = {
    0: produce.handle,
    1: fetch.handle,
    2: list_offsets.handle,
    3: metadata.handle,
    4: leader_and_isr.handle,
    5: stop_replica.handle,
    6: update_metadata.handle,
    7: controlled_shutdown.handle,
    8: offset_commit.handle,
    9: offset_fetch.handle,
    10: find_coordinator.handle,
    11: join_group.handle,
    12: heartbeat.handle,
    13: leave_group.handle,
    14: sync_group.handle,
    15: describe_groups.handle,
    16: list_groups.handle,
    17: sasl_handshake.handle,
    18: api_versions.handle,
    19: create_topics.handle,
    20: delete_topics.handle,
    21: delete_records.handle,
    22: init_producer_id.handle,
    23: offset_for_leader_epoch.handle,
    24: add_partitions_to_txn.handle,
    25: add_offsets_to_txn.handle,
    26: end_txn.handle,
    27: write_txn_markers.handle,
    28: txn_offset_commit.handle,
    29: describe_acls.handle,
    30: create_acls.handle,
    31: delete_acls.handle,
    32: describe_configs.handle,
    33: alter_configs.handle,
    35: describe_log_dirs.handle,
    36: sasl_authenticate.handle,
    37: create_partitions.handle,
    42: delete_groups.handle,
    43: elect_leaders.handle,
    44: incremental_alter_configs.handle,
    45: alter_partition_reassignments.handle,
    46: list_partition_reassignments.handle,
    47: offset_delete.handle,
    50: describe_user_scram_credentials.handle,
    51: alter_user_scram_credentials.handle,
    56: alter_partition.handle,
    60: describe_cluster.handle,
    65: describe_transactions.handle,
    66: list_transactions.handle,
    68: consumer_group_heartbeat.handle,
    69: consumer_group_describe.handle,
}

if HANDLERS.keys() != SUPPORTED_VERSIONS.keys():  # pragma: no cover - a wiring mistake
    raise RuntimeError("every API in SUPPORTED_VERSIONS needs a handler, and only those")
