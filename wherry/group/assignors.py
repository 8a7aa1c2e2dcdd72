"""Server-side assignors of KIP-848 consumer groups: `uniform` (the default) and `range`.

An assignor maps each member to the partitions it should own (the group's target assignment)
from the members' subscribed topic ids, their previous target partitions and the partition
counts of the subscribed topics. Both are deterministic (members in member-id order).

* `uniform` follows the goals of Kafka's UniformAssignor: every partition of a subscribed topic
  goes to one member subscribed to it, the partition counts of members differ by at most one
  wherever their subscriptions allow, and a member keeps the partitions it had (sticky): kept
  partitions first, the rest to the least loaded eligible member, then single moves from the
  most to the least loaded member until no move narrows the gap. It is not Kafka's exact
  algorithm, so the same inputs may give another (equally balanced) answer than Kafka's.
* `range` follows Kafka's RangeAssignor: per topic, the subscribed members in member-id order
  get contiguous ranges, the first `partitions % members` one partition more.

Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNOR",
    "MemberSpec",
    "assign",
    "range_assign",
    "uniform_assign",
]

TP = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows of a member."""

    subscribed: frozenset[uuid.UUID]
    previous: Mapping[uuid.UUID, frozenset[int]]


AssignmentMap = dict[str, dict[uuid.UUID, frozenset[int]]]


def _as_map(owned: Mapping[str, set[TP]]) -> AssignmentMap:
    out: AssignmentMap = {}
    for m, tps in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, set()).add(p)
        out[m] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


def uniform_assign(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]
) -> AssignmentMap:
    order = sorted(members)
    owned: dict[str, set[TP]] = {m: set() for m in order}
    owner: dict[TP, str] = {}
    eligible: dict[uuid.UUID, list[str]] = {}
    for m in order:
        for t in members[m].subscribed:
            if t in topics:
                eligible.setdefault(t, []).append(m)
    # 1. Keep what members had, where they are still subscribed and the partition exists.
    for m in order:
        spec = members[m]
        for t, parts in sorted(spec.previous.items()):
            if t not in spec.subscribed or t not in topics:
                continue
            for p in sorted(parts):
                if p < topics[t] and (t, p) not in owner:
                    owner[(t, p)] = m
                    owned[m].add((t, p))
    # 2. Trim members above the balanced quota when everyone is eligible for everything
    # (the common, homogeneous case), so that step 4 has less to move.
    all_tps = [(t, p) for t in sorted(eligible) for p in range(topics[t])]
    if order and all(len(eligible[t]) == len(order) for t in eligible):
        quota, extra = divmod(len(all_tps), len(order))
        for i, m in enumerate(sorted(order, key=lambda x: (-len(owned[x]), x))):
            limit = quota + (1 if i < extra else 0)
            while len(owned[m]) > limit:
                tp = max(owned[m])
                owned[m].discard(tp)
                del owner[tp]
    # 3. Unowned partitions to the least loaded eligible member.
    for tp in all_tps:
        if tp in owner:
            continue
        m = min(eligible[tp[0]], key=lambda x: (len(owned[x]), x))
        owner[tp] = m
        owned[m].add(tp)
    # 4. Move single partitions from loaded members to eligible members with two fewer.
    moved = True
    while moved:
        moved = False
        for src in sorted(order, key=lambda x: (-len(owned[x]), x)):
            best: tuple[int, str, TP] | None = None
            for tp in sorted(owned[src]):
                for dst in eligible[tp[0]]:
                    if len(owned[dst]) + 1 < len(owned[src]):
                        cand = (len(owned[dst]), dst, tp)
                        if best is None or cand < best:
                            best = cand
            if best is not None:
                _, dst, tp = best
                owned[src].discard(tp)
                owned[dst].add(tp)
                owner[tp] = dst
                moved = True
                break
    return _as_map(owned)


def range_assign(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]
) -> AssignmentMap:
    owned: dict[str, set[TP]] = {m: set() for m in sorted(members)}
    for t in sorted(topics):
        subs = sorted(m for m, spec in members.items() if t in spec.subscribed)
        if not subs:
            continue
        quota, extra = divmod(topics[t], len(subs))
        start = 0
        for i, m in enumerate(subs):
            n = quota + (1 if i < extra else 0)
            owned[m].update((t, p) for p in range(start, start + n))
            start += n
    return _as_map(owned)


ASSIGNORS: dict[str, Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int]], AssignmentMap]]
ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}
DEFAULT_ASSIGNOR = "uniform"


def assign(
    name: str, members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]
) -> AssignmentMap:
    """The target assignment by the assignor `name` (a key of `ASSIGNORS`)."""
    return ASSIGNORS[name](members, topics)
