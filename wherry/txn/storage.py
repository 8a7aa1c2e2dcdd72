"""What the transaction coordinator needs from the broker: appends to
`__transaction_state-<p>` and a way to send transaction markers.

`coordinator/partition_log.py` (acks=-1 appends through the replica manager) and
`coordinator/txn_markers.py` (WriteTxnMarkers to partition leaders) implement them for the
broker and the simulation; tests implement them in memory. `done(error,
base_offset)` may be called before `append` returns or later, on the same thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition

__all__ = ["AppendDone", "MarkerChannel", "PendingMarkers", "Record", "TxnStorage"]

Record = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone
AppendDone = Callable[[ErrorCode, int], None]


class TxnStorage(Protocol):
    def append(self, partition: int, records: Sequence[Record], done: AppendDone) -> None:
        """Append `records` as one batch to `__transaction_state-<partition>`, acks=all."""
        ...


@dataclass(frozen=True, slots=True)
class PendingMarkers:
    """Markers to write for one transaction (Kafka's TxnMarkerEntry with its completion)."""

    transactional_id: str
    txn_partition: int  # of __transaction_state
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


class MarkerChannel(Protocol):
    def add_markers(self, pending: PendingMarkers) -> None:
        """Write the markers to every partition's leader, retried until each is written (or
        its partition is gone), then call the coordinator's `markers_written`."""
        ...

    def remove_partition(self, txn_partition: int) -> None:
        """Stop sending the markers of transactions of an unloaded `__transaction_state`
        partition (their new coordinator sends them)."""
        ...
