"""The transaction state machine (Kafka's ``TransactionState`` and ``TransactionMetadata``).

States and their numbers in the log (``TransactionStatus``), with the states each may follow::

    Empty (0)           <- Empty, CompleteCommit, CompleteAbort         no transaction open
    Ongoing (1)         <- Ongoing, Empty, CompleteCommit, CompleteAbort  partitions added
    PrepareCommit (2)   <- Ongoing                                       commit decided (durable), markers next
    PrepareAbort (3)    <- Ongoing, PrepareEpochFence                    abort decided, markers next
                           (transaction version 2 also: Empty, CompleteCommit, CompleteAbort: an abort of a
                           transaction whose partitions the coordinator never saw, which bumps the epoch)
    CompleteCommit (4)  <- PrepareCommit                                 markers written everywhere
    CompleteAbort (5)   <- PrepareAbort
    Dead (6)            <- Empty, CompleteCommit, CompleteAbort          transactional id expired
    PrepareEpochFence (7) <- Ongoing                                     (in memory only) fencing a producer

:meth:`TransactionMetadata.transition` refuses any other move with :class:`~broker_runtime.errors.
IllegalStateError`. Not thread-safe: the coordinator uses it from the event-loop thread only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from broker_runtime.errors import IllegalStateError

__all__ = ["MAX_PRODUCER_EPOCH", "TransactionMetadata", "TxnState"]

#: Kafka bumps to a new producer id once the epoch would reach ``Short.MAX_VALUE`` (32767).
MAX_PRODUCER_EPOCH = 32766


class TxnState(IntEnum):
    """A transaction's state; :attr:`kafka_name` is Kafka's name for it (DescribeTransactions, ListTransactions)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _KAFKA_NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        """The state Kafka names ``name`` (exact spelling, as Kafka's ``TransactionState.fromName``), else None."""
        return _BY_KAFKA_NAME.get(name)


_KAFKA_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_KAFKA_NAME = {name: state for state, name in _KAFKA_NAMES.items()}

_E, _O, _PC, _PA, _CC, _CA, _D, _PF = TxnState

_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _E: frozenset({_E, _CC, _CA}),
    _O: frozenset({_O, _E, _CC, _CA}),
    _PC: frozenset({_O}),
    _PA: frozenset({_O, _PF, _E, _CC, _CA}),
    _CC: frozenset({_PC}),
    _CA: frozenset({_PA}),
    _D: frozenset({_E, _CC, _CA}),
    _PF: frozenset({_O}),
}


@dataclass
class TransactionMetadata:
    """What the coordinator knows of one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    #: Transaction version 2 (KIP-890): the transaction version of the requests that made the state (0 or 2), the
    #: producer id before the last rotation, and the one a Prepare state rotates to once its markers are written
    #: (-1: none); the fields of the same names in the transaction log (``log_format``).
    client_version: int = 0
    previous_producer_id: int = -1
    next_producer_id: int = -1

    def transition(self, target: TxnState) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateError(
                f"transactional id {self.transactional_id!r}: cannot move from {self.state.name} to {target.name}"
            )
        self.state = target

    @property
    def in_prepare(self) -> bool:
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def completed(self) -> bool:
        return self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
