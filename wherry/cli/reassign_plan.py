"""Planning of `wherry reassign generate` (pure: no cluster, no terminal).

Kafka's tool places every topic afresh from a random start broker, which moves almost every
replica. This planner instead keeps as many replicas where they are as balance allows:

* per topic, the replicas each broker of the list holds differ by at most 1, and so do the
  preferred leaders (first replicas); over the whole plan, replicas per broker differ by at
  most 1 too (a topic's one extra replica goes to the brokers with the fewest so far), and so do
  leaders wherever the chosen replica sets allow it;
* given those counts, the number of replicas that move (land on a broker that did not hold them)
  is minimal; then, given the replica sets, so is the number of partitions whose preferred
  leader changes (replica sets and leaders are chosen one after the other, not jointly).

With the brokers' racks (rack-aware, as Kafka's tool is unless told otherwise), a partition's
replicas also spread over the racks first of all, as Kafka's rack-aware placement spreads them:
each rack holds floor or ceil of (replication factor / racks) of them, before any balance.

Both choices are min-cost flows (partitions → brokers → sink, the balance bounds as capacities
whose lower part is rewarded and whose overflow is penalised), solved by successive shortest
paths. Replicas are planned per topic, so those graphs stay small; 1,000 partitions of RF 3 onto
12 brokers take about 4 s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from wherry.cli.common import CommandError

TP = tuple[str, int]
Assignment = dict[TP, list[int]]

_BIG = 10**9     # must-have capacity (the lower balance bound): taken before anything else
_TIER = 10**6    # which brokers get the one extra: outweighs any number of moves in a topic
_RACK = 10**13   # a partition's replicas spread over the racks: outweighs every balance bound


class PlanError(CommandError):
    """The assignment cannot be planned (e.g. a replication factor above the broker count)."""


# --------------------------------------------------------------------------------------------
# Min-cost flow (successive shortest paths, Bellman-Ford with a queue: costs may be negative)


class _Flow:
    def __init__(self, nodes: int) -> None:
        self.head: list[list[int]] = [[] for _ in range(nodes)]
        self.to: list[int] = []
        self.cap: list[int] = []
        self.cost: list[int] = []

    def edge(self, u: int, v: int, cap: int, cost: int) -> int:
        """Add u→v; returns the edge's index (its flow is `cap` of the reverse edge, index+1)."""
        for a, b, c, w in ((u, v, cap, cost), (v, u, 0, -cost)):
            self.head[a].append(len(self.to))
            self.to.append(b)
            self.cap.append(c)
            self.cost.append(w)
        return len(self.to) - 2

    def flow_on(self, e: int) -> int:
        return self.cap[e + 1]

    def run(self, s: int, t: int, want: int) -> int:
        """Send up to `want` units from s to t at least cost; returns the units sent."""
        sent = 0
        n = len(self.head)
        while sent < want:
            dist = [None] * n  # type: list[int | None]
            prev = [-1] * n
            dist[s] = 0
            queue = deque([s])
            queued = [False] * n
            queued[s] = True
            while queue:
                u = queue.popleft()
                queued[u] = False
                du = dist[u]
                assert du is not None
                for e in self.head[u]:
                    if self.cap[e] <= 0:
                        continue
                    v = self.to[e]
                    nd = du + self.cost[e]
                    dv = dist[v]
                    if dv is None or nd < dv:
                        dist[v] = nd
                        prev[v] = e
                        if not queued[v]:
                            queued[v] = True
                            queue.append(v)
            if dist[t] is None:
                break
            push = want - sent
            v = t
            while v != s:
                e = prev[v]
                push = min(push, self.cap[e])
                v = self.to[e ^ 1]
            v = t
            while v != s:
                e = prev[v]
                self.cap[e] -= push
                self.cap[e ^ 1] += push
                v = self.to[e ^ 1]
            sent += push
        return sent


# --------------------------------------------------------------------------------------------
# Balanced choice: which partitions go to which brokers


def _extras(count: int, brokers: Sequence[int], so_far: Mapping[int, tuple[int]],
            here: Mapping[int, int]) -> set[int]:
    """The `count` brokers that get one more than the others: fewest so far (across topics),
    then most already held in this topic, then lowest id."""
    ranked = sorted(brokers, key=lambda b: (so_far.get(b, (0,)), -here.get(b, 0), b))
    return set(ranked[:count])


def _balanced_choice(
    demands: Sequence[int],
    candidates: Sequence[Sequence[int]],
    keep: Sequence[Mapping[int, int]],
    brokers: Sequence[int],
    so_far: Mapping[int, tuple[int]],
    racks: Mapping[int, str] | None = None,
) -> list[set[int]]:
    """For each item i, `demands[i]` distinct brokers out of `candidates[i]`, every broker
    chosen floor or ceil of (total / len(brokers)) times (the extras going to `_extras`), with
    as many of `keep[i]` (broker → cost of keeping it, at most 0) kept as that allows, and the
    cheapest of them where there is a choice. With `racks` (broker → rack), before all that,
    each item's brokers spread over the racks (floor or ceil of demand / racks in each). Falls
    back to the least unbalanced choice where the candidates make the bounds impossible."""
    total = sum(demands)
    base, extra = divmod(total, len(brokers))
    here: dict[int, int] = {}
    for k in keep:
        for b in k:
            here[b] = here.get(b, 0) + 1
    new_cost = 1 + sum(-min(k.values(), default=0) * len(k) for k in keep)
    lucky = _extras(extra, brokers, so_far, here)
    n_items = len(demands)
    source, sink = n_items + len(brokers), n_items + len(brokers) + 1
    node = {b: n_items + j for j, b in enumerate(brokers)}
    g = _Flow(n_items + len(brokers) + 2)
    chosen_edges: list[list[tuple[int, int]]] = []
    for i, (demand, cands) in enumerate(zip(demands, candidates, strict=True)):
        g.edge(source, i, demand, 0)
        via = _rack_nodes(g, i, demand, cands, racks) if racks else dict.fromkeys(cands, i)
        chosen_edges.append([(b, g.edge(via[b], node[b], 1, keep[i].get(b, new_cost)))
                             for b in cands])
    for b in brokers:
        if base:
            g.edge(node[b], sink, base, -_BIG)
        if extra:
            g.edge(node[b], sink, 1, 0 if b in lucky else _TIER)
        g.edge(node[b], sink, total, _BIG)  # overflow: only where the bounds cannot hold
    if g.run(source, sink, total) != total:
        raise PlanError("Cannot place the replicas on the given brokers")
    return [{b for b, e in edges if g.flow_on(e)} for edges in chosen_edges]


def _rack_nodes(g: _Flow, item: int, demand: int, cands: Sequence[int],
                racks: Mapping[int, str]) -> dict[int, int]:
    """A node per rack of the item's candidates, between the item and the rack's brokers:
    floor(demand / racks) units through it rewarded, up to ceil free, beyond that penalised.
    Returns broker → the node its edge leaves from."""
    names = sorted({racks[b] for b in cands})
    base, extra = divmod(demand, len(names))
    via: dict[int, int] = {}
    for name in names:
        rack_node = len(g.head)
        g.head.append([])
        if base:
            g.edge(item, rack_node, base, -_RACK)
        if extra:
            g.edge(item, rack_node, 1, 0)
        g.edge(item, rack_node, demand, _RACK)
        via.update((b, rack_node) for b in cands if racks[b] == name)
    return via


# --------------------------------------------------------------------------------------------
# The planner


@dataclass(frozen=True, slots=True)
class PlanStats:
    moved_replicas: int
    """Replicas placed on a broker that did not hold them."""
    leader_changes: int
    """Partitions whose preferred leader (first replica) changes."""


def plan_reassignment(current: Mapping[TP, Sequence[int]], brokers: Sequence[int],
                      racks: Mapping[int, str] | None = None) -> Assignment:
    """A new assignment of every partition of `current` onto `brokers`, each partition keeping
    its replication factor (see the module doc for the rules); rack-aware with `racks` (every
    broker's rack). An empty broker list, duplicate brokers or a replication factor above the
    broker count raise PlanError."""
    if not brokers:
        raise PlanError("The broker list is empty")
    dups = sorted({b for b in brokers if list(brokers).count(b) > 1})
    if dups:
        raise PlanError(f"Broker list contains duplicate entries: {','.join(map(str, dups))}")
    for tp, replicas in sorted(current.items()):
        if len(replicas) > len(brokers):
            raise PlanError(
                f"Replication factor: {len(replicas)} larger than available brokers: "
                f"{len(brokers)} (partition {tp[0]}-{tp[1]}).")
        if not replicas:
            raise PlanError(f"Partition {tp[0]}-{tp[1]} has no replicas")
    allowed = set(brokers)
    replicas_so_far: dict[int, tuple[int]] = {}
    sets: dict[TP, set[int]] = {}
    for topic in sorted({t for t, _ in current}):
        tps = sorted(tp for tp in current if tp[0] == topic)
        olds = [list(current[tp]) for tp in tps]
        chosen = _balanced_choice(
            [len(o) for o in olds], [list(brokers)] * len(tps),
            # keeping a replica is free, keeping the preferred leader's a little better
            [{b: -1 if j == 0 else 0 for j, b in enumerate(o) if b in allowed} for o in olds],
            brokers, replicas_so_far, racks)
        for tp, replica_set in zip(tps, chosen, strict=True):
            sets[tp] = replica_set
            for b in replica_set:
                replicas_so_far[b] = (replicas_so_far.get(b, (0,))[0] + 1,)
    leaders = _choose_leaders(current, sets, brokers)
    out: Assignment = {}
    for tp in sorted(current):
        leader = leaders[tp]
        rest = [b for b in current[tp] if b in sets[tp] and b != leader]
        out[tp] = [leader, *rest, *sorted(sets[tp] - set(rest) - {leader})]
    return out


def _choose_leaders(current: Mapping[TP, Sequence[int]], sets: Mapping[TP, set[int]],
                    brokers: Sequence[int]) -> dict[TP, int]:
    """A leader per partition out of its replica set: per topic within 1 per broker (first),
    over all topics within 1 per broker (next, where the replica sets allow), fewest changes
    of preferred leader (last)."""
    tps = sorted(sets)
    topics = sorted({t for t, _ in tps})
    n_tp, n_b = len(tps), len(brokers)
    topic_node = {(t, b): n_tp + i * n_b + j
                  for i, t in enumerate(topics) for j, b in enumerate(brokers)}
    broker_node = {b: n_tp + len(topics) * n_b + j for j, b in enumerate(brokers)}
    source, sink = n_tp + len(topics) * n_b + n_b, n_tp + len(topics) * n_b + n_b + 1
    g = _Flow(sink + 1)
    edges: dict[TP, list[tuple[int, int]]] = {}
    for i, tp in enumerate(tps):
        g.edge(source, i, 1, 0)
        edges[tp] = [(b, g.edge(i, topic_node[(tp[0], b)], 1, 0 if b == current[tp][0] else 1))
                     for b in sorted(sets[tp])]

    def bounded(u: int, v: int, total: int, weight: int) -> None:
        base, extra = divmod(total, n_b)
        if base:
            g.edge(u, v, base, -weight)
        if extra:
            g.edge(u, v, 1, 0)
        g.edge(u, v, total, weight)  # beyond the bound: only where the replica sets force it

    for t in topics:
        size = sum(1 for tp in tps if tp[0] == t)
        for b in brokers:
            bounded(topic_node[(t, b)], broker_node[b], size, _BIG)
    for b in brokers:
        bounded(broker_node[b], sink, n_tp, _TIER)
    if g.run(source, sink, n_tp) != n_tp:
        raise PlanError("Cannot choose the partition leaders")
    return {tp: next(b for b, e in es if g.flow_on(e)) for tp, es in edges.items()}


def plan_stats(current: Mapping[TP, Sequence[int]], proposed: Mapping[TP, Sequence[int]]
               ) -> PlanStats:
    moved = sum(len(set(proposed[tp]) - set(current.get(tp, ()))) for tp in proposed)
    changes = sum(1 for tp in proposed
                  if not current.get(tp) or current[tp][0] != proposed[tp][0])
    return PlanStats(moved, changes)


def counts(assignment: Mapping[TP, Sequence[int]], brokers: Iterable[int],
           leaders_only: bool = False) -> dict[int, int]:
    """Replicas (or preferred leaders) per broker, every broker of `brokers` included."""
    out = dict.fromkeys(brokers, 0)
    for replicas in assignment.values():
        for b in replicas[:1] if leaders_only else replicas:
            out[b] = out.get(b, 0) + 1
    return out


# --------------------------------------------------------------------------------------------
# Throttles (Kafka's calculateProposedMoveMap / calculateLeaderThrottles / ...FollowerThrottles)


@dataclass(frozen=True, slots=True)
class Move:
    sources: frozenset[int]
    """The replicas the partition has now (without those being added): they send data."""
    destinations: frozenset[int]
    """The replicas being added: they fetch the data."""


def move_map(ongoing: Mapping[TP, tuple[Sequence[int], Sequence[int]]],
             proposed: Mapping[TP, Sequence[int]],
             current: Mapping[TP, Sequence[int]]) -> dict[TP, Move]:
    """Every partition that moves: the ongoing reassignments (partition → (all replicas,
    adding replicas)) and the proposed ones, whose sources are the ongoing move's if there is
    one, else the current replicas."""
    moves = {tp: Move(frozenset(replicas) - frozenset(adding), frozenset(adding))
             for tp, (replicas, adding) in ongoing.items()}
    for tp, target in proposed.items():
        if tp in moves:
            sources = moves[tp].sources
        elif current.get(tp):
            sources = frozenset(current[tp])
        else:
            raise PlanError(f"Trying to reassign a topic partition {tp[0]}-{tp[1]} "
                            "with 0 replicas")
        moves[tp] = Move(sources, frozenset(target) - sources)
    return moves


def _throttle_value(pairs: Iterable[tuple[int, int]]) -> str:
    return ",".join(f"{p}:{b}" for p, b in sorted(set(pairs)))


def leader_throttles(moves: Mapping[TP, Move]) -> dict[str, str]:
    """Topic → `leader.replication.throttled.replicas`: `partition:broker` of every source."""
    return {topic: _throttle_value((p, b) for (t, p), m in moves.items() if t == topic
                                   for b in m.sources)
            for topic in sorted({t for t, _ in moves})}


def follower_throttles(moves: Mapping[TP, Move]) -> dict[str, str]:
    """Topic → `follower.replication.throttled.replicas`: `partition:broker` of every
    destination (a broker that does not hold the partition yet)."""
    return {topic: _throttle_value((p, b) for (t, p), m in moves.items() if t == topic
                                   for b in m.destinations - m.sources)
            for topic in sorted({t for t, _ in moves})}


def reassigning_brokers(moves: Mapping[TP, Move]) -> list[int]:
    return sorted({b for m in moves.values() for b in m.sources | m.destinations})
