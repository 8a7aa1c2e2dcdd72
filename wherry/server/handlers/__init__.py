"""One module per Kafka API; `HANDLERS` maps API key → the name of its module here.

A handler is `async def handle(broker, request) -> Mapping | None`: it returns the response as
a version-neutral mapping (the codec fits it to the request's version) or None when the
request gets no response (Produce with acks=0). The requests kio lacks (LeaderAndIsr,
StopReplica, UpdateMetadata, ControlledShutdown) return their `interbroker` response dataclasses,
which `codec.encode_response` encodes through `interbroker_codec`. Only what is listed here (with
its versions in `versions.py`) is advertised in ApiVersions.

A handler module is imported when its API is first called (`handler_for`), so a broker start
imports none of them: ApiVersions answers from `versions.py` alone. One line per API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

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

HANDLERS: dict[int, str] = {
    0: "produce",
    1: "fetch",
    2: "list_offsets",
    3: "metadata",
    4: "leader_and_isr",
    5: "stop_replica",
    6: "update_metadata",
    7: "controlled_shutdown",
    8: "offset_commit",
    9: "offset_fetch",
    10: "find_coordinator",
    11: "join_group",
    12: "heartbeat",
    13: "leave_group",
    14: "sync_group",
    15: "describe_groups",
    16: "list_groups",
    17: "sasl_handshake",
    18: "api_versions",
    19: "create_topics",
    20: "delete_topics",
    21: "delete_records",
    22: "init_producer_id",
    23: "offset_for_leader_epoch",
    24: "add_partitions_to_txn",
    25: "add_offsets_to_txn",
    26: "end_txn",
    27: "write_txn_markers",
    28: "txn_offset_commit",
    29: "describe_acls",
    30: "create_acls",
    31: "delete_acls",
    32: "describe_configs",
    33: "alter_configs",
    34: "alter_replica_log_dirs",
    35: "describe_log_dirs",
    36: "sasl_authenticate",
    37: "create_partitions",
    42: "delete_groups",
    43: "elect_leaders",
    44: "incremental_alter_configs",
    45: "alter_partition_reassignments",
    46: "list_partition_reassignments",
    47: "offset_delete",
    48: "describe_client_quotas",
    49: "alter_client_quotas",
    50: "describe_user_scram_credentials",
    51: "alter_user_scram_credentials",
    56: "alter_partition",
    60: "describe_cluster",
    61: "describe_producers",
    65: "describe_transactions",
    66: "list_transactions",
    68: "consumer_group_heartbeat",
    69: "consumer_group_describe",
    74: "list_config_resources",
    75: "describe_topic_partitions",
    76: "share_group_heartbeat",
    77: "share_group_describe",
    78: "share_fetch",
    79: "share_acknowledge",
    83: "initialize_share_group_state",
    84: "read_share_group_state",
    85: "write_share_group_state",
    86: "delete_share_group_state",
    87: "read_share_group_state_summary",
    90: "describe_share_group_offsets",
    91: "alter_share_group_offsets",
    92: "delete_share_group_offsets",
}

if HANDLERS.keys() != SUPPORTED_VERSIONS.keys():  # pragma: no cover - a wiring mistake
    raise RuntimeError("every API in SUPPORTED_VERSIONS needs a handler, and only those")

# API key → its module's `handle`, filled on first use (tests may put their own in).
LOADED: dict[int, Handler] = {}


def handler_for(api_key: int) -> Handler:
    """The handler of an API key in `HANDLERS` (KeyError otherwise), its module imported on
    the first call."""
    handler = LOADED.get(api_key)
    if handler is None:
        module = import_module(f"{__name__}.{HANDLERS[api_key]}")
        handler = LOADED[api_key] = module.handle
    return handler
