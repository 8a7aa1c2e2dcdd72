"""The partition leader's transaction checks before a transactional append (KIP-890), for
Produce and TxnOffsetCommit: transactions v2 clients (Produce v12+, TxnOffsetCommit v5+) have
their partitions added to the transaction by the leader; older clients' first batch of a
transaction on a partition is verified to belong to it when
`transaction.partition.verification.enable` is true (`coordinator/txn_verification.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.records import RecordError, parse_header

if TYPE_CHECKING:
    from wherry.server.services import BrokerServices

__all__ = [
    "FIRST_V2_PRODUCE_VERSION",
    "FIRST_V2_TXN_OFFSET_COMMIT_VERSION",
    "check_partitions",
    "transactional_producers",
]

FIRST_V2_PRODUCE_VERSION = 12
FIRST_V2_TXN_OFFSET_COMMIT_VERSION = 5


def transactional_producers(
    entries: Mapping[TopicPartition, bytes | memoryview | None],
    sequences: dict[TopicPartition, int] | None = None,
) -> dict[tuple[int, int], list[TopicPartition]]:
    """(producer id, epoch) -> the partitions whose records open with a transactional batch
    of that producer (unreadable records are left to validation); each such partition's
    first sequence goes into `sequences` when given."""
    out: dict[tuple[int, int], list[TopicPartition]] = {}
    for tp, records in entries.items():
        if not records:
            continue
        try:
            header = parse_header(records)
        except RecordError:
            continue
        if header.is_transactional:
            out.setdefault((header.producer_id, header.producer_epoch), []).append(tp)
            if sequences is not None:
                sequences[tp] = header.base_sequence
    return out


async def check_partitions(
    broker: BrokerServices,
    transactional_id: str,
    producers: Mapping[tuple[int, int], list[TopicPartition]],
    *,
    add: bool,
    abortable_known: bool,
    sequences: Mapping[TopicPartition, int] | None = None,
) -> dict[TopicPartition, ErrorCode]:
    """The partitions that may not be appended to, with the error from the coordinator's
    answer (or INVALID_TXN_STATE when a marker was written there meanwhile). `add`: a
    transactions v2 request (add the partitions); else a verification, skipped unless
    `transaction.partition.verification.enable`. `sequences`: the batches' first sequences
    (Produce), kept by each log while its partition is asked about."""
    if not add and not broker.config.transaction_partition_verification_enable:
        return {}
    return await broker.transactions.verifier.check_append(
        broker.node, transactional_id, producers, add=add, abortable_known=abortable_known,
        sequences=sequences,
    )
