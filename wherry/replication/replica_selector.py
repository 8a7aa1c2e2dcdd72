"""Fetching from the closest replica (KIP-392): which replica a consumer should read from.

`replica.selector.class` names the rule, as in Kafka: `LeaderSelector` (Kafka's default
behaviour: always the leader) or `RackAwareReplicaSelector` (a replica in the client's rack,
`client.rack`, when the leader is not there: the most caught-up one). The leader asks the rule
on every consumer fetch of Fetch v11+ (`ClientMetadata`); when it names another replica the
partition is answered with no records and that replica as `preferred_read_replica`, and the
client fetches from it from then on (a follower serves consumers up to its high watermark).

Only replicas that can serve the fetch are offered to the rule, as Kafka offers them: in the
ISR, alive on the client's listener, with the fetch offset inside their log (log start offset
<= fetch offset <= log end offset). A follower that falls out of the ISR or stops is therefore
never named again, and the client, sent back to the leader by an error or by losing the
connection, stays there. Pure: no I/O, time passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from wherry.replication.partition import Partition

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A replica the rule may pick (Kafka's ReplicaView): its broker and rack, how far its log
    reaches and how long ago it was last caught up with the leader."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


class ReplicaSelector(Protocol):
    def select(
        self, client_rack: str, replicas: Sequence[ReplicaView], leader: ReplicaView
    ) -> ReplicaView | None: ...


class LeaderSelector:
    """Always the leader: no consumer is sent elsewhere."""

    def select(
        self, client_rack: str, replicas: Sequence[ReplicaView], leader: ReplicaView
    ) -> ReplicaView | None:
        return leader


class RackAwareReplicaSelector:
    """The leader when the client names no rack, when no replica is in its rack, or when the
    leader is in it; else, of the replicas in its rack, the one whose log reaches furthest,
    the most recently caught up first on a tie."""

    def select(
        self, client_rack: str, replicas: Sequence[ReplicaView], leader: ReplicaView
    ) -> ReplicaView | None:
        if not client_rack:
            return leader
        same_rack = [r for r in replicas if r.rack == client_rack]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_caught_up_ms))


_SELECTORS: dict[str, ReplicaSelector] = {
    RACK_AWARE_SELECTOR: RackAwareReplicaSelector(),
    LEADER_SELECTOR: LeaderSelector(),
}


def replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """The rule `replica.selector.class` names (None: no rule, every consumer reads the
    leader); a name not known raises ValueError."""
    if class_name is None or not class_name.strip():
        return None
    sel = _SELECTORS.get(class_name.strip())
    if sel is None:
        raise ValueError(
            f"Class {class_name.strip()} cannot be found (supported: "
            f"{RACK_AWARE_SELECTOR}, {LEADER_SELECTOR})"
        )
    return sel


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """What a consumer's Fetch v11+ says of its client (Kafka's ClientMetadata), with the
    broker's rule and its view of the replicas' brokers on the client's listener:
    `node_rack(b)` is (alive with an endpoint there, rack)."""

    rack_id: str
    selector: ReplicaSelector | None
    node_rack: Callable[[int], tuple[bool, str | None]]


def preferred_read_replica(
    part: Partition, client: ClientMetadata, fetch_offset: int, now_ms: int
) -> int | None:
    """The replica the leader of `part` sends the client to, None for itself (Kafka's
    findPreferredReadReplica). Asked on every fetch, so a replica that left the ISR or
    stopped is never named again."""
    selector = client.selector
    if selector is None or not part.is_leader:
        return None
    isr = part.state.isr
    views: list[ReplicaView] = []
    for bid, st in part.remote_replicas.items():
        if bid in isr and st.log_start_offset <= fetch_offset <= st.log_end_offset:
            alive, rack = client.node_rack(bid)
            if alive:
                views.append(
                    ReplicaView(bid, rack, st.log_end_offset, now_ms - st.last_caught_up_time_ms)
                )
    _, rack = client.node_rack(part.local_broker_id)
    leader = ReplicaView(part.local_broker_id, rack, part.log.log_end_offset, 0)
    chosen = selector.select(client.rack_id, [*views, leader], leader)
    if chosen is None or chosen == leader or chosen not in views:
        return None
    return chosen.broker_id
