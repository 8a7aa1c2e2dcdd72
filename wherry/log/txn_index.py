"""The aborted-transaction index of one segment (Kafka 3.9's TransactionIndex).

`<base_offset:020d>.txnindex` lists the transactions aborted by a marker in the segment, in
marker order, as fixed 34-byte entries (Kafka's format, big-endian):

    version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64 |
    lastStableOffset int64

`lastOffset` is the offset of the ABORT marker, `lastStableOffset` the partition's LSO once the
transaction completed. The file is created on the first entry; entries are written to the page
cache at once (`append`), fsynced with the segment (`flush`). A read_committed fetch asks the
segments from the one it reads on for the aborted transactions overlapping its range
(`collect`); the walk stops at the first entry whose lastStableOffset reaches the upper bound.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from wherry.log.errors import CorruptIndexError

__all__ = [
    "TXN_INDEX_ENTRY_SIZE",
    "TXN_INDEX_SUFFIX",
    "AbortedTxn",
    "TransactionIndex",
    "TxnIndexSearchResult",
]

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
TXN_INDEX_ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One entry: an aborted transaction of `producer_id` spanning first..last offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    aborted: list[AbortedTxn]
    is_complete: bool


def _decode(data: bytes, name: str) -> list[AbortedTxn]:
    if len(data) % TXN_INDEX_ENTRY_SIZE:
        raise CorruptIndexError(
            f"transaction index {name} has a size {len(data)} not a multiple of "
            f"{TXN_INDEX_ENTRY_SIZE}"
        )
    out: list[AbortedTxn] = []
    for pos in range(0, len(data), TXN_INDEX_ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != _VERSION:
            raise CorruptIndexError(f"transaction index {name}: unknown entry version {version}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TransactionIndex:
    """The `.txnindex` file of one segment; entries kept in memory once read."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None
        self._unsynced = False

    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            self._entries = _decode(data, self.path.name)
        return self._entries

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._load())

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry (its marker must follow the last entry's)."""
        entries = self._load()
        if entries and txn.last_offset < entries[-1].last_offset:
            raise ValueError(
                f"aborted transaction ending at {txn.last_offset} appended after one ending at "
                f"{entries[-1].last_offset} in {self.path.name}"
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, txn.encode())
        finally:
            os.close(fd)
        entries.append(txn)
        self._unsynced = True

    def _rewrite(self, entries: Iterable[AbortedTxn]) -> None:
        kept = list(entries)
        if not kept:
            self.path.unlink(missing_ok=True)
        else:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(b"".join(e.encode() for e in kept))
            os.replace(tmp, self.path)
        self._entries = kept
        self._unsynced = bool(kept)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset`."""
        entries = self._load()
        if entries and entries[-1].last_offset >= offset:
            self._rewrite(e for e in entries if e.last_offset < offset)

    def reset(self) -> None:
        """Forget every entry (the index is being rebuilt)."""
        self._rewrite(())

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Entries overlapping [fetch_offset, upper_bound_offset) (Kafka's collectAbortedTxns)."""
        found: list[AbortedTxn] = []
        for txn in self._load():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        for txn in self._load():
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"last offset {txn.last_offset} of an aborted transaction in "
                    f"{self.path.name} is below the segment base offset {self.base_offset}"
                )

    def flush(self) -> None:
        if not self._unsynced:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._unsynced = False
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._unsynced = False

    def claim_sync(self) -> Path | None:
        """The file's path if it has unsynced entries (the caller fsyncs it, and calls
        `sync_failed` if that fails)."""
        if not self._unsynced:
            return None
        self._unsynced = False
        return self.path

    def sync_failed(self) -> None:
        self._unsynced = self.path.exists()  # none yet: nothing to sync

    def rename_to(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = Path(path)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._unsynced = False
