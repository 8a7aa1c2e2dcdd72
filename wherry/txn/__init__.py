"""The transaction coordinator (Kafka's TransactionCoordinator / TransactionStateManager):
pure, time passed in; `coordinator/transactions.py` runs it on `__transaction_state` and
sends the markers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wherry.common.lazy import lazy_attributes

if TYPE_CHECKING:
    from wherry.txn.coordinator import TransactionCoordinator, TxnCoordinatorConfig
    from wherry.txn.metadata import TransactionMetadata, TxnState
    from wherry.txn.records import TRANSACTION_STATE_TOPIC, partition_for
    from wherry.txn.storage import MarkerChannel, PendingMarkers, TxnStorage

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "MarkerChannel",
    "PendingMarkers",
    "TransactionCoordinator",
    "TransactionMetadata",
    "TxnCoordinatorConfig",
    "TxnState",
    "TxnStorage",
    "partition_for",
]

# submodule → the names it gives this package, imported on first access (PEP 562):
# importing one submodule of this package does not import all the others.
_LAZY: dict[str, tuple[str, ...]] = {
    "wherry.txn.coordinator": ("TransactionCoordinator", "TxnCoordinatorConfig"),
    "wherry.txn.metadata": ("TransactionMetadata", "TxnState"),
    "wherry.txn.records": ("TRANSACTION_STATE_TOPIC", "partition_for"),
    "wherry.txn.storage": ("MarkerChannel", "PendingMarkers", "TxnStorage"),
}


__getattr__ = lazy_attributes(__name__, globals(), _LAZY)
