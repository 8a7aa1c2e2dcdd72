"""What a share-partition leader read from its log, as `FetchedBatch`es: each batch's
offsets, and whether its records may be delivered at all (not a control batch; at
read_committed, not a batch of a transaction that was aborted, which the aborted-transaction
list of the read tells, as a read_committed consumer works it out). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from wherry.protocol.records import RecordError, iter_batches
from wherry.share.partition import FetchedBatch

__all__ = ["fetched_batches"]


def fetched_batches(
    data: bytes | memoryview, aborted: Sequence[tuple[int, int]] | None = None
) -> list[FetchedBatch]:
    """`aborted`: (producer id, first offset) of the aborted transactions overlapping the
    read (None at read_uncommitted)."""
    pending = sorted(aborted or (), key=lambda a: a[1])
    i = 0
    aborting: set[int] = set()
    out: list[FetchedBatch] = []
    try:
        for _, h in iter_batches(data):
            while i < len(pending) and pending[i][1] <= h.last_offset:
                aborting.add(pending[i][0])
                i += 1
            skip = h.is_control
            if h.is_control:
                # An ABORT or COMMIT marker ends its producer's transaction.
                aborting.discard(h.producer_id)
            elif h.is_transactional and h.producer_id in aborting:
                skip = True
            out.append(FetchedBatch(h.base_offset, h.last_offset, skip))
    except RecordError:
        pass  # an unreadable tail: what came before stands
    return out
