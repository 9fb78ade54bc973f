"""The producer's record accumulator: Arrow rows in, sealed Kafka record batches (with sequences) out.

Runs on: executors (task).

Where this runs: on the **executors**, one :class:`RecordAccumulator` per write task, owned by its
:class:`~spark_kafka_log.write.producer.TaskProducer`; single-threaded, not thread-safe. The
:class:`~spark_kafka_log.write.sender.Sender` takes sealed batches from the partitions' ``ready`` queues.

Data path per incoming ``pyarrow.RecordBatch`` (never a Python loop per row)::

    topic column -> dictionary-encode (one loop per DISTINCT topic); a null topic fails the task
    partitions   -> murmur2 of the key column (numpy), explicit partition column, sticky null keys
    group rows   -> one stable argsort by (topic, partition); one ``take`` in that order, zero-copy
                    slices per group
    accumulate   -> per (topic, partition) list of Arrow slices; sealed once >= batch.size bytes
                    (or older than linger.ms) into magic-2 RecordBatches of <= batch.size bytes before
                    compression by :func:`broker_runtime.protocol.record_codec.encode.build_batches`
                    (vectorized encode, compression, CRC-32C), stamped with producer id/epoch and
                    per-partition sequences; the partitions due at one moment are encoded in ONE call (row
                    groups), since the builder's cost is mostly per call (a 4-partition write cost ~1.5x the
                    CPU per row of a 1-partition one when each partition was encoded on its own)
    fit          -> a batch that compression made LARGER than kafka.max.request.size (incompressible rows:
                    lz4 adds 4 bytes per 64 KiB block and its frame, so a batch of batch.size = 1 MiB of
                    random bytes comes out ~70 bytes above the 1 MiB request bound) is encoded again as
                    two halves, recursively, before the batches are sealed; only a single record above
                    the bound fails the task (Kafka's producer ends the same way: it sends such a batch,
                    the broker answers MESSAGE_TOO_LARGE above message.max.bytes and the producer splits
                    the batch)

Invariants:

* sequences are assigned when a batch is sealed and never change (a resend reuses the sealed bytes);
  per partition they count records from 0 for the producer id, wrapping at 2^31 - 1;
* resume after a failed attempt (:meth:`RecordAccumulator.set_producer` with the attempt's ``Resume`` per
  partition): the first ``last_sequence + 1`` records of a partition are skipped (counted as ``recovered``),
  and the record at ``last_sequence`` must equal the one in the log, else the task fails (non-deterministic
  input);
* memory: :attr:`RecordAccumulator.held_bytes` counts unsealed slices (approximate record sizes) plus sealed
  batches not yet acknowledged (their encoded size); the sender releases a batch's bytes when it is
  acknowledged. The task producer stops reading input while it is above ``buffer.memory``. The batches of one
  encoding call are views of one buffer from Arrow's memory pool (``build_batches(in_place=True)``: no fresh
  pages per batch, see there), freed only with the last of them: such batches share a :class:`_Pin`, and their
  bytes (the whole buffer) leave ``held_bytes`` when the last of them is acknowledged, so one partition that
  cannot be sent keeps counting every buffer its batches hold alive (as Kafka's producer counts each batch's
  pooled buffer until it is deallocated).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_runtime.errors import InputDataError, ProduceFailedError
from broker_runtime.protocol.record_codec.encode import BuiltBatch, build_batches
from broker_runtime.protocol.record_codec.walks import record_walk
from broker_runtime.protocol.topic_partition import TopicPartition
from spark_kafka_log.common.commit_summary import PartitionStats
from spark_kafka_log.common.schema import InputLayout
from spark_kafka_log.common.writer_options import WriterOptions
from spark_kafka_log.write.partitioner import Partitioner, group_rows
from spark_kafka_log.write.task_state import Resume

__all__ = ["PartitionQueue", "RecordAccumulator", "SealedBatch"]


_INT32_MAX = 2**31 - 1


@dataclass
class _Pin:
    """The buffer that several sealed batches are views of: its size, and how many of them are not yet
    acknowledged (module docstring, memory)."""

    nbytes: int
    alive: int = 0


@dataclass
class SealedBatch:
    """A sealed record batch on its way to the broker (bytes and sequence fixed)."""

    topic: str
    partition: int
    #: The batch's bytes; a view of the buffer its encoding call shares with the other batches of that call.
    data: bytes | memoryview
    count: int
    base_sequence: int
    sealed_at: float
    attempts: int = 0
    #: Why the last attempt failed (named when the delivery timeout runs out).
    last_error: str | None = None
    #: The buffer ``data`` is a view of, shared with other batches (None: ``data`` owns its bytes).
    pin: _Pin | None = field(default=None, repr=False, compare=False)


@dataclass
class PartitionQueue:
    """One topic partition of the task: rows not sealed yet, and sealed batches waiting for the sender."""

    topic: str
    partition: int
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_bytes: int = 0
    pending_since: float = 0.0
    next_sequence: int = 0
    ready: deque[SealedBatch] = field(default_factory=deque)


log = logging.getLogger("spark_kafka_log.accumulator")

#: Whether this process has already said which record encoder its write tasks run (once per executor process).
_encoder_named = False


def _name_encoder() -> None:
    """Log once per process which encoder the write tasks run: a WARNING when it is the numpy fallback."""
    global _encoder_named
    if _encoder_named:
        return
    _encoder_named = True
    path, why = record_walk()
    if path == "compiled":
        log.info("pylog writer tasks encode records with the compiled encoder (_recordwalk.encode)")
    else:
        log.warning(
            "pylog writer tasks encode records with the numpy encoder, not the compiled one: %s. A write "
            "task then costs about 2x the CPU per row (README, Install)",
            why,
        )


class RecordAccumulator:
    """Partitions a task's Arrow batches and seals them into record batches (see the module docstring)."""

    def __init__(
        self,
        options: WriterOptions,
        layout: InputLayout,
        partitioner: Partitioner,
        *,
        partition_count: Callable[[str], int],
        before_first_record: Callable[[TopicPartition], None],
    ) -> None:
        """``partition_count(topic)`` answers how many partitions a topic has; ``before_first_record(tp)`` is
        called once per partition before any of its rows is accepted (the task state records it there)."""
        _name_encoder()
        self._opts = options
        self._layout = layout
        self._partitioner = partitioner
        self._partition_count = partition_count
        self._before_first_record = before_first_record
        self._queues: dict[TopicPartition, PartitionQueue] = {}
        self._topics: set[str] = set()
        self._producer_id = -1
        self._producer_epoch = -1
        self._transactional = False
        self._resume: dict[TopicPartition, Resume] = {}
        self.held_bytes = 0
        self.stats: dict[TopicPartition, PartitionStats] = {}

    def set_producer(
        self,
        producer_id: int,
        producer_epoch: int,
        resume: dict[TopicPartition, Resume],
        *,
        transactional: bool = False,
    ) -> None:
        """The producer identity stamped on every batch sealed from now on (with the transactional attribute bit
        when ``transactional``), and where an earlier attempt stopped."""
        self._producer_id, self._producer_epoch, self._resume = producer_id, producer_epoch, dict(resume)
        self._transactional = transactional

    def queues(self) -> Iterable[PartitionQueue]:
        return self._queues.values()

    def queue(self, tp: TopicPartition) -> PartitionQueue:
        return self._queues[tp]

    def topics(self) -> list[str]:
        """Every topic this task has written to so far."""
        return sorted(self._topics)

    def has_pending(self) -> bool:
        return any(q.pending or q.ready for q in self._queues.values())

    def release(self, batch: SealedBatch) -> None:
        """The sender delivered ``batch``: its bytes no longer count against buffer.memory, or, for a view of a
        buffer shared with other batches, once the last of them is delivered."""
        pin = batch.pin
        if pin is None:
            self.held_bytes -= len(batch.data)
            return
        pin.alive -= 1
        if pin.alive == 0:
            self.held_bytes -= pin.nbytes

    # ------------------------------------------------------------------------------------------ input

    def append(self, batch: pa.RecordBatch) -> None:
        """Partition one Arrow batch and add its rows to the partitions' pending slices."""
        n = batch.num_rows
        if n == 0:
            return
        lay = self._layout
        names = batch.schema.names
        data_cols = {"value": batch.column(names.index(lay.value))}
        if lay.key is not None:
            data_cols["key"] = batch.column(names.index(lay.key))
        if lay.headers is not None:
            data_cols["headers"] = batch.column(names.index(lay.headers))
        if lay.timestamp is not None:
            ts = batch.column(names.index(lay.timestamp))
            if not pa.types.is_null(ts.type):  # an all-null column typed NULL: the write time
                data_cols["timestamp"] = ts
        data = pa.RecordBatch.from_pydict(data_cols)
        keys = data_cols.get("key")
        explicit = batch.column(names.index(lay.partition)) if lay.partition is not None else None

        if lay.topic is None:
            assert self._opts.topic is not None
            topics = [self._opts.topic]
            topic_index: np.ndarray | None = None
            parts = self._assign(self._opts.topic, data, keys, explicit)
        else:
            topic_col = batch.column(names.index(lay.topic))
            if topic_col.null_count:
                raise InputDataError(
                    f"null topic present in the data: {topic_col.null_count} row(s) have a null 'topic' column; "
                    "use the topic option for setting a topic, or fill the column"
                )
            encoded = pc.dictionary_encode(topic_col)
            topics = [str(t) for t in encoded.dictionary.to_pylist()]
            topic_index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)
            if len(topics) == 1:
                parts = self._assign(topics[0], data, keys, explicit)
            else:
                parts = np.empty(n, dtype=np.int32)
                for i, topic in enumerate(topics):
                    rows = np.flatnonzero(topic_index == i)
                    sel = pa.array(rows)
                    parts[rows] = self._assign(
                        topic,
                        data.take(sel),
                        keys.take(sel) if keys is not None else None,
                        explicit.take(sel) if explicit is not None else None,
                    )
        sizes = _row_sizes(data)
        groups = group_rows(parts, topic_index)
        due: list[PartitionQueue] = []
        if len(groups) == 1:
            group = groups[0]
            self._add(topics[group.topic_index], group.partition, data, int(sizes.sum()), due)
        else:
            # One take in group order, then zero-copy slices (one gather instead of one per partition).
            order = np.concatenate([g.indices for g in groups])
            ordered = data.take(pa.array(order))
            lengths = [len(g.indices) for g in groups]
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            group_bytes = np.add.reduceat(sizes[order], starts)
            for group, start, length, size in zip(
                groups, starts.tolist(), lengths, group_bytes.tolist(), strict=True
            ):
                self._add(
                    topics[group.topic_index], group.partition, ordered.slice(start, length), int(size), due
                )
        self._seal_many(due)

    def _assign(
        self, topic: str, data: pa.RecordBatch, keys: pa.Array | None, explicit: pa.Array | None
    ) -> np.ndarray:
        self._topics.add(topic)
        n_parts = self._partition_count(topic)
        needs_sizes = keys is None or keys.null_count > 0 or pa.types.is_null(keys.type)
        sizes = _row_sizes(data) if needs_sizes else np.zeros(data.num_rows, dtype=np.int64)
        return self._partitioner.assign(topic, n_parts, keys, explicit, sizes)

    def _add(
        self, topic: str, partition: int, rows: pa.RecordBatch, size: int, due: list[PartitionQueue]
    ) -> None:
        """Queue ``rows`` for the partition; it joins ``due`` once it holds at least batch.size bytes."""
        tp = (topic, partition)
        q = self._queues.get(tp)
        if q is None:
            self._before_first_record(tp)
            q = self._queues[tp] = PartitionQueue(topic, partition)
            self.stats[tp] = PartitionStats(topic, partition)
        if not q.pending:
            q.pending_since = time.monotonic()
        q.pending.append(rows)
        q.pending_bytes += size
        self.held_bytes += size
        if q.pending_bytes >= self._opts.batch_size and all(d is not q for d in due):
            due.append(q)

    # -------------------------------------------------------------------------------------- sealing

    def seal_due(self) -> None:
        """Seal the partitions whose oldest pending rows waited linger.ms (all of them with linger.ms=0)."""
        if self._opts.linger_ms <= 0:
            self.seal_all()
            return
        horizon = time.monotonic() - self._opts.linger_ms / 1000.0
        self._seal_many([q for q in self._queues.values() if q.pending and q.pending_since <= horizon])

    def seal_all(self) -> None:
        self._seal_many([q for q in self._queues.values() if q.pending])

    def _take_pending(self, q: PartitionQueue) -> tuple[pa.Table | None, int]:
        """The partition's pending rows, less those an earlier attempt already wrote; (rows or None, bytes held)."""
        table = pa.Table.from_batches(q.pending)
        held = q.pending_bytes
        q.pending = []
        q.pending_bytes = 0
        resume = self._resume.get((q.topic, q.partition))
        skip = 0 if resume is None else resume.last_sequence + 1 - q.next_sequence
        if skip > 0 and resume is not None:
            # An earlier attempt of this task already wrote these records (same rows, same order).
            n_skip = min(skip, table.num_rows)
            if n_skip == skip:
                _check_resume_point(q, resume, table, n_skip - 1)
            table = table.slice(n_skip)
            q.next_sequence += n_skip
            self.stats[(q.topic, q.partition)].recovered += n_skip
            if table.num_rows == 0:
                self.held_bytes -= held
                return None, held
        return table, held

    def _seal_many(self, queues: list[PartitionQueue]) -> None:
        """Seal the pending rows of ``queues``: those of one schema are encoded in one pass (row groups)."""
        taken = [(q, *self._take_pending(q)) for q in queues if q.pending]
        by_schema: dict[pa.Schema, list[tuple[PartitionQueue, pa.Table, int]]] = {}
        for q, table, held in taken:
            if table is not None:
                by_schema.setdefault(table.schema, []).append((q, table, held))
        for parts in by_schema.values():
            self._encode(parts)

    def _build(
        self,
        table: pa.Table,
        max_batch_bytes: int,
        base_sequence: int | list[int],
        group_starts: list[int] | None,
        now_ms: int,
    ) -> list[BuiltBatch]:
        return build_batches(
            table.column("value"),
            table.column("key") if "key" in table.column_names else None,
            table.column("headers") if "headers" in table.column_names else None,
            table.column("timestamp") if "timestamp" in table.column_names else None,
            compression=self._opts.compression,
            max_batch_bytes=max_batch_bytes,
            timestamp_ms=now_ms,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=base_sequence,
            is_transactional=self._transactional,
            group_starts=group_starts,
            in_place=True,
        )

    def _fit(self, built: list[BuiltBatch], table: pa.Table, now_ms: int) -> list[BuiltBatch]:
        """``built`` with every batch of several records that is larger than max.request.size encoded again
        in two halves (recursively): the same records and sequences, in the same order (module docstring)."""
        limit = self._opts.max_request_size
        if all(len(b.data) <= limit or b.record_count == 1 for b in built):
            return built
        out: list[BuiltBatch] = []
        for b in built:
            if len(b.data) <= limit or b.record_count == 1:
                out.append(b)
                continue
            rows = table.slice(b.first_row, b.record_count)
            halves = self._build(rows, max(1, b.uncompressed_size // 2), b.base_sequence, None, now_ms)
            out.extend(
                dataclasses.replace(h, first_row=b.first_row + h.first_row, group=b.group)
                for h in self._fit(halves, rows, now_ms)
            )
        return out

    def _encode(self, parts: list[tuple[PartitionQueue, pa.Table, int]]) -> None:
        idempotent = self._opts.enable_idempotence
        table = pa.concat_tables([t for _, t, _ in parts]).combine_chunks()
        lengths = [t.num_rows for _, t, _ in parts]
        # One write time for the rows without a timestamp, also when a batch is encoded again by _fit.
        now_ms = int(time.time() * 1000)
        built = self._build(
            table,
            self._opts.batch_size,
            [q.next_sequence if idempotent else -1 for q, _, _ in parts],
            np.concatenate(([0], np.cumsum(lengths)[:-1])).tolist(),
            now_ms,
        )
        built = self._fit(built, table, now_ms)
        now = time.monotonic()
        sealed_bytes = 0
        pins: dict[int, _Pin] = {}
        for b in built:
            q = parts[b.group][0]
            if len(b.data) > self._opts.max_request_size:
                raise ProduceFailedError(
                    f"writing to topic {q.topic!r} partition {q.partition} failed: a batch of "
                    f"{b.record_count} record(s) is {len(b.data)} bytes, larger than kafka.max.request.size="
                    f"{self._opts.max_request_size} (a single record that large cannot be sent; raise the "
                    "option, and the broker's message.max.bytes, to allow it)"
                )
            pin = None
            if isinstance(
                b.data, memoryview
            ):  # a view of the call's buffer: counted whole (module docstring)
                pin = pins.get(id(b.data.obj))
                if pin is None:
                    pin = pins[id(b.data.obj)] = _Pin(memoryview(b.data.obj).nbytes)
                    sealed_bytes += pin.nbytes
                pin.alive += 1
            else:
                sealed_bytes += len(b.data)
            q.ready.append(
                SealedBatch(q.topic, q.partition, b.data, b.record_count, b.base_sequence, now, pin=pin)
            )
            if idempotent:
                q.next_sequence = (q.next_sequence + b.record_count) & _INT32_MAX
        # Sealed batches are accounted by their encoded size from now on.
        self.held_bytes += sealed_bytes - sum(held for _, _, held in parts)


def _row_sizes(data: pa.RecordBatch) -> np.ndarray:
    """Approximate encoded record sizes (value + key + a fixed overhead) for buffer accounting."""
    sizes = np.full(data.num_rows, 12, dtype=np.int64)
    for name in ("value", "key"):
        if name in data.schema.names:
            col = data.column(data.schema.names.index(name))
            if not pa.types.is_null(col.type):
                sizes += pc.binary_length(col).fill_null(0).to_numpy(zero_copy_only=False)
    return sizes


def _check_resume_point(q: PartitionQueue, resume: Resume, table: pa.Table, row: int) -> None:
    """The retry's record at the earlier attempt's last sequence must be the record in the log."""

    def as_bytes(name: str) -> bytes | None:
        if name not in table.column_names:
            return None
        v = table.column(name)[row].as_py()
        return v.encode() if isinstance(v, str) else v

    if (as_bytes("key"), as_bytes("value")) != (resume.last_key, resume.last_value):
        raise ProduceFailedError(
            f"cannot resume writing to topic {q.topic!r} partition {q.partition}: the record at sequence "
            f"{resume.last_sequence} differs from the one the failed attempt wrote there, so this task's "
            "input is not deterministic (e.g. an unordered shuffle or rand()); make the plan deterministic "
            "(sort within partitions, checkpoint) or write with kafka.enable.idempotence=false (at-least-once)"
        )
