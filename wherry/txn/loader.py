"""Rebuild the transactional ids of one `__transaction_state` partition from its log.

The log is read in order; for each transactional id the last value wins and a tombstone
removes it (Kafka's TransactionStateManager.loadTransactionsForTxnTopicPartition). Control and
transactional batches are skipped (nothing writes them here). Records that do not parse are
logged and skipped rather than failing the whole partition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from wherry.protocol.records import RecordError, iter_batches, iter_records
from wherry.txn.records import RecordFormatError, TransactionLogValue, decode_key, decode_value

log = logging.getLogger(__name__)

__all__ = ["read_partition"]


def read_partition(
    batches: Iterable[bytes | bytearray | memoryview],
) -> dict[str, TransactionLogValue]:
    out: dict[str, TransactionLogValue] = {}
    for chunk in batches:
        buf = bytes(chunk)
        for pos, header in iter_batches(buf):
            if header.is_control or header.is_transactional:
                continue
            try:
                records = list(iter_records(buf, pos))
            except RecordError as e:
                log.error("Skipping unreadable batch at offset %d: %s", header.base_offset, e)
                continue
            for rec in records:
                if rec.key is None:
                    continue
                try:
                    tid = decode_key(rec.key)
                    if tid is None:
                        log.warning("Ignoring record with an unknown key version")
                    elif rec.value is None:
                        out.pop(tid, None)
                    else:
                        out[tid] = decode_value(rec.value)
                except RecordFormatError as e:
                    log.error("Skipping unreadable record at offset %d: %s", rec.offset, e)
    return out
