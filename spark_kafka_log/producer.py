"""The per-task vectorized producer: Arrow batches in, acknowledged Kafka record batches out.

Where this runs: on the **executors**, one :class:`TaskProducer` per write task (batch or micro-batch),
created in ``write()``, fed every Arrow batch of the task, flushed and closed before ``write()`` returns
its commit message. Single-threaded; not thread-safe.

Data path per incoming ``pyarrow.RecordBatch`` (never a Python loop per row)::

    topic column -> dictionary-encode (one loop per DISTINCT topic)
    partitions   -> murmur2 of the key column (numpy), explicit partition column, sticky null keys
    group rows   -> one stable argsort by (topic, partition); one ``take`` per group
    accumulate   -> per (topic, partition) list of Arrow slices; sealed once >= batch.size bytes
                    (or older than linger.ms) into magic-2 RecordBatches of <= batch.size bytes by
                    :func:`broker_runtime.protocol.arrow_records.build_batches` (vectorized encode,
                    compression, CRC-32C), stamped with producer id/epoch and per-partition sequences
    drain        -> per leader: ProduceRequests of at most one batch per partition (Produce v3+ rule)
                    and at most max.request.size bytes; up to max.in.flight requests pipelined per broker
    responses    -> per partition: offsets recorded, retriable errors requeued in sequence order after
                    retry.backoff.ms, anything else fails the task naming topic, partition and error

Wire: one :class:`broker_runtime.client.KafkaClient` per task (lazy connections, one per broker; versions
negotiated with ApiVersions). Produce requests go out through its non-retrying ``send_produce`` /
``poll_produce`` so that the retry policy below stays here; ListOffsets (start offsets for task retries) and
Metadata share those connections and simply read past the produce answers ahead of them.

Memory: the bytes held (unsealed slices + sealed batches not yet acknowledged) stay below buffer.memory:
when they would exceed it, the producer sends and waits for acknowledgements before taking more input.
The only extra is the Arrow batch being partitioned (Spark's ``arrow.maxRecordsPerBatch`` rows).

Idempotence (default on, needs acks=all): one InitProducerId per task; each batch carries the producer id,
epoch and the partition's next sequence number, so a request resent after a lost response or a broken
connection is recognised by the broker as a duplicate and not written twice. Sequences are assigned when a
batch is sealed and never change on resend; resends go out in sequence order, after every earlier in-flight
request of that partition has been answered.

Delivery bound: a batch not acknowledged within delivery.timeout.ms of being sealed, or after ``retries``
resends, fails the task with the last error. Nothing is dropped silently: the task succeeds only when
every sealed batch was acknowledged (acks=0: written to the socket).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_runtime.client import BrokerConnectionError, InFlight, KafkaClient, ProduceResult
from broker_runtime.errors import ConfigError, ErrorCode, KafkaError, ProtocolError, PylogError
from broker_runtime.protocol.arrow_records import build_batches
from spark_kafka_log.options import WriterOptions
from spark_kafka_log.partitioner import Partitioner, group_rows
from spark_kafka_log.schema import InputLayout
from spark_kafka_log.task_state import Resume, TaskIdentity, TaskState, last_sequences

__all__ = [
    "PartitionStats",
    "ProduceFailedError",
    "TaskProducer",
    "check_topic",
    "connect",
    "topic_partitions",
]

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_METADATA = 3
#: Metadata v4+ carries AllowAutoTopicCreation: without it a broker would decide by itself.
_MIN_VERSIONS = {_METADATA: 4}
_LATEST = -1


def connect(
    bootstrap_servers: str, *, client_id: str, request_timeout_ms: int, retry_backoff_ms: int = 100
) -> KafkaClient:
    """The writer's Kafka client (driver or executor; lazy, connects on first use)."""
    return KafkaClient(
        bootstrap_servers,
        client_id=client_id,
        request_timeout_ms=request_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
        min_versions=_MIN_VERSIONS,
    )


def topic_partitions(client: KafkaClient, topic: str) -> int:
    """Partitions of ``topic``, asking the broker to auto-create it (with its num.partitions)."""
    try:
        return len(client.partitions_for(topic, allow_auto_create=True))
    except BrokerConnectionError:
        raise
    except KafkaError as exc:
        raise KafkaError(
            exc.code,
            f"topic {topic!r} is not available for writing (auto-creation disabled on the broker? "
            "create it first)",
        ) from exc


def check_topic(servers: str, topic: str, request_timeout_ms: int = 30000) -> int:
    """Driver-side check: the broker answers and ``topic`` exists (auto-created if allowed); its partitions."""
    with connect(servers, client_id="pylog-writer-driver", request_timeout_ms=request_timeout_ms) as client:
        return topic_partitions(client, topic)


def _transient(exc: Exception) -> bool:
    """A failure that a resend may cure: the connection, undecodable bytes, a leader or broker moving."""
    if isinstance(exc, BrokerConnectionError | ProtocolError):
        return True
    return isinstance(exc, KafkaError) and (exc.retriable or exc.code == ErrorCode.BROKER_NOT_AVAILABLE)


class ProduceFailedError(PylogError):
    """A write task could not deliver its records; the message names topic, partition and the error."""


@dataclass
class PartitionStats:
    """What one task wrote to one topic partition (carried to the driver in the commit message)."""

    topic: str
    partition: int
    records: int = 0
    bytes: int = 0
    first_offset: int = -1
    last_offset: int = -1
    #: Records a failed earlier attempt of the task had already written here (skipped by this attempt).
    recovered: int = 0

    def add(self, base_offset: int, count: int, size: int) -> None:
        self.records += count
        self.bytes += size
        if base_offset >= 0:
            if self.first_offset < 0 or base_offset < self.first_offset:
                self.first_offset = base_offset
            self.last_offset = max(self.last_offset, base_offset + count - 1)


@dataclass
class _Batch:
    """A sealed record batch on its way to the broker."""

    topic: str
    partition: int
    data: bytes
    count: int
    base_sequence: int
    sealed_at: float
    attempts: int = 0


@dataclass
class _PartitionState:
    topic: str
    partition: int
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_bytes: int = 0
    pending_since: float = 0.0
    ready: deque[_Batch] = field(default_factory=deque)
    in_flight: int = 0
    retry: list[_Batch] = field(default_factory=list)
    blocked_until: float = 0.0
    next_sequence: int = 0


@dataclass
class _InFlight:
    node: int
    batches: dict[tuple[str, int], _Batch]
    handle: InFlight | None
    sent_at: float


class TaskProducer:
    """Partitions, batches and sends the Arrow batches of one write task (see the module docstring)."""

    def __init__(
        self,
        options: WriterOptions,
        bootstrap_servers: str,
        layout: InputLayout,
        *,
        identity: TaskIdentity | None = None,
        on_acknowledged: Callable[[int], None] | None = None,
    ) -> None:
        self._opts = options
        self._layout = layout
        self._on_ack = on_acknowledged
        self._client = connect(
            bootstrap_servers,
            client_id=options.client_id,
            request_timeout_ms=options.request_timeout_ms,
            retry_backoff_ms=options.retry_backoff_ms,
        )
        # Seeded per task, not per attempt: a retry places null-key rows where the failed attempt did.
        self._partitioner = Partitioner(
            options.batch_size, seed=None if identity is None else f"{identity.write_id}/{identity.task}"
        )
        self._parts: dict[tuple[str, int], _PartitionState] = {}
        self._num_partitions: dict[str, int] = {}
        self._in_flight: dict[int, deque[_InFlight]] = {}
        self._held_bytes = 0
        self.stats: dict[tuple[str, int], PartitionStats] = {}
        self.requests_acknowledged = 0
        self._drop_armed = options.drop_response_after_requests is not None
        self.producer_id = -1
        self.producer_epoch = -1
        #: Per partition: where an earlier attempt of this task stopped (its records are skipped).
        self._resume: dict[tuple[str, int], Resume] = {}
        self._task_state: TaskState | None = None
        self._identity = identity
        self._identified = not options.enable_idempotence

    def _init_identity(self, identity: TaskIdentity | None) -> None:
        """Producer id/epoch: an earlier attempt's (then skip what it wrote), else a fresh one."""
        if identity is None or not self._opts.producer_state_dir:
            self.producer_id, self.producer_epoch = self._client.init_producer_id()
            return
        state = TaskState.for_task(self._opts.producer_state_dir, identity)
        if identity.attempt > 0 and state.load():
            self.producer_id, self.producer_epoch = state.producer_id, state.producer_epoch
            self._resume = last_sequences(self._client, state)
            log.warning(
                "pylog producer: task %d attempt %d resumes producer id %d epoch %d; records already "
                "written by earlier attempts per partition: %s",
                identity.task,
                identity.attempt,
                self.producer_id,
                self.producer_epoch,
                {f"{t}-{p}": r.last_sequence + 1 for (t, p), r in self._resume.items()},
            )
        else:
            self.producer_id, self.producer_epoch = self._client.init_producer_id()
            state.producer_id, state.producer_epoch = self.producer_id, self.producer_epoch
            state.start_offsets = {}
            state.save()
        self._task_state = state

    # ------------------------------------------------------------------------------------------ input

    def num_partitions(self, topic: str) -> int:
        """Partition count of ``topic`` (auto-created by the broker when missing), cached per task."""
        n = self._num_partitions.get(topic)
        if n is None:
            n = topic_partitions(self._client, topic)
            self._num_partitions[topic] = n
        return n

    def write(self, batch: pa.RecordBatch) -> None:
        """Partition one Arrow batch and add its rows to the partitions' accumulators; may send."""
        n = batch.num_rows
        if n == 0:
            return
        if not self._identified:  # lazily: an empty task never asks for a producer id
            self._init_identity(self._identity)
            self._identified = True
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
                raise ConfigError(
                    "null topic present in the data. Use the topic option for setting a topic "
                    f"({topic_col.null_count} row(s) have a null 'topic' column)"
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
        sizes = self._row_sizes(data)
        for group in group_rows(parts, topic_index):
            rows = data if len(group.indices) == n else data.take(pa.array(group.indices))
            size = int(sizes[group.indices].sum()) if len(group.indices) != n else int(sizes.sum())
            self._append(topics[group.topic_index], group.partition, rows, size)
        self._seal_due()
        self._pump(block=False)
        while self._held_bytes > self._opts.buffer_memory:
            if not self._pump(block=True, seal_all=True):
                break

    def _assign(
        self, topic: str, data: pa.RecordBatch, keys: pa.Array | None, explicit: pa.Array | None
    ) -> np.ndarray:
        n_parts = self.num_partitions(topic)
        needs_sizes = keys is None or keys.null_count > 0 or pa.types.is_null(keys.type)
        sizes = self._row_sizes(data) if needs_sizes else np.zeros(data.num_rows, dtype=np.int64)
        return self._partitioner.assign(topic, n_parts, keys, explicit, sizes)

    @staticmethod
    def _row_sizes(data: pa.RecordBatch) -> np.ndarray:
        """Approximate encoded record sizes (value + key + a fixed overhead) for buffer accounting."""
        sizes = np.full(data.num_rows, 12, dtype=np.int64)
        for name in ("value", "key"):
            if name in data.schema.names:
                col = data.column(data.schema.names.index(name))
                if not pa.types.is_null(col.type):
                    sizes += pc.binary_length(col).fill_null(0).to_numpy(zero_copy_only=False)
        return sizes

    def _state(self, topic: str, partition: int) -> _PartitionState:
        tp = (topic, partition)
        st = self._parts.get(tp)
        if st is None:
            st = _PartitionState(topic, partition)
            self._parts[tp] = st
            self.stats[tp] = PartitionStats(topic, partition)
            ts = self._task_state
            if ts is not None and tp not in ts.start_offsets:
                # Before the first record goes to this partition: where a retry must look for it.
                ts.start_offsets[tp] = self._client.list_offsets({tp: _LATEST})[tp][0]
                ts.save()
        return st

    def _append(self, topic: str, partition: int, rows: pa.RecordBatch, size: int) -> None:
        st = self._state(topic, partition)
        if not st.pending:
            st.pending_since = time.monotonic()
        st.pending.append(rows)
        st.pending_bytes += size
        self._held_bytes += size
        if st.pending_bytes >= self._opts.batch_size:
            self._seal(st)

    # -------------------------------------------------------------------------------------- sealing

    def _seal(self, st: _PartitionState) -> None:
        if not st.pending:
            return
        table = pa.Table.from_batches(st.pending).combine_chunks()
        held = st.pending_bytes
        st.pending = []
        st.pending_bytes = 0
        idempotent = self._opts.enable_idempotence
        resume = self._resume.get((st.topic, st.partition))
        skip = 0 if resume is None else resume.last_sequence + 1 - st.next_sequence
        if skip > 0 and resume is not None:
            # An earlier attempt of this task already wrote these records (same rows, same order).
            n_skip = min(skip, table.num_rows)
            if n_skip == skip:
                self._check_resume_point(st, resume, table, n_skip - 1)
            table = table.slice(n_skip)
            st.next_sequence += n_skip
            self.stats[(st.topic, st.partition)].recovered += n_skip
            if table.num_rows == 0:
                self._held_bytes -= held
                return
        built = build_batches(
            table.column("value"),
            table.column("key") if "key" in table.column_names else None,
            table.column("headers") if "headers" in table.column_names else None,
            table.column("timestamp") if "timestamp" in table.column_names else None,
            compression=self._opts.compression,
            max_batch_bytes=self._opts.batch_size,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=st.next_sequence if idempotent else -1,
        )
        now = time.monotonic()
        sealed_bytes = 0
        for b in built:
            if len(b.data) > self._opts.max_request_size:
                raise ProduceFailedError(
                    f"writing to topic {st.topic!r} partition {st.partition} failed: a batch of "
                    f"{b.record_count} record(s) is {len(b.data)} bytes, larger than kafka.max.request.size="
                    f"{self._opts.max_request_size} (a single record that large cannot be sent; raise the "
                    "option, and the broker's message.max.bytes, to allow it)"
                )
            st.ready.append(_Batch(st.topic, st.partition, b.data, b.record_count, b.base_sequence, now))
            sealed_bytes += len(b.data)
            if idempotent:
                st.next_sequence = (st.next_sequence + b.record_count) & _INT32_MAX
        # Sealed batches are accounted by their encoded size from now on.
        self._held_bytes += sealed_bytes - held

    @staticmethod
    def _check_resume_point(st: _PartitionState, resume: Resume, table: pa.Table, row: int) -> None:
        """The retry's record at the earlier attempt's last sequence must be the record in the log."""

        def as_bytes(name: str) -> bytes | None:
            if name not in table.column_names:
                return None
            v = table.column(name)[row].as_py()
            return v.encode() if isinstance(v, str) else v

        if (as_bytes("key"), as_bytes("value")) != (resume.last_key, resume.last_value):
            raise ProduceFailedError(
                f"cannot resume writing to topic {st.topic!r} partition {st.partition}: the record at sequence "
                f"{resume.last_sequence} differs from the one the failed attempt wrote there, so this task's "
                "input is not deterministic (e.g. an unordered shuffle or rand()); make the plan deterministic "
                "(sort within partitions, checkpoint) or write with kafka.enable.idempotence=false (at-least-once)"
            )

    def _seal_due(self) -> None:
        if self._opts.linger_ms <= 0:
            for st in self._parts.values():
                self._seal(st)
            return
        horizon = time.monotonic() - self._opts.linger_ms / 1000.0
        for st in self._parts.values():
            if st.pending and st.pending_since <= horizon:
                self._seal(st)

    # -------------------------------------------------------------------------------------- sending

    def _pump(self, block: bool, seal_all: bool = False) -> bool:
        """Send what may be sent; with ``block`` also wait for at least one response. True if progress."""
        if seal_all:
            for st in self._parts.values():
                self._seal(st)
        progress = self._send_ready()
        if block:
            node = self._oldest_node()
            if node is not None:
                self._receive_one(node)
                progress = True
            elif not progress:
                # Nothing in flight and nothing sendable: partitions are backing off.
                wake = min((st.blocked_until for st in self._parts.values() if st.ready), default=None)
                if wake is not None:
                    time.sleep(max(0.0, wake - time.monotonic()))
                    progress = True
        return progress

    def _oldest_node(self) -> int | None:
        best: tuple[float, int] | None = None
        for node, q in self._in_flight.items():
            if q and (best is None or q[0].sent_at < best[0]):
                best = (q[0].sent_at, node)
        return None if best is None else best[1]

    def _sendable(self, st: _PartitionState, now: float) -> bool:
        if not st.ready or st.blocked_until > now:
            return False
        if self._opts.enable_idempotence:
            return st.in_flight < self._opts.max_in_flight and not st.retry
        return True

    def _send_ready(self) -> bool:
        sent = False
        by_node: dict[int, list[_PartitionState]] = {}
        now = time.monotonic()
        for st in self._parts.values():
            if self._sendable(st, now):
                node = self._leader(st)
                if node is not None:
                    by_node.setdefault(node, []).append(st)
        for node, states in by_node.items():
            queue = self._in_flight.setdefault(node, deque())
            while len(queue) < self._opts.max_in_flight:
                # Re-checked every round: a failed send blocks its partitions for retry.backoff.ms.
                now = time.monotonic()
                states = [st for st in states if self._sendable(st, now)]
                if not states:
                    break
                request: dict[tuple[str, int], _Batch] = {}
                size = 0
                for st in states:
                    batch = st.ready[0]
                    if request and size + len(batch.data) > self._opts.max_request_size:
                        continue
                    self._check_deadline(batch, None)
                    st.ready.popleft()
                    request[(st.topic, st.partition)] = batch
                    size += len(batch.data) + 64
                    st.in_flight += 1
                    batch.attempts += 1
                self._send(node, request, queue)
                sent = True
        return sent

    def _leader(self, st: _PartitionState) -> int | None:
        """The partition's leader; None (partition backed off for retry.backoff.ms) while there is none."""
        try:
            return self._client.leader_for(st.topic, st.partition)
        except (KafkaError, ProtocolError) as exc:
            if not _transient(exc):
                raise ProduceFailedError(
                    f"writing to topic {st.topic!r} partition {st.partition} failed: no leader: {exc}"
                ) from exc
            self._check_deadline(st.ready[0], f"no leader: {exc}")
            st.blocked_until = time.monotonic() + self._opts.retry_backoff_ms / 1000.0
            return None

    def _send(self, node: int, request: dict[tuple[str, int], _Batch], queue: deque[_InFlight]) -> None:
        payload = {tp: b.data for tp, b in request.items()}
        try:
            handle = self._client.send_produce(
                node, payload, acks=self._opts.acks, timeout_ms=self._opts.request_timeout_ms
            )
        except (KafkaError, ProtocolError) as exc:
            if not _transient(exc):
                raise ProduceFailedError(f"writing to broker {node} failed: {exc}") from exc
            self._fail_connection(node, exc, extra=request)
            return
        entry = _InFlight(node, request, handle, time.monotonic())
        if self._opts.acks == 0:
            self._complete(entry, {tp: ProduceResult(ErrorCode.NONE, -1, -1, -1) for tp in request})
            return
        queue.append(entry)

    def _receive_one(self, node: int) -> None:
        queue = self._in_flight[node]
        if (
            self._drop_armed
            and self._opts.drop_response_after_requests is not None
            and self.requests_acknowledged >= self._opts.drop_response_after_requests
        ):
            # Test-only fault (pylog.test.dropResponseAfterRequests): lose the responses of every request
            # in flight, as a broken network would, after giving the broker time to append them.
            self._drop_armed = False
            time.sleep(0.3)
            self._client.disconnect(node)
            self._fail_connection(
                node,
                KafkaError(ErrorCode.NETWORK_EXCEPTION, "injected: responses dropped (test-only option)"),
            )
            return
        entry = queue[0]
        assert entry.handle is not None
        try:
            results = self._client.poll_produce(entry.handle)
        except (BrokerConnectionError, ProtocolError) as exc:
            self._fail_connection(node, exc)
            return
        queue.popleft()
        self._complete(entry, results or {})

    def _fail_connection(
        self, node: int, exc: Exception, extra: dict[tuple[str, int], _Batch] | None = None
    ) -> None:
        """The connection to ``node`` broke: every request in flight there is unanswered, resend them."""
        self._client.disconnect(node)
        queue = self._in_flight.get(node, deque())
        entries = list(queue)
        queue.clear()
        if extra is not None:
            entries.append(_InFlight(node, extra, None, time.monotonic()))
        log.warning(
            "pylog producer: connection to broker %s failed (%s); resending %d request(s)",
            node,
            exc,
            len(entries),
        )
        for entry in entries:
            for tp, batch in entry.batches.items():
                self._retry_later(self._parts[tp], batch, f"connection error: {exc}")
        self._refresh_metadata()

    def _refresh_metadata(self) -> None:
        """Reload the leaders of this task's topics; failures are left to the next send."""
        if self._num_partitions:
            with contextlib.suppress(KafkaError, ProtocolError):
                self._client.metadata(list(self._num_partitions))

    def _complete(self, entry: _InFlight, results: dict[tuple[str, int], ProduceResult]) -> None:
        self.requests_acknowledged += 1
        refresh = False
        for tp, batch in entry.batches.items():
            st = self._parts[tp]
            result = results.get(tp) or ProduceResult(ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1, -1, "no answer")
            code, base_offset, message = result.error, result.base_offset, result.error_message or ""
            if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                st.in_flight -= 1
                self.stats[tp].add(
                    base_offset if code == ErrorCode.NONE else -1, batch.count, len(batch.data)
                )
                self._held_bytes -= len(batch.data)
                self._release_retries(st)
                continue
            err = KafkaError(code, message)
            if err.retriable or (
                code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and (st.retry or st.in_flight > 1)
            ):
                # OUT_OF_ORDER after an earlier batch of the partition failed is the consequence of that
                # gap, not a lost record: resend in order.
                self._retry_later(st, batch, str(err))
                refresh = refresh or code in (
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    ErrorCode.LEADER_NOT_AVAILABLE,
                )
                continue
            raise ProduceFailedError(
                f"writing to topic {tp[0]!r} partition {tp[1]} failed: {err.name} ({int(code)})"
                + (f": {message}" if message else "")
                + f"; {self.stats[tp].records} record(s) of this task were acknowledged there before"
            )
        if refresh:
            self._refresh_metadata()
        if self._on_ack is not None:
            self._on_ack(self.requests_acknowledged)

    def _retry_later(self, st: _PartitionState, batch: _Batch, reason: str) -> None:
        st.in_flight -= 1
        self._check_deadline(batch, reason)
        if batch.attempts > self._opts.retries:
            raise ProduceFailedError(
                f"writing to topic {st.topic!r} partition {st.partition} failed after {batch.attempts} "
                f"attempt(s) (kafka.retries={self._opts.retries}): {reason}"
            )
        st.retry.append(batch)
        st.blocked_until = time.monotonic() + self._opts.retry_backoff_ms / 1000.0
        self._release_retries(st)

    def _release_retries(self, st: _PartitionState) -> None:
        """Once nothing of the partition is in flight, put failed batches back in front, in order."""
        if st.retry and st.in_flight == 0:
            st.retry.sort(key=lambda b: b.base_sequence)
            st.ready.extendleft(reversed(st.retry))
            st.retry = []

    def _check_deadline(self, batch: _Batch, reason: str | None) -> None:
        waited = time.monotonic() - batch.sealed_at
        if waited * 1000.0 > self._opts.delivery_timeout_ms:
            raise ProduceFailedError(
                f"writing to topic {batch.topic!r} partition {batch.partition} failed: {batch.count} "
                f"record(s) not acknowledged within kafka.delivery.timeout.ms={self._opts.delivery_timeout_ms}"
                f" after {batch.attempts} attempt(s)" + (f"; last error: {reason}" if reason else "")
            )

    # ---------------------------------------------------------------------------------------- flush

    def flush(self) -> None:
        """Seal everything, send everything and wait until every batch is acknowledged (or fail)."""
        for st in self._parts.values():
            self._seal(st)
        while self._outstanding():
            self._pump(block=True)

    def _outstanding(self) -> bool:
        if any(q for q in self._in_flight.values()):
            return True
        return any(st.ready or st.retry or st.pending for st in self._parts.values())

    def close(self) -> None:
        self._client.close()
