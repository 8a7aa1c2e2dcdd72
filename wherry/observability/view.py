"""The console's picture of the cluster, as this broker's metadata cache holds it (every broker
has one, filled by the controller's UpdateMetadata): brokers, the controller, topics and their
partitions with leader / replicas / ISR, under-replicated and offline partitions, and the
consumer groups this broker coordinates with their lag. Plain JSON-ready data."""

from __future__ import annotations

from typing import Any

from wherry.observability.group_lag import group_lags
from wherry.observability.sources import BrokerSources


class BrokerDirectory:
    """Brokers seen alive at least once (with their last address), so a broker that died
    still appears, marked down, rather than vanishing from the page."""

    def __init__(self) -> None:
        self.known: dict[int, dict[str, Any]] = {}

    def brokers(self, src: BrokerSources, referenced: set[int]) -> list[dict[str, Any]]:
        cache = src.cache
        alive = cache.brokers
        for bid, ep in alive.items():
            self.known[bid] = {"host": ep.host, "port": ep.port, "rack": ep.rack}
        out = []
        for bid in sorted(set(self.known) | set(alive) | referenced):
            info = self.known.get(bid, {"host": None, "port": None, "rack": None})
            out.append(
                {
                    "id": bid,
                    **info,
                    "alive": bid in alive,
                    "controller": bid == cache.controller_id,
                    "self": bid == src.broker_id,
                }
            )
        return out


def cluster_view(src: BrokerSources, directory: BrokerDirectory) -> dict[str, Any]:
    cache = src.cache
    alive = set(cache.brokers)
    topics: list[dict[str, Any]] = []
    referenced: set[int] = set()
    urp = offline = count = 0
    for topic in cache.topics():
        parts = []
        for p, st in sorted(cache.partitions(topic).items()):
            replicas = list(st.replicas)
            referenced.update(replicas)
            is_offline = st.leader < 0 or st.leader not in alive
            is_urp = len(st.isr) < len(replicas)
            urp += is_urp
            offline += is_offline
            count += 1
            parts.append(
                {
                    "partition": p,
                    "leader": st.leader,
                    "leader_epoch": st.leader_epoch,
                    "replicas": replicas,
                    "isr": list(st.isr),
                    "offline_replicas": [r for r in replicas if r not in alive],
                    "under_replicated": is_urp,
                    "offline": is_offline,
                }
            )
        topics.append(
            {"name": topic, "internal": topic.startswith("__"), "partitions": parts}
        )
    groups: dict[str, dict[str, Any]] = {}
    for row in group_lags(src):
        g = groups.setdefault(row.group, {"group": row.group, "state": row.state,
                                          "lag": 0, "offsets": []})
        g["offsets"].append(
            {"topic": row.topic, "partition": row.partition, "committed": row.committed,
             "end": row.end, "lag": row.lag}
        )
        g["lag"] += row.lag or 0
    return {
        "broker": src.broker_id,
        "controller": cache.controller_id if cache.controller_id is not None else -1,
        "controller_epoch": cache.controller_epoch,
        "brokers": directory.brokers(src, referenced),
        "topics": topics,
        "groups": list(groups.values()),
        "summary": {
            "topics": len(topics),
            "partitions": count,
            "under_replicated": urp,
            "offline": offline,
            "live_brokers": len(alive),
        },
    }
