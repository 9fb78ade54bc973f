"""The per-task producer: Arrow batches in, acknowledged Kafka record batches out.

Where this runs: on the **executors**, one :class:`TaskProducer` per write task (batch or micro-batch),
created in ``write()``, fed every Arrow batch of the task, flushed and closed before ``write()`` returns
its commit message. Single-threaded; not thread-safe.

It composes three parts and owns the producer identity:

* :class:`~spark_kafka_log.accumulator.RecordAccumulator` -- partitions the rows and seals record batches
  (batch.size, linger.ms, sequence numbers, resume after a failed attempt);
* :class:`~spark_kafka_log.sender.Sender` -- sends sealed batches to the leaders and tracks them until
  acknowledged (pipelining, retries, deadlines);
* the identity -- producer id and epoch: with idempotence, one InitProducerId per Spark partition of a write,
  kept in :mod:`spark_kafka_log.task_state`: any later attempt of the same partition (task retry, stage
  retry whose attempt numbers restart at 0, speculation) finds it there and resumes it (then the accumulator
  skips what earlier attempts wrote). The attempt holds the partition's state lock from its first record
  until :meth:`TaskProducer.close`, which first awaits the answers of requests already sent. A transactional producer would obtain its identity here too (InitProducerId with a
  transactional id, fencing earlier attempts) and hand it to a transactional sender.

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

import pyarrow as pa

from broker_runtime.protocol.messages import LATEST_TIMESTAMP
from spark_kafka_log.accumulator import RecordAccumulator, TopicPartition
from spark_kafka_log.commit_summary import PartitionStats
from spark_kafka_log.connections import topic_partitions, writer_client
from spark_kafka_log.fault_injection import TaskFaults
from spark_kafka_log.options import WriterOptions
from spark_kafka_log.partitioner import Partitioner
from spark_kafka_log.schema import InputLayout
from spark_kafka_log.sender import Sender
from spark_kafka_log.task_state import TaskIdentity, TaskState, last_sequences

__all__ = ["TaskProducer"]

log = logging.getLogger(__name__)


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
    ) -> None:
        self._opts = options
        self._client = writer_client(
            bootstrap_servers,
            client_id=options.client_id,
            request_timeout_ms=options.request_timeout_ms,
            retry_backoff_ms=options.retry_backoff_ms,
            retry_timeout_ms=options.delivery_timeout_ms,
        )
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
        self._sender = Sender(self._client, options, self._accumulator, faults)
        self.producer_id = -1
        self.producer_epoch = -1
        self._task_state: TaskState | None = None
        self._identity = identity
        self._identified = not options.enable_idempotence

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
        """
        if identity is None:
            self.producer_id, self.producer_epoch = self._client.init_producer_id()
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
            self.producer_id, self.producer_epoch = self._client.init_producer_id()
            state.producer_id, state.producer_epoch = self.producer_id, self.producer_epoch
            state.start_offsets = {}
            state.save()
        self._accumulator.set_producer(self.producer_id, self.producer_epoch, resume)

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
        """Seal everything, send everything and wait until every batch is acknowledged (or fail)."""
        self._accumulator.seal_all()
        while self._sender.outstanding():
            self._sender.pump(block=True)

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
