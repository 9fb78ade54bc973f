"""The producer's sender: sealed record batches out to the partition leaders, acknowledgements and retries back.

Runs on: executors (task).

Where this runs: on the **executors**, one :class:`Sender` per write task, owned by its
:class:`~spark_kafka_log.write.producer.TaskProducer`; single-threaded, not thread-safe (the task's thread drives it
through :meth:`Sender.pump`).

Pipeline::

    drain      -> per leader: ProduceRequests of at most one batch per partition (Produce v3+ rule) and at
                  most max.request.size bytes; up to max.in.flight requests pipelined per broker; every
                  pump first completes the requests whose answers already arrived (without waiting), so
                  the pipeline refills while the task encodes the next rows
    responses  -> per partition: offsets recorded (PartitionStats), bytes released from the accumulator,
                  retriable errors requeued in sequence order after retry.backoff.ms, anything else fails
                  the task with :class:`~broker_runtime.errors.ProduceFailedError` naming topic, partition
                  and Kafka's error name

Wire: one :class:`broker_runtime.client.KafkaClient` per task (lazy connections, one per broker). Produce
requests go out through its non-retrying ``send_produce`` / ``poll_produce`` so the retry policy stays here.

Ordering with idempotence: a partition has at most max.in.flight batches in flight; after a failure its
batches are resent in sequence order only once nothing of it is in flight any more, so the broker sees
sequences in order. OUT_OF_ORDER_SEQUENCE_NUMBER after an earlier failure of the partition is the consequence
of that gap and is retried like the failure itself.

Leader failover: an answer meaning stale metadata (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, KAFKA_STORAGE_ERROR) or a broken
connection (refused or reset by a dead leader, or no answer within request.timeout.ms) requeues the batches
and refreshes the leaders from any live broker the client knows (see :mod:`broker_runtime.client.client`);
other retriable answers (NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, ...) are resent to the same leader. The
first such answer per partition is logged at WARNING. Sequence numbers are fixed when a batch is sealed, so
a batch resent to the new leader carries its original producer id, epoch and sequence: when the old leader
had replicated it, the new leader holds that producer state and answers it as a duplicate (with its original
offset, or DUPLICATE_SEQUENCE_NUMBER), else it is appended in its place in the sequence.

Delivery bound: a batch not acknowledged within delivery.timeout.ms of being sealed, or after ``retries``
resends, fails the task with the last error it saw (``... last error: NOT_ENOUGH_REPLICAS (19): ...``),
naming topic and partition. A partition that stays leaderless or under min.insync.replicas therefore fails
the task after delivery.timeout.ms, never silently and never later than that plus one request.timeout.ms
(a request already sent is awaited). A task succeeds only when every sealed batch was acknowledged
(acks=0: written to the socket).

After a failure, :meth:`Sender.settle` awaits the answers of the requests already sent (answers ignored,
unanswered ones logged at WARNING) before the task producer releases the Spark partition's state lock, so a
re-run that resumes this producer id reads a log the broker has finished appending this attempt's data to.

Transactions: with a ``transactional_id``, every Produce request names it, and before a request carries the
first batch of a partition the ``add_partitions`` hook of the task producer adds that partition (with every
other new partition of the round, one AddPartitionsToTxn) to the transaction, as Kafka's producer does before
its first send to a partition. Committing or aborting is not the sender's job (see
:mod:`spark_kafka_log.write.producer`).

Test-only faults (:mod:`spark_kafka_log.common.fault_injection`): ``faults`` is None in production; when given, it is
asked after every acknowledgement (may raise) and before reading a response (may drop the connection once).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_runtime.client import BrokerConnectionError, InFlight, KafkaClient, ProduceResult
from broker_runtime.errors import ErrorCode, KafkaError, ProduceFailedError, ProtocolError
from broker_runtime.protocol.topic_partition import TopicPartition
from spark_kafka_log.common.fault_injection import TaskFaults
from spark_kafka_log.common.writer_options import WriterOptions
from spark_kafka_log.write.accumulator import PartitionQueue, RecordAccumulator, SealedBatch

__all__ = ["Sender"]

log = logging.getLogger("spark_kafka_log.producer")

#: Answers meaning the metadata is stale (Kafka's InvalidMetadataException family): refresh before resending.
_REFRESH_ON = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


def _transient(exc: Exception) -> bool:
    """A failure that a resend may cure: the connection, undecodable bytes, a leader or broker moving."""
    if isinstance(exc, BrokerConnectionError | ProtocolError):
        return True
    return isinstance(exc, KafkaError) and (exc.retriable or exc.code == ErrorCode.BROKER_NOT_AVAILABLE)


@dataclass
class _PartitionSendState:
    in_flight: int = 0
    retry: list[SealedBatch] = field(default_factory=list)
    blocked_until: float = 0.0
    #: Error codes already logged since the partition's last acknowledgement (one WARNING each).
    warned: set[int] = field(default_factory=set)


@dataclass
class _Request:
    node: int
    batches: dict[TopicPartition, SealedBatch]
    handle: InFlight | None
    sent_at: float


class Sender:
    """Sends what the accumulator sealed and tracks it until acknowledged (see the module docstring)."""

    def __init__(
        self,
        client: KafkaClient,
        options: WriterOptions,
        accumulator: RecordAccumulator,
        faults: TaskFaults | None = None,
        *,
        transactional_id: str | None = None,
        add_partitions: Callable[[list[TopicPartition]], None] | None = None,
    ) -> None:
        self._client = client
        self._opts = options
        self._acc = accumulator
        self._faults = faults
        self._transactional_id = transactional_id
        self._add_partitions = add_partitions
        #: Partitions already in the transaction (transactional mode).
        self._added: set[TopicPartition] = set()
        self._parts: dict[TopicPartition, _PartitionSendState] = {}
        self._in_flight: dict[int, deque[_Request]] = {}
        self.requests_acknowledged = 0

    def _part(self, tp: TopicPartition) -> _PartitionSendState:
        st = self._parts.get(tp)
        if st is None:
            st = self._parts[tp] = _PartitionSendState()
        return st

    def outstanding(self) -> bool:
        """Anything sealed, pending, in flight or waiting for a resend."""
        if any(q for q in self._in_flight.values()):
            return True
        return self._acc.has_pending() or any(st.retry for st in self._parts.values())

    def pump(self, block: bool, seal_all: bool = False) -> bool:
        """Send what may be sent; with ``block`` also wait for at least one response. True if progress."""
        if seal_all:
            self._acc.seal_all()
        progress = self._collect_answered()
        progress = self._send_ready() or progress
        if block:
            node = self._oldest_node()
            if node is not None:
                self._receive_one(node)
                progress = True
            elif not progress:
                # Nothing in flight and nothing sendable: partitions are backing off.
                wake = min(
                    (self._part((q.topic, q.partition)).blocked_until for q in self._acc.queues() if q.ready),
                    default=None,
                )
                if wake is not None:
                    time.sleep(max(0.0, wake - time.monotonic()))
                    progress = True
        return progress

    def _collect_answered(self) -> bool:
        """Complete the requests whose answers already arrived (no waiting), oldest first per broker.

        Without this a non-blocking pump would leave answered requests in the pipeline until it is full and
        a blocking pump reads them, so the broker would sit idle while the task encodes the next rows."""
        progress = False
        for node, pipeline in self._in_flight.items():
            while pipeline:
                handle = pipeline[0].handle
                if handle is None or not self._client.produce_answered(handle):
                    break
                self._receive_one(node)
                progress = True
        return progress

    def settle(self) -> None:
        """After a failure: wait for the answers of the requests already sent, ignoring them; log what is lost.

        Called by the task producer before it releases the partition's state lock, so that a re-run attempt
        that resumes this producer id scans a log the broker has finished appending this attempt's requests
        to. A request whose answer cannot be read (broken connection, request.timeout.ms) may still be
        appended later: that is logged at WARNING. It cannot duplicate records either (the re-run's
        overlapping batch is answered as a duplicate or OUT_OF_ORDER_SEQUENCE_NUMBER, which fails the re-run),
        but it can make the re-run fail.
        """
        unanswered = 0
        for node, pipeline in self._in_flight.items():
            while pipeline:
                entry = pipeline.popleft()
                if entry.handle is None:
                    continue
                try:
                    self._client.poll_produce(entry.handle)
                except (KafkaError, ProtocolError, OSError) as exc:
                    unanswered += 1 + len(pipeline)
                    pipeline.clear()
                    log.warning(
                        "pylog producer: the failed task's requests to broker %s were not answered (%s); "
                        "a re-run of the task may fail with OUT_OF_ORDER_SEQUENCE_NUMBER if the broker "
                        "appends them after the re-run read the log (no record is written twice)",
                        node,
                        exc,
                    )
        if unanswered:
            log.warning("pylog producer: %d request(s) of the failed task left unanswered", unanswered)

    def _oldest_node(self) -> int | None:
        best: tuple[float, int] | None = None
        for node, q in self._in_flight.items():
            if q and (best is None or q[0].sent_at < best[0]):
                best = (q[0].sent_at, node)
        return None if best is None else best[1]

    def _sendable(self, q: PartitionQueue, now: float) -> bool:
        st = self._part((q.topic, q.partition))
        if not q.ready or st.blocked_until > now:
            return False
        if self._opts.enable_idempotence:
            return st.in_flight < self._opts.max_in_flight and not st.retry
        return True

    def _send_ready(self) -> bool:
        sent = False
        by_node: dict[int, list[PartitionQueue]] = {}
        now = time.monotonic()
        for q in self._acc.queues():
            if self._sendable(q, now):
                node = self._leader(q)
                if node is not None:
                    by_node.setdefault(node, []).append(q)
        if self._add_partitions is not None:
            new = sorted({(q.topic, q.partition) for qs in by_node.values() for q in qs} - self._added)
            if new:
                self._add_partitions(new)
                self._added.update(new)
        for node, queues in by_node.items():
            pipeline = self._in_flight.setdefault(node, deque())
            while len(pipeline) < self._opts.max_in_flight:
                # Re-checked every round: a failed send blocks its partitions for retry.backoff.ms.
                now = time.monotonic()
                queues = [q for q in queues if self._sendable(q, now)]
                if not queues:
                    break
                request: dict[TopicPartition, SealedBatch] = {}
                size = 0
                for q in queues:
                    batch = q.ready[0]
                    if request and size + len(batch.data) > self._opts.max_request_size:
                        continue
                    self._check_deadline(batch, None)
                    q.ready.popleft()
                    request[(q.topic, q.partition)] = batch
                    size += len(batch.data) + 64
                    self._part((q.topic, q.partition)).in_flight += 1
                    batch.attempts += 1
                self._send(node, request, pipeline)
                sent = True
        return sent

    def _leader(self, q: PartitionQueue) -> int | None:
        """The partition's leader; None (partition backed off for retry.backoff.ms) while there is none."""
        try:
            return self._client.leader_for(q.topic, q.partition)
        except (KafkaError, ProtocolError) as exc:
            if not _transient(exc):
                raise ProduceFailedError(
                    f"writing to topic {q.topic!r} partition {q.partition} failed: no leader: {exc}"
                ) from exc
            for batch in q.ready:
                batch.last_error = f"no leader: {exc}"
            self._check_deadline(q.ready[0], None)
            self._part((q.topic, q.partition)).blocked_until = (
                time.monotonic() + self._opts.retry_backoff_ms / 1000.0
            )
            return None

    def _send(self, node: int, request: dict[TopicPartition, SealedBatch], pipeline: deque[_Request]) -> None:
        payload = {tp: b.data for tp, b in request.items()}
        try:
            handle = self._client.send_produce(
                node,
                payload,
                acks=self._opts.acks,
                timeout_ms=self._opts.request_timeout_ms,
                transactional_id=self._transactional_id,
            )
        except (KafkaError, ProtocolError) as exc:
            if not _transient(exc):
                raise ProduceFailedError(f"writing to broker {node} failed: {exc}") from exc
            self._fail_connection(node, exc, extra=request)
            return
        entry = _Request(node, request, handle, time.monotonic())
        if self._opts.acks == 0:
            self._complete(entry, {tp: ProduceResult(ErrorCode.NONE, -1, -1, -1) for tp in request})
            return
        pipeline.append(entry)

    def _receive_one(self, node: int) -> None:
        pipeline = self._in_flight[node]
        if self._faults is not None and self._faults.drop_responses_now(self.requests_acknowledged):
            # Lose the responses of every request in flight, as a broken network would, after giving the
            # broker time to append them.
            time.sleep(0.3)
            self._client.disconnect(node)
            self._fail_connection(
                node,
                KafkaError(ErrorCode.NETWORK_EXCEPTION, "injected: responses dropped (test-only option)"),
            )
            return
        entry = pipeline[0]
        assert entry.handle is not None
        try:
            results = self._client.poll_produce(entry.handle)
        except (BrokerConnectionError, ProtocolError) as exc:
            self._fail_connection(node, exc)
            return
        pipeline.popleft()
        self._complete(entry, results or {})

    def _fail_connection(
        self, node: int, exc: Exception, extra: dict[TopicPartition, SealedBatch] | None = None
    ) -> None:
        """The connection to ``node`` broke: every request in flight there is unanswered, resend them."""
        self._client.disconnect(node)
        pipeline = self._in_flight.get(node, deque())
        entries = list(pipeline)
        pipeline.clear()
        if extra is not None:
            entries.append(_Request(node, extra, None, time.monotonic()))
        log.warning(
            "pylog producer: connection to broker %s failed (%s); resending %d request(s)",
            node,
            exc,
            len(entries),
        )
        for entry in entries:
            for tp, batch in entry.batches.items():
                self._retry_later(tp, batch, f"connection error: {exc}")
        self._refresh_metadata()

    def _refresh_metadata(self) -> None:
        """Reload the leaders of this task's topics; failures are left to the next send."""
        topics = self._acc.topics()
        if topics:
            with contextlib.suppress(KafkaError, ProtocolError):
                self._client.metadata(topics)

    def _complete(self, entry: _Request, results: dict[TopicPartition, ProduceResult]) -> None:
        self.requests_acknowledged += 1
        refresh = False
        for tp, batch in entry.batches.items():
            st = self._part(tp)
            result = results.get(tp) or ProduceResult(ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1, -1, "no answer")
            code, base_offset, message = result.error, result.base_offset, result.error_message or ""
            if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                st.in_flight -= 1
                st.warned.clear()
                self._acc.stats[tp].add(
                    base_offset if code == ErrorCode.NONE else -1, batch.count, len(batch.data)
                )
                self._acc.release(batch)
                self._release_retries(tp)
                continue
            err = KafkaError(code, message)
            if err.retriable or (
                code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and (st.retry or st.in_flight > 1)
            ):
                # OUT_OF_ORDER after an earlier batch of the partition failed is the consequence of that
                # gap, not a lost record: resend in order.
                if int(code) not in st.warned:
                    st.warned.add(int(code))
                    log.warning(
                        "pylog producer: topic %r partition %d answered %s; resending after "
                        "kafka.retry.backoff.ms=%d until kafka.delivery.timeout.ms=%d",
                        tp[0],
                        tp[1],
                        err,
                        self._opts.retry_backoff_ms,
                        self._opts.delivery_timeout_ms,
                    )
                self._retry_later(tp, batch, str(err))
                refresh = refresh or code in _REFRESH_ON
                continue
            raise ProduceFailedError(
                f"writing to topic {tp[0]!r} partition {tp[1]} failed: {err.name} ({int(code)})"
                + (f": {message}" if message else "")
                + (self._too_large_hint(batch) if code == ErrorCode.MESSAGE_TOO_LARGE else "")
                + f"; {self._acc.stats[tp].records} record(s) of this task were acknowledged there before"
            )
        if refresh:
            self._refresh_metadata()
        if self._faults is not None:
            self._faults.after_acknowledged(self.requests_acknowledged)

    def _too_large_hint(self, batch: SealedBatch) -> str:
        """What to change when the broker refused a batch as larger than the topic allows: a sealed batch is
        not split again (its sequence numbers are fixed), so the task fails and says which option to lower."""
        return (
            f"; the batch was {len(batch.data)} bytes ({batch.count} record(s)) with kafka.batch.size="
            f"{self._opts.batch_size}: set kafka.batch.size below the topic's max.message.bytes (the broker's "
            "message.max.bytes when the topic does not set it)"
        )

    def _retry_later(self, tp: TopicPartition, batch: SealedBatch, reason: str) -> None:
        st = self._part(tp)
        st.in_flight -= 1
        batch.last_error = reason
        self._check_deadline(batch, reason)
        if batch.attempts > self._opts.retries:
            raise ProduceFailedError(
                f"writing to topic {tp[0]!r} partition {tp[1]} failed after {batch.attempts} "
                f"attempt(s) (kafka.retries={self._opts.retries}): {reason}"
            )
        st.retry.append(batch)
        st.blocked_until = time.monotonic() + self._opts.retry_backoff_ms / 1000.0
        self._release_retries(tp)

    def _release_retries(self, tp: TopicPartition) -> None:
        """Once nothing of the partition is in flight, put failed batches back in front, in order."""
        st = self._part(tp)
        if st.retry and st.in_flight == 0:
            st.retry.sort(key=lambda b: b.base_sequence)
            self._acc.queue(tp).ready.extendleft(reversed(st.retry))
            st.retry = []

    def _check_deadline(self, batch: SealedBatch, reason: str | None) -> None:
        reason = reason or batch.last_error
        waited = time.monotonic() - batch.sealed_at
        if waited * 1000.0 > self._opts.delivery_timeout_ms:
            raise ProduceFailedError(
                f"writing to topic {batch.topic!r} partition {batch.partition} failed: {batch.count} "
                f"record(s) not acknowledged within kafka.delivery.timeout.ms={self._opts.delivery_timeout_ms}"
                f" after {batch.attempts} attempt(s)" + (f"; last error: {reason}" if reason else "")
            )
