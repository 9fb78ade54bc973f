"""The transaction coordinator (Kafka's ``TransactionCoordinator`` + ``TransactionStateManager``; the marker
channel is the deployment's :data:`MarkerSender`).

Threading: event-loop thread only (all storage calls are synchronous and short); markers a cluster writes in
the background call back on the loop too.

State: transactional id -> :class:`~.state.TransactionMetadata` (producer id and epoch, state, partitions,
timeout, start and last-update times). Every change is first appended to the transactional id's partition of
``__transaction_state`` (:func:`~.log_format.partition_for`, Kafka's record format, see :mod:`.log_format`) and
only then applied in memory, so what a client was told survives a crash of the process (a power loss: see
"Durability" below). :meth:`TransactionCoordinator.load` replays those partitions on start (latest record
per id wins, a tombstone removes it) and finishes what a crash interrupted: a transaction in PrepareCommit / PrepareAbort gets its markers and its Complete state; one
left Ongoing stays open until its producer re-initializes (fenced and aborted) or its timeout aborts it.

Requests (the handlers decode and encode only; each method returns Kafka's error code):

* :meth:`init_producer_id`: the timeout must be in ``[1, transaction.max.timeout.ms]`` (else
  INVALID_TRANSACTION_TIMEOUT). A new id gets a fresh producer id at epoch 0. A known one gets its epoch
  bumped (a new producer id once the epoch would pass 32766), which fences the previous producer: its next
  batch, AddPartitionsToTxn or EndTxn fails with PRODUCER_FENCED / INVALID_PRODUCER_EPOCH. An Ongoing
  transaction of the old producer is aborted first, with markers at epoch + 2 (the fence, then the abort at the
  server's transaction version 2, as Kafka's). A transaction still in a
  Prepare state answers CONCURRENT_TRANSACTIONS (retriable). From InitProducerId v3 a producer re-initializing
  names its producer id and epoch: anything but the current pair is PRODUCER_FENCED.
* :meth:`add_partitions`: producer id mismatch -> INVALID_PRODUCER_ID_MAPPING, another epoch -> PRODUCER_FENCED,
  Prepare states -> CONCURRENT_TRANSACTIONS; otherwise the partitions join and the state is Ongoing (the
  transaction timer starts with the first partition). A partition of an unknown topic fails the request:
  UNKNOWN_TOPIC_OR_PARTITION for it and OPERATION_NOT_ATTEMPTED for the others, as Kafka.
* :meth:`verify_partitions`: KIP-890 part 1, asked by a partition leader before the first transactional batch of
  a producer there: is the partition in its open transaction (nothing written)?
* :meth:`add_offsets`: as add_partitions with the group's ``__consumer_offsets`` partition (Kafka's
  ``handleAddPartitionsToTransaction`` for offsets); the caller names that partition (in a cluster this node
  need not coordinate the group: the marker reaches the partition's leader like any other).
* :meth:`end_txn`: from Ongoing, PrepareCommit/PrepareAbort is logged, a COMMIT/ABORT marker is written to every
  partition of the transaction through the marker sender, then CompleteCommit/CompleteAbort is logged. A retry of
  a completed end with the same result is NONE, of one in its Prepare state CONCURRENT_TRANSACTIONS; the other
  result (in a Prepare or a Complete state), Empty or Dead is INVALID_TXN_STATE, as Kafka's. From a
  transaction version 2 client (EndTxn v5, :meth:`end_transaction`) every commit and abort bumps the epoch
  (:meth:`_end_v2` says how retries are told from the next transaction and how the producer id rotates).
* :meth:`abort_timed_out` (periodic): an Ongoing transaction older than its timeout gets its producer fenced
  (epoch + 1) and is aborted with markers at epoch + 2 (Kafka's ``abortTimedOutTransactions`` at transaction
  version 2); a transaction
  whose markers could not all be written is retried here.
* :meth:`expire_transactional_ids` (periodic): ids whose transaction is complete and untouched for
  ``transactional.id.expiration.ms`` are removed (a tombstone in the log).

Where it runs (the deployment supplies both, the coordinator has one code path): state records go to an
:class:`~broker_runtime.coordinator.internal_topic.InternalTopic` and markers to a :data:`MarkerSender`. Ownership
(:class:`~broker_runtime.coordinator.ownership.PartitionOwnership`, shared with the group coordinator): this node
coordinates only the ``__transaction_state`` partitions it leads (:meth:`TransactionCoordinator.become_leader`
loads one and completes its Prepare states; :meth:`TransactionCoordinator.resign` forgets it); every request for
another id answers NOT_COORDINATOR. A single node is a cluster of one: :meth:`TransactionCoordinator.load` makes
it lead every partition at coordinator epoch 0 (the coordinator epoch is the partition's leader epoch). The
handler waits for the replication of the state records a request appended
(:meth:`TransactionCoordinator.take_appended`) before it answers; at once on a single node.

Markers: the sender writes a COMMIT/ABORT marker to every partition of the transaction and calls back with an
error code per partition. A single node's writes them to its local logs before it returns, so EndTxn answers
after them. A cluster's writes them in the background (WriteTxnMarkers to each partition's leader, once the
Prepare record is replicated, see :mod:`broker_runtime.server.transactions`); EndTxn answers once the Prepare
record is replicated, as Kafka's, and requests meanwhile get CONCURRENT_TRANSACTIONS. A partition whose topic is
gone is skipped with a WARNING (Kafka drops those markers too); any other failure leaves the transaction in its
Prepare state and the periodic task retries, WARNING logged. :meth:`~TransactionCoordinator.when_completed` calls back once a transaction
leaves its Prepare state: the server holds AddPartitionsToTxn, AddOffsetsToTxn and EndTxn requests answered
CONCURRENT_TRANSACTIONS until then (``server/txn_parking.py`` says why: librdkafka's fatal INVALID_TXN_STATE on an
abort right after a commit).

State writes that fail (NOT_ENOUGH_REPLICAS under a short ISR, a disk error) answer the client's retriable error;
each is counted in ``state_write_failures`` by error and logged once per transactional id and failing write (its
repeats at DEBUG, as Kafka logs them all) until a write of the id succeeds (:meth:`TransactionCoordinator.
_write_failed`).

Durability, single node: a state record is appended to the local ``__transaction_state`` partition before the
change is applied and answered, and is NOT fsynced by the coordinator (Kafka does not fsync its internal topics
either; it relies on replication): the partition log flushes per ``log.flush.interval.messages`` /
``log.flush.interval.ms`` like any other (default: the page cache), on roll and on close. A killed broker process
loses nothing (the page cache keeps what was appended); a power loss of a single broker can lose the unflushed
tail: a decision answered to the client (a commit's PrepareCommit, its CompleteCommit, an epoch bump) may then be
missing after the restart, while the markers it wrote to data partitions may or may not be on disk either (also
unflushed). ``log.flush.interval.messages=1`` fsyncs every append, as before. In a cluster a state record counts
once replicated (acks=-1 rules).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from broker_runtime.coordinator.internal_topic import InternalTopic
from broker_runtime.coordinator.ownership import PartitionOwnership
from broker_runtime.coordinator.transaction.log_format import (
    TRANSACTION_STATE_TOPIC,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from broker_runtime.coordinator.transaction.state import MAX_PRODUCER_EPOCH, TransactionMetadata, TxnState
from broker_runtime.errors import ErrorCode, KafkaError, PylogError, StorageError
from broker_runtime.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, RecordBatchBuilder
from broker_runtime.storage.log_batches import read_batches

__all__ = [
    "EndResult",
    "InitResult",
    "MarkerDone",
    "MarkerRequest",
    "MarkerSender",
    "TransactionConfig",
    "TransactionCoordinator",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MarkerRequest:
    """The COMMIT/ABORT markers of one transaction, to be written to each of its partitions."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    #: The leader epoch of the coordinator's ``__transaction_state`` partition (0 on a single node).
    coordinator_epoch: int
    #: ``CONTROL_COMMIT`` or ``CONTROL_ABORT``.
    control_type: int
    partitions: tuple[tuple[str, int], ...]
    #: The ``__transaction_state`` partition of the transactional id (the sender stops once it is not led here).
    state_partition: int


#: Called by the sender with the final code per partition, or None when it gave up because this node is no
#: longer the coordinator.
MarkerDone = Callable[[dict[tuple[str, int], ErrorCode] | None], None]

#: Writes the markers of a request, then calls ``done``: a single node's sender writes them to its local logs
#: before it returns; a cluster's in the background.
MarkerSender = Callable[[MarkerRequest, MarkerDone], None]


@dataclass(frozen=True)
class TransactionConfig:
    """Kafka's broker settings of the transaction coordinator (names in the README)."""

    num_partitions: int = 50
    max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    abort_timed_out_check_interval_ms: int = 10_000
    remove_expired_check_interval_ms: int = 3_600_000


@dataclass(frozen=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class EndResult(NamedTuple):
    """EndTxn's answer: the error, and from v5 the producer id and epoch the producer uses next (-1 when none)."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


#: The transaction version (Kafka's ``TransactionVersion``) from which every EndTxn bumps the producer epoch.
TV2 = 2
#: ``Short.MAX_VALUE``: the one epoch above ``MAX_PRODUCER_EPOCH``, no client's, kept for the coordinator to fence
#: a producer at the exhausted epoch (Kafka's ``isProducerEpochExhausted``).
_EPOCH_CEILING = MAX_PRODUCER_EPOCH + 1


class TransactionCoordinator:
    """See the module docstring."""

    def __init__(
        self,
        config: TransactionConfig,
        state_topic: InternalTopic,
        send_markers: MarkerSender,
        next_producer_id: Callable[[], int],
        now_ms: Callable[[], int],
        topic_exists: Callable[[str], bool],
    ) -> None:
        self.config = config
        #: ``__transaction_state`` on this deployment: its logs (replayed) and the appends of state records.
        self._state_topic = state_topic
        self._send_markers = send_markers
        self._next_producer_id = next_producer_id
        self._now_ms = now_ms
        self._topic_exists = topic_exists
        self._txns: dict[str, TransactionMetadata] = {}
        #: The ``__transaction_state`` partitions this node leads -> coordinator epoch (their leader epoch); a
        #: single node leads every partition at epoch 0 (:meth:`load`).
        self._ownership = PartitionOwnership(
            TRANSACTION_STATE_TOPIC, config.num_partitions, self.partition_for, self, "transactional id(s)"
        )
        #: Transactional ids whose markers are being written (in the background, in a cluster).
        self._in_flight: set[str] = set()
        #: Transactional id -> callbacks waiting for its transaction to leave its Prepare state (:meth:`when_completed`).
        self._completion_waiters: dict[str, list[Callable[[], None]]] = {}
        #: Callbacks :meth:`when_completed` took, and those its caller gave up waiting for (the server counts them).
        self.completion_waits = 0
        self.completion_wait_timeouts = 0
        #: Transactional id -> (what, error) of its state write that fails, logged once (:meth:`_write_failed`).
        self._failing_writes: dict[str, tuple[str, str]] = {}
        #: State writes that failed (the client or the periodic check retries them), by error name.
        self.state_write_failures: dict[str, int] = {}
        #: Transactional id -> (its ``__transaction_state`` partition, the log end offset after the last state
        #: record this node appended for it): what must be replicated before an answer read from its state counts
        #: (:meth:`state_end`).
        self._state_ends: dict[str, tuple[int, int]] = {}

    # -- queries ----------------------------------------------------------------------------------------------

    def metadata(self, transactional_id: str) -> TransactionMetadata | None:
        return self._txns.get(transactional_id)

    @property
    def transactions(self) -> dict[str, TransactionMetadata]:
        return self._txns

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    # -- ownership (cluster) ------------------------------------------------------------------------------------

    def owner_error(self, transactional_id: str) -> ErrorCode:
        """NONE when this node coordinates ``transactional_id``, else NOT_COORDINATOR."""
        return self._ownership.owner_error(transactional_id)

    def epoch_for(self, transactional_id: str) -> int:
        """The coordinator epoch of ``transactional_id``'s partition (-1 when not owned)."""
        return self._ownership.epoch_of(self.partition_for(transactional_id))

    def owns(self, partition: int, coordinator_epoch: int) -> bool:
        return self._ownership.owns(partition, coordinator_epoch)

    @property
    def owned_partitions(self) -> dict[int, int]:
        return self._ownership.owned

    def become_leader(self, partition: int, coordinator_epoch: int) -> int:
        """This node now leads ``partition`` of ``__transaction_state`` at ``coordinator_epoch``: load its ids from
        the local replica (its whole log: as leader, every record in it will be committed), then finish the
        transactions left in a Prepare state (markers re-sent). Returns the number of ids loaded."""
        return self._ownership.become_leader(partition, coordinator_epoch)

    def resign(self, partition: int) -> None:
        """This node no longer leads ``partition``: forget its ids (requests for them get NOT_COORDINATOR)."""
        self._ownership.resign(partition)

    def state_end(self, transactional_id: str) -> tuple[int, int] | None:
        """(partition, log end offset) after the last state record of ``transactional_id`` appended here since
        this node loaded its partition, or None (none appended: its state is what the load read). In a cluster
        that record is applied in memory once appended to the leader's log, before it is replicated: an answer
        read from that state (an AddPartitionsToTxn whose partitions are already in the transaction) must wait
        for it too, as Kafka's cache holds only replicated states (``TransactionStateManager.
        appendTransactionToLog`` completes the transition in its replication callback)."""
        return self._state_ends.get(transactional_id)

    def take_appended(self) -> set[int]:
        """The ``__transaction_state`` partitions appended to since the last call (the handler waits until they
        are replicated before it answers; at once on a single node)."""
        return self._ownership.take_appended()

    # CoordinatorShard hooks of the ownership (replay: :meth:`_replay`)
    def replay(self, partition: int) -> None:
        self._replay(partition)

    def loaded(self, partition: int) -> int:
        mine = [m for tid, m in self._txns.items() if self.partition_for(tid) == partition]
        for meta in mine:
            if meta.in_prepare:
                _log.info(
                    "transactional id %r is in %s: completing it (markers re-sent)",
                    meta.transactional_id,
                    meta.state.name,
                )
                self._complete(meta)
        return len(mine)

    def unloaded(self, partition: int) -> int:
        dropped = [tid for tid in self._txns if self.partition_for(tid) == partition]
        for tid in dropped:
            del self._txns[tid]
            self._state_ends.pop(tid, None)
            self._in_flight.discard(tid)
            self._failing_writes.pop(tid, None)
            self._completed(tid)  # the parked requests are answered NOT_COORDINATOR now
        return len(dropped)

    def when_completed(self, transactional_id: str, then: Callable[[], None]) -> bool:
        """Call ``then()`` once the transaction of ``transactional_id`` leaves its Prepare state: its markers are
        written and its Complete state logged, or this node stopped coordinating it. False (``then`` dropped) when
        it is not in a Prepare state now. Callbacks run in registration order, from inside the coordinator: one
        that calls back into the coordinator must defer that (the server's request parking does)."""
        meta = self._txns.get(transactional_id)
        if meta is None or not meta.in_prepare:
            return False
        self._completion_waiters.setdefault(transactional_id, []).append(then)
        self.completion_waits += 1
        return True

    def _completed(self, transactional_id: str) -> None:
        for then in self._completion_waiters.pop(transactional_id, ()):
            then()

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        """DescribeTransactions for one id: TRANSACTIONAL_ID_NOT_FOUND when unknown (or expired)."""
        code = self.owner_error(transactional_id)
        if code != ErrorCode.NONE:
            return code, None
        meta = self._txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, meta

    def list_transactions(
        self, state_names: list[str], producer_ids: list[int], duration_ms: int = -1
    ) -> tuple[list[str], list[TransactionMetadata]]:
        """ListTransactions: (state filters no state is named so, matching transactions), filtered as Kafka's
        ``listTransactionStates``: each non-empty filter must match; ``duration_ms >= 0`` keeps transactions
        started longer ago than that (an id with no transaction started has no duration and is left out); Dead
        ids never appear. Only unknown state filters: nothing matches."""
        unknown = [name for name in state_names if TxnState.from_kafka_name(name) is None]
        states = {s for name in state_names if (s := TxnState.from_kafka_name(name)) is not None}
        if state_names and not states:
            return unknown, []
        wanted_ids = set(producer_ids)
        now = self._now_ms()
        found = [
            meta
            for meta in self._txns.values()
            if meta.state != TxnState.DEAD
            and (not wanted_ids or meta.producer_id in wanted_ids)
            and (not states or meta.state in states)
            and (duration_ms < 0 or (meta.start_ms >= 0 and now - meta.start_ms > duration_ms))
        ]
        return unknown, found

    # -- persistence --------------------------------------------------------------------------------------------

    def _persist(self, meta: TransactionMetadata, state: TxnState, partitions: set[tuple[str, int]]) -> None:
        """Append the record of ``meta`` in ``state`` with ``partitions`` (raises on a storage failure)."""
        now = self._now_ms()
        value = TxnLogValue(
            meta.producer_id,
            meta.producer_epoch,
            meta.timeout_ms,
            int(state),
            frozenset(partitions),
            now,
            meta.start_ms,
            meta.previous_producer_id,
            meta.next_producer_id,
            meta.client_version,
        )
        self._append(meta.transactional_id, encode_value(value), now)
        meta.last_update_ms = now
        failing = self._failing_writes.pop(meta.transactional_id, None)
        if failing is not None:
            _log.info(
                "transactional id %r: transaction log writes succeed again (%s had failed with %s)",
                meta.transactional_id,
                *failing,
            )

    def _write_failed(self, transactional_id: str, what: str, exc: Exception) -> None:
        """A state write of ``transactional_id`` failed and will be retried (by the client, which got a retriable
        error, or by the periodic check): counted in :attr:`state_write_failures` by error; logged once per
        transactional id and failing write (WARNING, ERROR for a storage failure), its repeats at DEBUG, until a
        write of the id succeeds (one INFO line). Kafka logs these failures at DEBUG only; a client retries every
        few hundred milliseconds while the ISR of ``__transaction_state`` is short, so a line per retry would be
        a flood."""
        code = exc.code if isinstance(exc, KafkaError) else None
        error = code.name if isinstance(code, ErrorCode) else type(exc).__name__
        self.state_write_failures[error] = self.state_write_failures.get(error, 0) + 1
        if self._failing_writes.get(transactional_id) == (what, error):
            _log.debug(
                "transactional id %r: %s not written to the transaction log again: %s",
                transactional_id,
                what,
                exc,
            )
            return
        self._failing_writes[transactional_id] = (what, error)
        _log.log(
            logging.ERROR if isinstance(exc, (OSError, StorageError)) else logging.WARNING,
            "transactional id %r: %s not written to the transaction log: %s; retried (repeats are logged at DEBUG "
            "until a write succeeds, and counted in pylog_transaction_state_write_failures_total)",
            transactional_id,
            what,
            exc,
        )

    def _append(self, transactional_id: str, value: bytes | None, now: int) -> None:
        partition = self.partition_for(transactional_id)
        builder = RecordBatchBuilder()
        builder.append(now, encode_key(transactional_id), value)
        self._state_topic.append(partition, bytes(builder.build()))  # raises when not written
        self._ownership.appended(partition)
        log = self._state_topic.log(partition)
        if log is not None:
            self._state_ends[transactional_id] = (partition, log.log_end_offset)

    def _transition(
        self,
        meta: TransactionMetadata,
        state: TxnState,
        partitions: set[tuple[str, int]] | None = None,
        **changes: int,
    ) -> None:
        """Log, then apply a state change and the field ``changes`` that go with it (producer id and epoch,
        client version, previous / next producer id); the state machine is checked before anything is written,
        and nothing is applied when the write fails."""
        probe = TransactionMetadata(
            meta.transactional_id, meta.producer_id, meta.producer_epoch, 0, meta.state
        )
        probe.transition(state)
        keep = set(meta.partitions) if partitions is None else partitions
        if changes:
            target = dataclasses.replace(meta, **changes)  # type: ignore[arg-type]
            self._persist(target, state, keep)
            for name, value in changes.items():
                setattr(meta, name, value)
            meta.last_update_ms = target.last_update_ms
        else:
            self._persist(meta, state, keep)
        meta.state = state
        meta.partitions = keep

    def load(self) -> int:
        """A single node: lead every ``__transaction_state`` partition at epoch 0, replaying the existing ones and
        finishing interrupted transactions. Returns the number of transactional ids loaded."""
        return self._ownership.load_all()

    def _replay(self, partition: int) -> None:
        """Apply every record of one ``__transaction_state`` partition (to its log end offset)."""
        log = self._state_topic.log(partition)
        if log is None:
            return
        for batch in read_batches(log):
            for record in batch.records():
                if record.key is not None:
                    self._apply_record(decode_key(record.key), record.value)

    def _apply_record(self, transactional_id: str, value: bytes | memoryview | None) -> None:
        if value is None:
            self._txns.pop(transactional_id, None)
            return
        v = decode_value(value)
        self._txns[transactional_id] = TransactionMetadata(
            transactional_id,
            v.producer_id,
            v.producer_epoch,
            v.timeout_ms,
            TxnState(v.status),
            set(v.partitions),
            v.start_ms,
            v.last_update_ms,
            v.client_version,
            v.previous_producer_id,
            v.next_producer_id,
        )

    # -- InitProducerId ------------------------------------------------------------------------------------------

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> InitResult:
        owner = self.owner_error(transactional_id)
        if owner != ErrorCode.NONE:
            return InitResult(owner)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        meta = self._txns.get(transactional_id)
        try:
            if meta is None or meta.state == TxnState.DEAD:
                meta = TransactionMetadata(transactional_id, self._next_producer_id(), -1, timeout_ms)
                meta.state = TxnState.EMPTY
                meta.start_ms = -1
                self._bump_epoch(meta)
                meta.timeout_ms = timeout_ms
                self._persist(meta, TxnState.EMPTY, set())
                self._txns[transactional_id] = meta
                return InitResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
            if (
                producer_id >= 0
                and (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch)
                and not (producer_id == meta.previous_producer_id and producer_epoch >= MAX_PRODUCER_EPOCH)
            ):
                # (Kafka's isValidProducerId: the previous producer id with an exhausted epoch is a producer
                # whose EndTxn rotated its id, transaction version 2, asking again.)
                return InitResult(ErrorCode.PRODUCER_FENCED)
            if meta.in_prepare:
                return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
            if meta.state == TxnState.ONGOING:
                # A new producer instance: fence the old one and abort what it left open (Kafka's epoch fence).
                _log.info(
                    "transactional id %r re-initialized with a transaction open: aborting it",
                    transactional_id,
                )
                if not self._fence_and_abort(meta):
                    return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
            self._bump_epoch(meta)
            meta.timeout_ms = timeout_ms
            meta.start_ms = -1
            self._transition(meta, TxnState.EMPTY, set(), client_version=0)
            return InitResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
        except (PylogError, OSError) as exc:
            self._write_failed(transactional_id, "InitProducerId", exc)
            return InitResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def _bump_epoch(self, meta: TransactionMetadata) -> None:
        if meta.producer_epoch >= MAX_PRODUCER_EPOCH:
            meta.producer_id = self._next_producer_id()
            meta.producer_epoch = 0
        else:
            meta.producer_epoch += 1

    def _fence_and_abort(self, meta: TransactionMetadata) -> bool:
        """Bump the epoch of an Ongoing transaction (fencing its producer) and abort it. The abort is one no client
        asked for, so it runs at the server's transaction version, 2 (Kafka's ``endTransaction`` with
        ``transactionVersionLevel``), which bumps the epoch once more: the markers carry epoch + 2, and the fenced
        producer's own EndTxn, at epoch - 2 of the coordinator's, is PRODUCER_FENCED (epoch + 1 alone would
        look like the retry of a v2 EndTxn to the coordinator).

        The producer id stays the open transaction's until its markers are written: they must close THAT
        producer's transaction on the data partitions. At the exhausted epoch (``MAX_PRODUCER_EPOCH``) the
        PrepareAbort carries ``Short.MAX_VALUE`` (the fence and the bump share the one epoch left, as Kafka's
        ``prepareFenceProducerEpoch`` then ``prepareAbortOrCommit`` reach it) and a next producer id, which the
        CompleteAbort puts in place (Kafka's ``prepareComplete``). Nothing written (a failed log write): the
        transaction stays Ongoing at its epoch, and the next timeout pass fences it again."""
        meta.transition(TxnState.PREPARE_EPOCH_FENCE)  # in memory only, as Kafka
        exhausted = meta.producer_epoch >= MAX_PRODUCER_EPOCH
        try:
            self._transition(
                meta,
                TxnState.PREPARE_ABORT,
                producer_epoch=_EPOCH_CEILING if exhausted else meta.producer_epoch + 2,
                next_producer_id=self._next_producer_id() if exhausted else -1,
                client_version=TV2,
            )
        except BaseException:
            meta.state = TxnState.ONGOING
            raise
        return self._complete(meta)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------------------------

    def _check_producer(self, transactional_id: str, producer_id: int, epoch: int) -> ErrorCode:
        owner = self.owner_error(transactional_id)
        if owner != ErrorCode.NONE:
            return owner
        meta = self._txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED
        if meta.in_prepare:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.NONE

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[tuple[str, int]],
        client_version: int = 0,
    ) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn; ``client_version`` 2 when a partition leader adds the partitions of a transaction
        version 2 client (Produce v12, TxnOffsetCommit v5: AddPartitionsToTxn v5 with VerifyOnly false)."""
        code = self._check_producer(transactional_id, producer_id, epoch)
        if code != ErrorCode.NONE:
            return dict.fromkeys(partitions, code)
        unknown = [tp for tp in partitions if not self._topic_exists(tp[0])]
        if unknown:
            return {
                tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown
                else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in partitions
            }
        code = self._join(self._txns[transactional_id], set(partitions), client_version)
        return dict.fromkeys(partitions, code)

    def verify_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4+ with ``VerifyOnly`` (KIP-890 part 1, Kafka's
        ``handleVerifyPartitionsInTransaction``): is each partition in the producer's open transaction? NONE for
        those that are, TRANSACTION_ABORTABLE for the others (a partition leader then refuses the batch); the
        producer's errors of :meth:`add_partitions` (NOT_COORDINATOR, INVALID_PRODUCER_ID_MAPPING,
        PRODUCER_FENCED, CONCURRENT_TRANSACTIONS in a Prepare state) for every partition. Writes nothing."""
        owner = self.owner_error(transactional_id)
        if owner != ErrorCode.NONE:
            return dict.fromkeys(partitions, owner)
        meta = self._txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD or meta.producer_id != producer_id:
            return dict.fromkeys(partitions, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if meta.producer_epoch != epoch:
            return dict.fromkeys(partitions, ErrorCode.PRODUCER_FENCED)
        if meta.in_prepare:
            return dict.fromkeys(partitions, ErrorCode.CONCURRENT_TRANSACTIONS)
        return {
            tp: ErrorCode.NONE if tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE
            for tp in partitions
        }

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        offsets_partition: tuple[str, int],
        client_version: int = 0,
    ) -> ErrorCode:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition (named by the caller, which knows the
        group coordinator's placement) joins the transaction, so its marker ends the offsets the producer
        commits there with TxnOffsetCommit."""
        code = self._check_producer(transactional_id, producer_id, epoch)
        if code != ErrorCode.NONE:
            return code
        return self._join(self._txns[transactional_id], {offsets_partition}, client_version)

    def _join(
        self, meta: TransactionMetadata, partitions: set[tuple[str, int]], client_version: int = 0
    ) -> ErrorCode:
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return ErrorCode.NONE
        try:
            if meta.state != TxnState.ONGOING:
                meta.start_ms = self._now_ms()
            self._transition(
                meta, TxnState.ONGOING, meta.partitions | partitions, client_version=client_version
            )
        except (PylogError, OSError) as exc:
            self._write_failed(meta.transactional_id, "the partitions added (Ongoing)", exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    # -- EndTxn ----------------------------------------------------------------------------------------------------

    def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, client_version: int = 0
    ) -> ErrorCode:
        """EndTxn's error (:meth:`end_transaction` for the producer id and epoch of v5)."""
        return self.end_transaction(transactional_id, producer_id, epoch, commit, client_version).error

    def end_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, client_version: int = 0
    ) -> EndResult:
        """EndTxn. ``client_version`` is the request's transaction version: 2 for EndTxn v5 (Kafka's
        ``TransactionVersion.transactionVersionForEndTxn``), which :meth:`_end_v2` serves; 0 below."""
        if client_version >= TV2:
            return self._end_v2(transactional_id, producer_id, epoch, commit)
        return EndResult(self._end_v1(transactional_id, producer_id, epoch, commit))

    def _end_v1(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        owner = self.owner_error(transactional_id)
        if owner != ErrorCode.NONE:
            return owner
        meta = self._txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED
        if meta.state == TxnState.ONGOING:
            try:
                self._transition(meta, TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
            except (PylogError, OSError) as exc:
                self._write_failed(
                    transactional_id, "EndTxn (PrepareCommit)" if commit else "EndTxn (PrepareAbort)", exc
                )
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            # Markers not written now are retried by the periodic task; in a cluster they are written in the
            # background once the Prepare record is replicated, and the answer does not wait for them (Kafka's).
            self._complete(meta)
            return ErrorCode.NONE
        if meta.state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS  # a retry of the end whose markers are being written
        if meta.state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return ErrorCode.NONE  # a retry of the end that completed
        # The other result while the markers are written, or after (Kafka's v1 ``endTransaction``): no wait
        # can make it valid, so it is answered at once rather than parked until the markers complete.
        return ErrorCode.INVALID_TXN_STATE

    def _end_v2(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> EndResult:
        """EndTxn v5 (transaction version 2, Kafka's ``endTransaction`` with a client that ``supportsEpochBump``):
        every commit or abort bumps the producer epoch. The Prepare state is logged with epoch + 1 (and, when
        the epoch is exhausted, the next producer id); the markers carry epoch + 1, so a batch the producer sent
        at its old epoch and that arrives late is refused by the partition (INVALID_PRODUCER_EPOCH) instead of
        opening a transaction nobody ends; the answer names the new epoch, which the producer uses next. Once
        the markers are written the Complete state takes the next producer id at epoch 0 if one was chosen.

        The producer's epoch tells a retry from the next transaction: in a Prepare or Complete state, a request
        at epoch - 1 is the retry of the EndTxn that bumped it (CONCURRENT_TRANSACTIONS while in Prepare, NONE
        once complete with the same result), as is, after a rotation, the previous producer id at the exhausted
        epoch. An abort with no partition added (Empty, or after a completed transaction: the producer cannot
        know whether its implicit adds reached the coordinator) is logged and bumps the epoch too; a commit
        there is INVALID_TXN_STATE."""
        owner = self.owner_error(transactional_id)
        if owner != ErrorCode.NONE:
            return EndResult(owner)
        meta = self._txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD:
            return EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        retry_on_overflow = (
            meta.previous_producer_id == producer_id
            and epoch == MAX_PRODUCER_EPOCH
            and meta.producer_epoch == 0
        )
        retry_on_bump = meta.producer_epoch == epoch + 1
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid_epoch = retry_on_bump
        elif meta.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid_epoch = retry_on_bump or retry_on_overflow or epoch == meta.producer_epoch
        else:
            valid_epoch = epoch == meta.producer_epoch
        if meta.producer_id != producer_id and not retry_on_overflow:
            return EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not valid_epoch:
            return EndResult(ErrorCode.PRODUCER_FENCED)
        retry = retry_on_bump or retry_on_overflow
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if meta.state == TxnState.ONGOING:
            return self._prepare_v2(meta, commit)
        if meta.state == done and retry:
            return EndResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
        if not commit and not retry and meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, done):
            return self._prepare_v2(meta, commit)
        if meta.state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        return EndResult(ErrorCode.INVALID_TXN_STATE)  # logged by the handler, with the state it met

    def _prepare_v2(self, meta: TransactionMetadata, commit: bool) -> EndResult:
        """Log PrepareCommit/PrepareAbort at epoch + 1 (a next producer id when the epoch is exhausted), then
        write the markers at that epoch (:meth:`_complete`)."""
        next_id = self._next_producer_id() if meta.producer_epoch >= MAX_PRODUCER_EPOCH else -1
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if meta.state != TxnState.ONGOING:
            meta.start_ms = self._now_ms()  # an abort with no partitions still needs a start (Kafka's)
        try:
            self._transition(
                meta,
                state,
                producer_epoch=meta.producer_epoch + 1,
                next_producer_id=next_id,
                client_version=TV2,
            )
        except (PylogError, OSError) as exc:
            self._write_failed(meta.transactional_id, f"EndTxn ({state.kafka_name})", exc)
            return EndResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        answer = EndResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
        self._complete(meta)
        return answer

    def _complete(self, meta: TransactionMetadata) -> bool:
        """Write the markers of a Prepare state, then log the Complete state (:meth:`_finish`, once the sender
        calls back); True when that happened before this returns (a single node's sender), False while markers
        remain (a cluster's background sender, or a failure the periodic task retries)."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        partitions = sorted(meta.partitions)
        if not partitions:
            return self._finish(meta, commit, partitions, {})
        tid = meta.transactional_id
        if tid in self._in_flight:
            return False
        self._in_flight.add(tid)
        expected = (meta.producer_id, meta.producer_epoch, meta.state)
        finished: list[bool] = []

        def done(results: dict[tuple[str, int], ErrorCode] | None) -> None:
            self._in_flight.discard(tid)
            current = self._txns.get(tid)
            if results is None or current is not meta:
                return  # no longer the coordinator: the next one re-sends from its loaded Prepare state
            if (meta.producer_id, meta.producer_epoch, meta.state) == expected:
                finished.append(self._finish(meta, commit, partitions, results))

        request = MarkerRequest(
            tid,
            meta.producer_id,
            meta.producer_epoch,
            self.epoch_for(tid),
            CONTROL_COMMIT if commit else CONTROL_ABORT,
            tuple(partitions),
            self.partition_for(tid),
        )
        self._send_markers(request, done)
        return finished == [True]

    def _finish(
        self,
        meta: TransactionMetadata,
        commit: bool,
        partitions: list[tuple[str, int]],
        results: dict[tuple[str, int], ErrorCode],
    ) -> bool:
        """Markers written (``results``): log the Complete state; False when some marker failed (retried)."""
        if partitions:
            failed = {}
            for tp in partitions:
                code = results.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    _log.warning(
                        "transactional id %r: %s-%d no longer exists; its %s marker is dropped",
                        meta.transactional_id,
                        tp[0],
                        tp[1],
                        "COMMIT" if commit else "ABORT",
                    )
                elif code != ErrorCode.NONE:
                    failed[tp] = code
            if failed:
                _log.warning(
                    "transactional id %r: %s markers not written to %s; retried by the periodic check",
                    meta.transactional_id,
                    "COMMIT" if commit else "ABORT",
                    ", ".join(f"{t}-{p} ({ErrorCode(c).name})" for (t, p), c in failed.items()),
                )
                return False
        complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        rotate: dict[str, int] = {}
        if meta.client_version >= TV2:
            # Kafka's prepareComplete: the id used so far becomes the previous one; a rotation chosen at the
            # Prepare state (the epoch ran out) takes effect now that its markers are written.
            rotate["previous_producer_id"] = meta.producer_id
            if meta.next_producer_id >= 0:
                rotate.update(producer_id=meta.next_producer_id, producer_epoch=0, next_producer_id=-1)
        try:
            self._transition(meta, complete, set(), **rotate)
        except (PylogError, OSError) as exc:
            self._write_failed(meta.transactional_id, f"the markers' completion ({complete.kafka_name})", exc)
            return False
        self._completed(meta.transactional_id)
        return True

    # -- periodic tasks ----------------------------------------------------------------------------------------------

    def abort_timed_out(self) -> int:
        """Abort Ongoing transactions past their timeout; finish Prepare states whose markers failed."""
        now = self._now_ms()
        aborted = 0
        for meta in list(self._txns.values()):
            if meta.in_prepare:
                self._complete(meta)
            elif meta.state == TxnState.ONGOING and meta.start_ms + meta.timeout_ms < now:
                _log.info(
                    "transactional id %r: transaction open since %d ms exceeded transaction.timeout.ms=%d; "
                    "fencing producer %d epoch %d and aborting",
                    meta.transactional_id,
                    now - meta.start_ms,
                    meta.timeout_ms,
                    meta.producer_id,
                    meta.producer_epoch,
                )
                try:
                    self._fence_and_abort(meta)
                except (PylogError, OSError) as exc:
                    self._write_failed(meta.transactional_id, "the abort of a timed-out transaction", exc)
                    continue
                aborted += 1
        return aborted

    def expire_transactional_ids(self) -> int:
        """Remove ids idle for ``transactional.id.expiration.ms`` with no open transaction (tombstones)."""
        now = self._now_ms()
        expired = 0
        for tid, meta in list(self._txns.items()):
            if meta.completed and now - meta.last_update_ms >= self.config.transactional_id_expiration_ms:
                try:
                    self._append(tid, None, now)
                except (PylogError, OSError) as exc:
                    self._write_failed(tid, "its expiration (a tombstone)", exc)
                    continue
                meta.state = TxnState.DEAD
                del self._txns[tid]
                self._state_ends.pop(tid, None)
                self._failing_writes.pop(tid, None)
                expired += 1
        if expired:
            _log.info("expired %d transactional id(s)", expired)
        return expired
