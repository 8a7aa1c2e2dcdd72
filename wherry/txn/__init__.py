"""The transaction coordinator (Kafka's TransactionCoordinator / TransactionStateManager):
pure, time passed in; `server/transactions.py` wires it to `__transaction_state` and sends
the markers."""

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
