"""Per-API request counts and total-time histograms (Kafka's RequestMetrics: RequestsPerSec and
TotalTimeMs per `request`), kept as plain numbers: `observe` is O(1) (a dict lookup and a
bisect over a dozen bucket bounds) and the collector turns them into metric families when
scraped. Fetches are split as Kafka splits them: `FetchConsumer` and `FetchFollower`."""

from __future__ import annotations

import bisect
from dataclasses import field

from wherry.common.record import record

# Kafka's ApiKeys names (the `request` label of kafka.network:type=RequestMetrics).
API_NAMES: dict[int, str] = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 4: "LeaderAndIsr",
    5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
    13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
    17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
    21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers",
    28: "TxnOffsetCommit", 29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls",
    32: "DescribeConfigs", 33: "AlterConfigs", 34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions",
    38: "CreateDelegationToken", 39: "RenewDelegationToken", 40: "ExpireDelegationToken",
    41: "DescribeDelegationToken", 42: "DeleteGroups", 43: "ElectLeaders",
    44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments", 47: "OffsetDelete", 48: "DescribeClientQuotas",
    49: "AlterClientQuotas", 50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials", 56: "AlterPartition", 57: "UpdateFeatures",
    60: "DescribeCluster", 61: "DescribeProducers", 65: "DescribeTransactions",
    66: "ListTransactions", 67: "AllocateProducerIds", 68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe", 74: "ListConfigResources", 75: "DescribeTopicPartitions",
    76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe", 78: "ShareFetch",
    79: "ShareAcknowledge", 83: "InitializeShareGroupState", 84: "ReadShareGroupState",
    85: "WriteShareGroupState", 86: "DeleteShareGroupState",
    87: "ReadShareGroupStateSummary", 90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets",
}
FETCH_KEY = 1

# Upper bounds of the total-time buckets, in milliseconds (+Inf is implied).
BUCKETS_MS: tuple[float, ...] = (
    0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)


def request_name(api_key: int, *, follower: bool = False) -> str:
    if api_key == FETCH_KEY:
        return "FetchFollower" if follower else "FetchConsumer"
    return API_NAMES.get(api_key, f"ApiKey{api_key}")


@record(slots=True)
class RequestTimes:
    """One histogram of request times (ms): count, sum and `BUCKETS_MS` buckets."""

    count: int = 0
    sum_ms: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_MS) + 1))

    def observe(self, ms: float) -> None:
        self.count += 1
        self.sum_ms += ms
        self.buckets[bisect.bisect_left(BUCKETS_MS, ms)] += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, `+Inf` last, as a histogram exposes them."""
        out: list[tuple[str, int]] = []
        acc = 0
        for bound, n in zip((*BUCKETS_MS, float("inf")), self.buckets, strict=True):
            acc += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), acc))
        return out


class RequestStats:
    def __init__(self) -> None:
        self.by_request: dict[str, RequestTimes] = {}

    def observe(self, name: str, ms: float) -> None:
        times = self.by_request.get(name)
        if times is None:
            times = self.by_request[name] = RequestTimes()
        times.observe(ms)
