"""Leader election rules (SPEC H3, H10), pure functions of the partition's state."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Election:
    leader: int | None  # None: no eligible replica, the partition goes offline
    isr: tuple[int, ...]
    unclean: bool = False


def offline_partition_election(
    assigned: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    *,
    unclean_allowed: bool,
) -> Election:
    """First live ISR member in assignment order; else, if allowed, any live replica."""
    live_isr = [r for r in assigned if r in isr and r in live]
    if live_isr:
        return Election(live_isr[0], tuple(r for r in isr if r in live))
    if unclean_allowed:
        live_assigned = [r for r in assigned if r in live]
        if live_assigned:
            return Election(live_assigned[0], (live_assigned[0],), unclean=True)
    return Election(None, tuple(isr))


def preferred_replica_election(
    assigned: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> Election:
    """The preferred (first assigned) replica, only if it is alive and in the ISR."""
    if assigned and assigned[0] in live and assigned[0] in isr:
        return Election(assigned[0], tuple(isr))
    return Election(None, tuple(isr))
