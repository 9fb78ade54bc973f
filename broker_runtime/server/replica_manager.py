"""The leader side of every partition on this node: validated appends and bounded reads.

Append path for one produce partition (Kafka's ``ReplicaManager.appendRecords`` ->
``UnifiedLog.append``), all per batch, never per record:

  1. :func:`~broker_runtime.server.validation.validate_produce_records` (Kafka's order; see that module);
  2. the producer-state check of an idempotent batch (``ProducerStateManager.check``): a duplicate of one of
     the last five batches answers the ORIGINAL offsets and writes nothing; a sequence or epoch error answers
     its code;
  3. ``PartitionLog.append`` assigns offsets (and stamps LogAppendTime batches), then
     ``ProducerStateManager.update`` records the batch. Producer state lives here, one manager per partition
     directory, loaded on first use from the newest ``.snapshot`` plus a replay of the later batches, and
     snapshotted at clean shutdown;
  4. single replica: the high watermark moves to the log end offset at once, and ``on_high_watermark`` wakes
     the delayed fetches watching the partition. (``acks=-1`` with more replicas will park a DelayedProduce
     here instead; :meth:`ReplicaManager.append` already returns the offset such an operation would wait for.)

Thread-safety: event-loop thread only (the storage calls are synchronous and short).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_runtime.errors import ErrorCode, OffsetOutOfRangeError, StorageError
from broker_runtime.protocol.batch_header import BatchHeader, iter_batch_spans
from broker_runtime.server.topics import TopicManager
from broker_runtime.server.validation import BatchPolicy, Rejection, validate_produce_records
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.producer_state import ProducerStateManager

__all__ = ["AppendResult", "ReadResult", "ReplicaManager"]

_log = logging.getLogger(__name__)

#: The leader epoch of every partition of this single-node broker (stamped into appended batches).
LEADER_EPOCH = 0


@dataclass(frozen=True, slots=True)
class AppendResult:
    """The answer for one produce partition."""

    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None
    #: The offset the high watermark must reach before acks=-1 may answer (last offset + 1).
    required_offset: int = -1


@dataclass(frozen=True, slots=True)
class ReadResult:
    """The outcome of reading one fetch partition."""

    error: ErrorCode
    records: Any = b""
    high_watermark: int = -1
    log_start_offset: int = -1

    @property
    def size(self) -> int:
        return _records_size(self.records)


def _records_size(records: Any) -> int:
    if records is None:
        return 0
    if isinstance(records, (list, tuple)):
        return sum(len(r) for r in records)
    return len(records)


def _policy(cfg: LogConfig) -> BatchPolicy:
    return BatchPolicy(
        max_message_bytes=cfg.max_message_bytes,
        timestamp_type=1 if cfg.log_append_time else 0,
        timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
        timestamp_after_max_ms=cfg.message_timestamp_after_max_ms,
    )


class ReplicaManager:
    """Leader appends and reads over the topics' partition logs; see the module docstring."""

    def __init__(
        self,
        topics: TopicManager,
        *,
        wall_ms: Callable[[], int],
        on_high_watermark: Callable[[str, int], None] | None = None,
    ) -> None:
        self._topics = topics
        self._wall_ms = wall_ms
        self._on_high_watermark = on_high_watermark
        self._policies: dict[str, tuple[LogConfig, BatchPolicy]] = {}
        self._producer_states: dict[tuple[str, int], ProducerStateManager] = {}

    def set_high_watermark_listener(self, listener: Callable[[str, int], None]) -> None:
        self._on_high_watermark = listener

    def _policy_for(self, topic: str) -> tuple[LogConfig, BatchPolicy]:
        cfg = self._topics.config(topic)
        cached = self._policies.get(topic)
        if cached is None or cached[0] is not cfg:
            cached = (cfg, _policy(cfg))
            self._policies[topic] = cached
        return cached

    # -- produce ------------------------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: Any, api_version: int) -> AppendResult:
        """Validate and append the records of one produce partition (Produce v3+)."""
        log = self._topics.get_log(topic, partition)
        if log is None:
            return AppendResult(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                message=f"This server does not host this topic-partition: {topic}-{partition}",
            )
        cfg, policy = self._policy_for(topic)
        now = self._wall_ms()
        checked = validate_produce_records(
            records, partition_name=f"{topic}-{partition}", api_version=api_version, policy=policy, now_ms=now
        )
        if isinstance(checked, Rejection):
            _log.debug("produce to %s-%d rejected: %s", topic, partition, checked.message)
            return AppendResult(checked.code, message=checked.message)
        header: BatchHeader = checked

        producer_state = self._producer_state(topic, partition, log) if header.producer_id >= 0 else None
        if producer_state is not None:
            verdict = producer_state.check(header)
            if verdict.duplicate is not None:
                dup = verdict.duplicate
                return AppendResult(
                    ErrorCode.NONE,
                    base_offset=dup.first_offset,
                    log_append_time_ms=dup.timestamp if cfg.log_append_time else -1,
                    log_start_offset=log.log_start_offset,
                    required_offset=dup.last_offset + 1,
                )
            if verdict.error != ErrorCode.NONE:
                return AppendResult(ErrorCode(verdict.error), message=verdict.message or None)
        try:
            info = log.append(records, leader_epoch=LEADER_EPOCH)
        except StorageError as exc:
            _log.error("append to %s-%d failed: %s", topic, partition, exc)
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
        if producer_state is not None:
            producer_state.update(header, info.first_offset, info.last_offset, info.max_timestamp)
        # Single replica: the ISR is {this node}, so the high watermark follows the log end offset.
        if log.high_watermark != log.log_end_offset:
            log.high_watermark = log.log_end_offset
        if self._on_high_watermark is not None:
            self._on_high_watermark(topic, partition)
        return AppendResult(
            ErrorCode.NONE,
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time_ms,
            log_start_offset=log.log_start_offset,
            required_offset=info.last_offset + 1,
        )

    def _producer_state(self, topic: str, partition: int, log: Any) -> ProducerStateManager:
        """The partition's producer state, loaded on first use: newest snapshot, then replay of later batches."""
        state = self._producer_states.get((topic, partition))
        if state is not None:
            return state
        state = ProducerStateManager(log.dir)
        snapshot_offset = state.load_latest_snapshot(self._wall_ms())
        position = max(snapshot_offset or 0, log.log_start_offset)
        if snapshot_offset is None or snapshot_offset < log.log_start_offset:
            state = ProducerStateManager(log.dir)
        end = log.log_end_offset
        replayed = 0
        while position < end:
            data = log.read(position, 1 << 20, min_one_batch=True)
            spans = iter_batch_spans(data.records)
            if not spans:
                break
            for _, batch in spans:
                state.replay(batch)
                replayed += 1
            position = spans[-1][1].next_offset
        if replayed:
            _log.info("%s-%d: producer state rebuilt from %d batch(es)", topic, partition, replayed)
        self._producer_states[(topic, partition)] = state
        return state

    def snapshot_producer_state(self) -> None:
        """Write a producer-state snapshot for every partition that has one (at clean shutdown)."""
        for (topic, partition), state in self._producer_states.items():
            log = self._topics.get_log(topic, partition)
            if log is None or not state.producers:
                continue
            try:
                state.take_snapshot(log.log_end_offset)
            except (StorageError, OSError) as exc:
                _log.warning("%s-%d: producer snapshot failed: %s", topic, partition, exc)

    # -- fetch --------------------------------------------------------------------------------------------

    def read(
        self, topic: str, partition: int, fetch_offset: int, max_bytes: int, *, min_one_batch: bool
    ) -> ReadResult:
        """Read committed data (up to the high watermark) from ``fetch_offset``; errors as Kafka codes."""
        log = self._topics.get_log(topic, partition)
        if log is None:
            return ReadResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        hw = log.high_watermark
        start = log.log_start_offset
        if fetch_offset < start or fetch_offset > log.log_end_offset:
            return ReadResult(ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=hw, log_start_offset=start)
        if fetch_offset >= hw:
            return ReadResult(ErrorCode.NONE, b"", hw, start)
        try:
            data = log.read(fetch_offset, max_bytes, max_offset=hw, min_one_batch=min_one_batch)
        except OffsetOutOfRangeError:
            return ReadResult(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                high_watermark=log.high_watermark,
                log_start_offset=log.log_start_offset,
            )
        except StorageError as exc:
            _log.error("read of %s-%d at %d failed: %s", topic, partition, fetch_offset, exc)
            return ReadResult(ErrorCode.KAFKA_STORAGE_ERROR, high_watermark=hw, log_start_offset=start)
        records = data.records if data.records is not None else b""
        return ReadResult(ErrorCode.NONE, records, hw, log.log_start_offset)

    def high_watermark(self, topic: str, partition: int) -> int | None:
        log = self._topics.get_log(topic, partition)
        return None if log is None else log.high_watermark
