"""Kafka's transaction coordinator: transactional ids, their producer ids and epochs, the transaction state
machine kept in ``__transaction_state``, markers, timeouts (see :mod:`.coordinator`)."""

from broker_runtime.coordinator.transaction.coordinator import (
    InitResult,
    MarkerDone,
    MarkerRequest,
    MarkerSender,
    TransactionConfig,
    TransactionCoordinator,
)
from broker_runtime.coordinator.transaction.log_format import TRANSACTION_STATE_TOPIC, partition_for
from broker_runtime.coordinator.transaction.state import TransactionMetadata, TxnState

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "InitResult",
    "MarkerDone",
    "MarkerRequest",
    "MarkerSender",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionMetadata",
    "TxnState",
    "partition_for",
]
