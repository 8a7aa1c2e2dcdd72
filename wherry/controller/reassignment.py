"""Partition reassignment values and rules (KIP-455), pure.

A partition being reassigned has one *full* replica list, AR = the target replicas (RAR) plus
the original ones (OAR) not in the target, kept both in the controller's context and in the
store (`/brokers/topics/<t>` with ``adding_replicas`` / ``removing_replicas``), so a new
controller knows exactly where an interrupted reassignment stood. `Reassignment` is Kafka's
`ReplicaAssignment`: the full list and the replicas being added and removed.

The procedure (Kafka's onPartitionReassignment; `controller/reassign_procedure.py` runs it):

* A. While some target replica is not in the ISR: write AR := OAR + RAR (with adding /
  removing), bump the leader epoch and send LeaderAndIsr to every replica of AR, start the
  replicas of RAR − OAR as new replicas; then wait for the ISR to grow.
* B. Once all of RAR are in the ISR: the new replicas are online; AR := RAR in memory; a
  leader from RAR is elected if the current one is not in RAR (or is not alive), else the
  leader epoch is bumped; OAR − RAR leave the ISR, are stopped and deleted; AR := RAR is
  written to the store last; the reassignment is cleared.

A new reassignment of a partition already being reassigned replaces it: its target replaces
the old one (the original replicas stay the original ones), and replicas that were being added
but are not in the new target are stopped at once. Cancelling is reassigning to the original
replicas.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

ApiResult = tuple[ErrorCode, str | None]
"""An error code and its message (None when there is nothing to say)."""

OK: ApiResult = (ErrorCode.none, None)


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition's full replica list and the replicas being added and removed (both empty
    when no reassignment is going on)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def target(self) -> tuple[int, ...]:
        """RAR: where the partition is going."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """OAR: where the partition was."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def in_progress(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: Sequence[int]) -> Reassignment:
        """The reassignment from this one's original replicas to `target`."""
        original = self.original
        full = tuple(dict.fromkeys([*target, *original]))
        return Reassignment(
            full,
            adding=tuple(r for r in full if r not in original),
            removing=tuple(r for r in full if r not in target),
        )

    def is_complete(self, isr: Collection[int]) -> bool:
        """Step B may run: nothing is being moved, or every target replica is in the ISR."""
        return not self.in_progress or all(r in isr for r in self.target)


def validate_target(
    current: Reassignment, target: Sequence[int], live: Collection[int]
) -> ApiResult:
    """Kafka's checks of a requested replica list (INVALID_REPLICA_ASSIGNMENT): not empty, no
    duplicates, no negative ids, and the replicas it adds on live brokers."""
    if not target:
        return (
            ErrorCode.invalid_replica_assignment,
            "Empty replica list specified in partition reassignment.",
        )
    if len(set(target)) != len(target):
        return (
            ErrorCode.invalid_replica_assignment,
            f"Duplicate replica ids in partition reassignment replica list: {list(target)}",
        )
    if any(r < 0 for r in target):
        return (
            ErrorCode.invalid_replica_assignment,
            f"Invalid broker id in replica list: {list(target)}",
        )
    adding = current.reassign_to(target).adding
    if not set(adding) <= set(live):
        return (
            ErrorCode.invalid_replica_assignment,
            f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
            f"live broker list: {sorted(live)}",
        )
    return OK
