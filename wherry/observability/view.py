"""The console's picture of the cluster, as this broker's metadata cache holds it (every broker
has one, filled by the controller's UpdateMetadata): brokers, the controller, topics and their
partitions with leader / replicas / ISR, under-replicated and offline partitions, the bytes of
each topic on this broker, the consumer groups (those this broker coordinates and, asked
over the wire, the other brokers', `remote_groups.py`) with their coordinator, members and
lag, and this broker's settings and log dirs (`broker_detail.py`). Plain JSON-ready data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wherry.common.topic_partition import TopicPartition
from wherry.observability.broker_detail import broker_detail
from wherry.observability.group_lag import group_entry, lags_of
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


def cluster_view(
    src: BrokerSources,
    directory: BrokerDirectory,
    remote_groups: list[dict[str, Any]] | None = None,
    far_ends: Mapping[TopicPartition, int] | None = None,
) -> dict[str, Any]:
    cache = src.cache
    alive = set(cache.brokers)
    lm = src.log_manager()
    local: dict[str, list[int]] = {}  # topic -> [bytes, replicas here]
    for plog in lm.all_logs() if lm is not None else []:
        use = local.setdefault(plog.topic_partition.topic, [0, 0])
        use[0] += plog.size_in_bytes
        use[1] += 1
    topics: list[dict[str, Any]] = []
    referenced: set[int] = set()
    urp = offline = count = 0
    for topic in cache.topics():
        parts: list[dict[str, Any]] = []
        for p, st in sorted(cache.partitions(topic).items()):
            replicas = list(st.replicas)
            referenced.update(replicas)
            is_offline = st.leader < 0 or st.leader not in alive
            is_urp = len(st.isr) < len(replicas)
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
        t_urp = sum(p["under_replicated"] for p in parts)
        t_offline = sum(p["offline"] for p in parts)
        urp += t_urp
        offline += t_offline
        count += len(parts)
        size_here, replicas_here = local.get(topic, [0, 0])
        topics.append(
            {
                "name": topic,
                "internal": topic.startswith("__"),
                "replication_factor": max((len(p["replicas"]) for p in parts), default=0),
                "under_replicated": t_urp,
                "offline": t_offline,
                "bytes_here": size_here,
                "replicas_here": replicas_here,
                "partitions": parts,
            }
        )
    return {
        "broker": src.broker_id,
        "controller": cache.controller_id if cache.controller_id is not None else -1,
        "controller_epoch": cache.controller_epoch,
        "brokers": directory.brokers(src, referenced),
        "topics": topics,
        "groups": groups_view(src, remote_groups or [], far_ends or {}),
        "self": broker_detail(src),
        "summary": {
            "topics": sum(not t["internal"] for t in topics),
            "internal_topics": sum(t["internal"] for t in topics),
            "partitions": count,
            "under_replicated": urp,
            "offline": offline,
            "live_brokers": len(alive),
        },
    }


def groups_view(
    src: BrokerSources,
    remote: list[dict[str, Any]],
    far_ends: Mapping[TopicPartition, int],
) -> list[dict[str, Any]]:
    """The groups this broker coordinates (groups without a commit yet too), then those of
    the other brokers (`remote_groups.py`), each once, by name."""
    coordinator = src.groups()
    lm = src.log_manager()
    out = []
    for group in sorted(coordinator.local_groups() if coordinator is not None else [],
                        key=lambda g: g.group_id):
        offsets: list[dict[str, Any]] = []
        for r in lags_of(group, lm):
            end = r.end if r.end is not None else far_ends.get(TopicPartition(r.topic, r.partition))
            offsets.append({"topic": r.topic, "partition": r.partition, "committed": r.committed,
                            "end": end, "lag": None if end is None else max(0, end - r.committed)})
        members = [
            {"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host}
            for m in sorted(group.all_member_metadata(), key=lambda m: m.member_id)
        ]
        out.append(group_entry(group.group_id, src.broker_id, str(group.state),
                               group.protocol_type or "", members, offsets))
    local = {g["group"] for g in out}
    out += [g for g in remote if g["group"] not in local]
    return sorted(out, key=lambda g: str(g["group"]))
