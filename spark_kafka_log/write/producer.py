"""The per-task producer: Arrow batches in, acknowledged Kafka record batches out.

Runs on: executors (task).

Where this runs: on the **executors**, one :class:`TaskProducer` per write task (batch or micro-batch),
created in ``write()``, fed every Arrow batch of the task, flushed and closed before ``write()`` returns
its commit message. Single-threaded; not thread-safe.

It composes three parts and owns the producer identity:

* :class:`~spark_kafka_log.write.accumulator.RecordAccumulator` -- partitions the rows and seals record batches
  (batch.size, linger.ms, sequence numbers, resume after a failed attempt);
* :class:`~spark_kafka_log.write.sender.Sender` -- sends sealed batches to the leaders and tracks them until
  acknowledged (pipelining, retries, deadlines);
* the identity -- producer id and epoch: with idempotence, one InitProducerId per Spark partition of a write,
  kept in :mod:`spark_kafka_log.write.task_state`: any later attempt of the same partition (task retry, stage
  retry whose attempt numbers restart at 0, speculation) finds it there and resumes it (then the accumulator
  skips what earlier attempts wrote). The attempt holds the partition's state lock from its first record
  until :meth:`TaskProducer.close`, which first awaits the answers of requests already sent.
  Transactional (given a ``transactional_id``, stable for every attempt of one Spark partition of one write):
  InitProducerId with that id and ``kafka.transaction.timeout.ms``, which fences any earlier attempt of the
  partition (the coordinator aborts its open transaction and bumps the epoch, so its later sends fail); no task
  state file and no resume: the earlier attempt's records are aborted, this attempt writes everything again.
  A task with no rows initializes its id too (in :meth:`TaskProducer.flush`), so a transaction an earlier
  attempt or run left open on it ends now, not at its timeout.

Transactions: each partition joins the transaction (AddPartitionsToTxn, through the sender's hook) before its
first batch is sent; batches carry the transactional attribute bit; :meth:`TaskProducer.flush` waits for every
acknowledgement but never commits: the driver commits or aborts every task's transaction
(:mod:`spark_kafka_log.exactly_once.task_transactions`) with the id and epoch the task reports. A task that fails aborts its own
transaction after awaiting its requests (:meth:`TaskProducer.abort_transaction`, best effort: a fenced or
unreachable coordinator is logged, and the broker aborts the transaction at its timeout anyway), by bumping the
epoch so that no request of it can land after the ABORT marker (no hanging transaction, see there).

Memory: the bytes held (unsealed slices + sealed batches not yet acknowledged) stay below buffer.memory:
when they would exceed it, :meth:`TaskProducer.write` sends and waits for acknowledgements before taking more
input. The only extra is the Arrow batch being partitioned (Spark's ``arrow.maxRecordsPerBatch`` rows).

Idempotence (default on, needs acks=all): each batch carries the producer id, epoch and the partition's next
sequence number, so a request resent after a lost response or a broken connection is recognised by the broker
as a duplicate and not written twice. Nothing is dropped silently: the task succeeds only when every sealed
batch was acknowledged (acks=0: written to the socket).
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa

from broker_runtime.errors import ErrorCode, KafkaError, ProduceFailedError, PylogError
from broker_runtime.protocol.messages import LATEST_TIMESTAMP
from broker_runtime.protocol.topic_partition import TopicPartition
from spark_kafka_log.common.commit_summary import PartitionStats
from spark_kafka_log.common.connections import topic_partitions, writer_client
from spark_kafka_log.common.fault_injection import TaskFaults
from spark_kafka_log.common.schema import InputLayout
from spark_kafka_log.common.writer_options import WriterOptions
from spark_kafka_log.write.accumulator import RecordAccumulator
from spark_kafka_log.write.partitioner import Partitioner
from spark_kafka_log.write.sender import Sender
from spark_kafka_log.write.task_state import TaskIdentity, TaskState, last_sequences

__all__ = ["TaskProducer"]

log = logging.getLogger("spark_kafka_log.producer")


class TaskProducer:
    """Partitions, batches and sends the Arrow batches of one write task (see the module docstring)."""

    def __init__(
        self,
        options: WriterOptions,
        bootstrap_servers: str,
        layout: InputLayout,
        *,
        identity: TaskIdentity | None = None,
        faults: TaskFaults | None = None,
        transactional_id: str | None = None,
    ) -> None:
        self._opts = options
        #: Set: every record of this task goes into one transaction of this id (see the module docstring).
        self.transactional_id = transactional_id
        #: Wall-clock ms of the first AddPartitionsToTxn (-1: the transaction has no partition yet).
        self.transaction_started_ms = -1
        #: The partitions that joined this task's transaction (AddPartitionsToTxn answered).
        self._txn_partitions: list[TopicPartition] = []
        self._client = writer_client(bootstrap_servers, **options.client_settings())
        # Seeded per task, not per attempt: a retry places null-key rows where the failed attempt did.
        partitioner = Partitioner(
            options.batch_size, seed=None if identity is None else f"{identity.write_id}/{identity.task}"
        )
        self._num_partitions: dict[str, int] = {}
        self._accumulator = RecordAccumulator(
            options,
            layout,
            partitioner,
            partition_count=self.num_partitions,
            before_first_record=self._before_first_record,
        )
        self._sender = Sender(
            self._client,
            options,
            self._accumulator,
            faults,
            transactional_id=transactional_id,
            add_partitions=None if transactional_id is None else self._add_partitions,
        )
        self.producer_id = -1
        self.producer_epoch = -1
        self._task_state: TaskState | None = None
        self._identity = identity
        self._identified = not options.enable_idempotence and transactional_id is None
        if transactional_id is not None and not options.enable_idempotence:
            raise ProduceFailedError(
                f"transactional id {transactional_id!r}: a transactional producer needs idempotence"
            )

    @property
    def in_transaction(self) -> bool:
        """True once a partition joined this task's transaction (then the driver must end it)."""
        return self.transaction_started_ms >= 0

    @property
    def stats(self) -> dict[TopicPartition, PartitionStats]:
        """What this task wrote per topic partition so far."""
        return self._accumulator.stats

    @property
    def held_bytes(self) -> int:
        """Bytes held against buffer.memory (pending rows + sealed batches not yet acknowledged)."""
        return self._accumulator.held_bytes

    def _init_identity(self, identity: TaskIdentity | None) -> None:
        """Producer id/epoch: an earlier attempt's of this Spark partition (then skip what it wrote), else fresh.

        Without an identity (outside a Spark write) there is nothing to resume: a fresh id, no state file.
        Transactional: the transactional id's producer id and a bumped epoch (fencing earlier attempts).
        """
        if self.transactional_id is not None:
            self._init_transactional(self.transactional_id)
            return
        if identity is None:
            self.producer_id, self.producer_epoch = self._client.transactions.init_producer_id()
            self._accumulator.set_producer(self.producer_id, self.producer_epoch, {})
            return
        # Locks the partition's state for this attempt (or fails: another attempt runs, or the state dir is
        # unreachable); released by close().
        state = TaskState.acquire(self._opts.producer_state_dir, identity)
        self._task_state = state
        resume = {}
        if state.resumed:
            self.producer_id, self.producer_epoch = state.producer_id, state.producer_epoch
            resume = last_sequences(self._client, state)
            log.warning(
                "pylog producer: write %s Spark partition %d (attempt %d) resumes the producer id %d epoch %d "
                "of an earlier attempt; records already written by earlier attempts per partition: %s",
                identity.write_id,
                identity.task,
                identity.attempt,
                self.producer_id,
                self.producer_epoch,
                {f"{t}-{p}": r.last_sequence + 1 for (t, p), r in resume.items()},
            )
        else:
            self.producer_id, self.producer_epoch = self._client.transactions.init_producer_id()
            state.producer_id, state.producer_epoch = self.producer_id, self.producer_epoch
            state.start_offsets = {}
            state.save()
        self._accumulator.set_producer(self.producer_id, self.producer_epoch, resume)

    def _init_transactional(self, tid: str) -> None:
        timeout = self._opts.transaction_timeout_ms
        try:
            self.producer_id, self.producer_epoch = self._client.transactions.init_producer_id(tid, timeout)
        except KafkaError as exc:
            hint = (
                f": kafka.transaction.timeout.ms={timeout} is above the broker's transaction.max.timeout.ms"
                if exc.code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
                else ""
            )
            raise ProduceFailedError(f"transactional id {tid!r}: InitProducerId failed: {exc}{hint}") from exc
        log.info(
            "pylog producer: transactional id %r: producer id %d epoch %d (earlier attempts fenced)",
            tid,
            self.producer_id,
            self.producer_epoch,
        )
        self._accumulator.set_producer(self.producer_id, self.producer_epoch, {}, transactional=True)

    def _add_partitions(self, tps: list[TopicPartition]) -> None:
        """Sender hook: ``tps`` join the transaction before their first batch is sent."""
        assert self.transactional_id is not None
        try:
            self._client.transactions.add_partitions_to_txn(
                self.transactional_id, self.producer_id, self.producer_epoch, tps
            )
        except KafkaError as exc:
            fenced = (
                ": a later attempt of this Spark partition fenced this one, or the broker aborted the "
                f"transaction after kafka.transaction.timeout.ms={self._opts.transaction_timeout_ms}"
                if exc.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
                else ""
            )
            raise ProduceFailedError(
                f"transactional id {self.transactional_id!r}: adding partitions to the transaction failed: "
                f"{exc}{fenced}"
            ) from exc
        self._txn_partitions.extend(tps)
        if self.transaction_started_ms < 0:
            self.transaction_started_ms = int(time.time() * 1000)

    def _before_first_record(self, tp: TopicPartition) -> None:
        """Before the first record goes to ``tp``: record where a retry must look for it (task state)."""
        ts = self._task_state
        if ts is not None and tp not in ts.start_offsets:
            ts.start_offsets[tp] = self._client.list_offsets({tp: LATEST_TIMESTAMP})[tp][0]
            ts.save()

    def num_partitions(self, topic: str) -> int:
        """Partition count of ``topic`` (auto-created by the broker when missing), cached per task."""
        n = self._num_partitions.get(topic)
        if n is None:
            n = topic_partitions(self._client, topic)
            self._num_partitions[topic] = n
        return n

    def write(self, batch: pa.RecordBatch) -> None:
        """Partition one Arrow batch into the accumulator; send what is due; wait while above buffer.memory."""
        if batch.num_rows == 0:
            return
        if not self._identified:  # lazily: an empty task never asks for a producer id
            self._init_identity(self._identity)
            self._identified = True
        self._accumulator.append(batch)
        self._accumulator.seal_due()
        self._sender.pump(block=False)
        while self._accumulator.held_bytes > self._opts.buffer_memory:
            if not self._sender.pump(block=True, seal_all=True):
                break

    def flush(self) -> None:
        """Seal everything, send everything and wait until every batch is acknowledged (or fail).

        Transactional: a task that had no rows still initializes its transactional id here, which fences an
        earlier holder of the id and aborts the transaction it left open (a crashed attempt, or a crashed run
        of a streaming query), instead of leaving that transaction to hold the last stable offset of its
        partitions until kafka.transaction.timeout.ms. It then reports no transaction (nothing to commit).
        """
        if self.transactional_id is not None and not self._identified:
            self._init_identity(self._identity)
            self._identified = True
        self._accumulator.seal_all()
        while self._sender.outstanding():
            self._sender.pump(block=True)
        if self.in_transaction:
            self._check_still_owner()

    def _check_still_owner(self) -> None:
        """Transactional, after the last acknowledgement: fail if a later attempt already took the id.

        A later attempt of the same Spark partition -- typically a task of a re-attempted stage started while
        this attempt of the old stage attempt still runs (a "zombie") -- fenced this attempt and aborted its
        transaction with its InitProducerId. Were this attempt to succeed now, Spark's commit coordinator could
        keep its result (the first to finish wins) and the driver could only fail the job (PRODUCER_FENCED). So
        it fails instead, and Spark keeps the later attempt's. AddPartitionsToTxn of the partitions the
        transaction already holds is a no-op while it is open at this epoch. A fence after this check is
        still caught by the driver's check, which then fails the write with nothing committed.
        """
        assert self.transactional_id is not None
        try:
            self._client.transactions.add_partitions_to_txn(
                self.transactional_id, self.producer_id, self.producer_epoch, self._txn_partitions
            )
        except KafkaError as exc:
            if exc.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
                raise ProduceFailedError(
                    f"transactional id {self.transactional_id!r}: this attempt was fenced after it wrote "
                    f"everything ({exc}): a later attempt of the same Spark partition took the id (or the "
                    f"broker aborted the transaction after kafka.transaction.timeout.ms="
                    f"{self._opts.transaction_timeout_ms}); its rows are aborted and the later attempt's count"
                ) from exc
            raise ProduceFailedError(
                f"transactional id {self.transactional_id!r}: checking the transaction after the last "
                f"acknowledgement failed: {exc}"
            ) from exc

    def abort_transaction(self) -> None:
        """After a failure: await the requests already sent, then abort this task's transaction (best effort).

        The abort is an InitProducerId of the transactional id, not EndTxn(abort): the coordinator bumps the
        epoch and writes the ABORT markers at the bumped epoch, so a request of this attempt that the broker
        has not appended yet (unanswered after request.timeout.ms, still in a socket buffer) is refused
        with INVALID_PRODUCER_EPOCH when it lands after the marker. With EndTxn(abort) at the same epoch it
        would be appended after the marker and open a transaction the coordinator knows nothing about --
        Kafka's "hanging transaction" (KIP-890), holding the partition's last stable offset for good.
        A coordinator that refuses (fenced by a later attempt: that attempt aborted it already) or cannot be
        reached is logged; the broker aborts an open transaction at kafka.transaction.timeout.ms anyway.
        """
        tid = self.transactional_id
        if tid is None or not self.in_transaction:
            return
        try:
            self._sender.settle()
            # Naming this attempt's producer id and epoch (InitProducerId v3+, KIP-360): when a later attempt
            # already took the id, this is PRODUCER_FENCED instead of fencing that attempt in turn.
            self._client.transactions.init_producer_id(
                tid, self._opts.transaction_timeout_ms, self.producer_id, self.producer_epoch
            )
        except (PylogError, OSError) as exc:
            log.warning(
                "pylog producer: the failed task could not abort its transaction %r (%s); a later attempt "
                "of the Spark partition fences it, else the broker aborts it after kafka.transaction.timeout.ms=%d",
                tid,
                exc,
                self._opts.transaction_timeout_ms,
            )
            return
        log.warning("pylog producer: the failed task aborted its transaction %r", tid)

    def close(self) -> None:
        """Release the connections and the partition's state lock (also after a failure).

        After a failure, requests already sent are awaited first (up to request.timeout.ms each, answers
        ignored): the lock is released only once the broker answered everything this attempt sent, so a
        re-run's resume scan sees every record this attempt will ever write (see :meth:`Sender.settle`).
        """
        try:
            if self._task_state is not None:
                self._sender.settle()
        finally:
            try:
                self._client.close()
            finally:
                if self._task_state is not None:
                    self._task_state.release()
