"""What the group coordinator needs from storage: appends to `__consumer_offsets-<p>`.

The broker implements it with the replica manager (acks=-1 appends to the offsets topic's
partitions); tests implement it in memory. `done(error, base_offset)` may be called before
`append` returns (a single broker acknowledges at once) or later, on the same thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

__all__ = ["APPEND_ERRORS", "AppendDone", "OffsetsStorage", "ProducerIdAndEpoch", "Record"]

Record = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone
AppendDone = Callable[[ErrorCode, int], None]  # (error, base offset of the appended batch)

# A failed append as a consumer or share group heartbeat answers it (Kafka's
# GroupCoordinatorService error mapping)
APPEND_ERRORS: Mapping[ErrorCode, ErrorCode] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """The producer a transactional batch belongs to (Kafka's ProducerIdAndEpoch)."""

    producer_id: int
    producer_epoch: int


class OffsetsStorage(Protocol):
    def append(self, partition: int, records: Sequence[Record], done: AppendDone) -> None:
        """Append `records` as one batch to the offsets topic's `partition`."""
        ...

    def append_transactional(
        self, partition: int, txn: ProducerIdAndEpoch, records: Sequence[Record], done: AppendDone
    ) -> None:
        """Append `records` as one transactional batch of the producer `txn` (TxnOffsetCommit:
        the offsets stay pending until the producer's marker)."""
        ...
