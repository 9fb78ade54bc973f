"""The log of one partition: an ordered run of segments under ``<log.dir>/<topic>-<partition>/`` (Kafka's
``UnifiedLog`` + ``LocalLog``, single replica): append, read, roll, truncate, flush.

Around it: :mod:`.log_loader` opens and recovers the directory (and rebuilds the producer state),
:mod:`.log_reader` reads a snapshot of it, :mod:`.retention` decides which old segments go,
:mod:`.segment_swap` installs what the cleaner (:mod:`.cleaner`) wrote.

Offsets::

    log start offset  <=  high watermark  <=  log end offset (LEO)
    first offset served    last committed+1    next offset to assign

* The LEO is the next offset :meth:`PartitionLog.append` assigns; batches get consecutive offsets by rewriting
  baseOffset and partitionLeaderEpoch in place (outside the CRC). Under ``message.timestamp.type=LogAppendTime``
  each batch also gets the LogAppendTime attribute and maxTimestamp = now, and its CRC is recomputed.
* The high watermark follows the LEO while :attr:`PartitionLog.hw_follows_leo` is true (a single replica);
  replication turns that off and sets :attr:`PartitionLog.high_watermark` itself (clamped to [start, LEO]).
  :meth:`PartitionLog.load` with ``hw_follows_leo=False`` starts from the checkpointed high watermark given
  to it (0 when none, as Kafka), clamped to [start, LEO], so a replicated partition never exposes offsets
  after a restart that were not committed before it.
* The log start offset only grows: retention, :meth:`PartitionLog.delete_records_before`. It may point inside
  a segment or a batch; reads below it fail with OffsetOutOfRangeError. The exception is
  :meth:`PartitionLog.truncate_fully_and_start_at` (Kafka's ``truncateFullyAndStartAt``, for a follower that
  fell below its leader's log start): every segment goes, and one empty segment starts at the given offset,
  which becomes log start, LEO, high watermark and recovery point at once.

Roll (new active segment whose base offset is the first offset of the incoming set) when the active segment
would exceed ``segment.bytes``; when ``segment.ms`` (minus jitter) has passed since its first batch's timestamp
(or its creation when that has none); when either index is full; when the set's last offset does not fit a
relative offset. Rolling finalizes the old segment (last time-index entry, trimmed indexes), creates the new
files and encodes the producer state (CPU only). Then, on :attr:`PartitionLog.flush_executor`'s thread when set
(the log manager sets it, as Kafka schedules ``flush-log`` after a roll, so the appending event loop never waits
for the disk), else at once: the old segment and the directory are fsynced; the producer snapshot is written as
``<new base>.snapshot`` (a temporary file fsynced outside the lock, renamed under it, the directory fsynced:
never claiming offsets whose batches are not durable); the recovery point moves to the new base offset and
:attr:`PartitionLog.on_roll` is called. Until then the segment is listed as unflushed; :meth:`PartitionLog.flush`
and :meth:`PartitionLog.close` fsync it themselves. A truncation or close meanwhile wins (the task leaves the
snapshot and the recovery point alone). A failed fsync or snapshot write keeps the recovery point, is counted
through :attr:`PartitionLog.on_flush_failure` and fails the log directory like any other write (below).

Failed writes (Kafka's ``LocalLog.maybeHandleIOException``): an OSError of an append, follower append, roll,
flush, truncation, segment deletion (retention, DeleteRecords), cleaned-segment swap, roll flush or roll snapshot
goes to :attr:`PartitionLog.dir_failure` (:mod:`.log_dir_failure`: the directories go offline, the broker halts)
and is raised on. :meth:`PartitionLog.close` is the exception: its producer snapshot failing is logged at WARNING
(the next load replays the log instead), since a close is followed by no write of this log.

Flush: fsync when ``flush.messages`` messages are unflushed or ``flush.ms`` passed since the last flush (both
default to never: the page cache, as Kafka), on roll and on close. Everything below the recovery point is on disk.

Producer state and transactions (Kafka's ``UnifiedLog`` owning its ``ProducerStateManager``, see
:mod:`.producer_state`): the log keeps the state equal to its batches below the LEO. :meth:`PartitionLog.append`
checks an idempotent set first: a duplicate of a retained batch returns an :class:`AppendInfo` marked
``duplicate`` with the original offsets (nothing written); an out-of-order sequence, a fenced epoch or a marker
from an older coordinator epoch raises :class:`~broker_runtime.errors.ProducerStateError`; otherwise each batch
is recorded with the offsets it got. :meth:`PartitionLog.append_as_follower` records the leader's batches
unvalidated, so a follower that becomes leader recognises retries. Truncation rebuilds the state
(:func:`~.log_loader.rebuild_producer_state`); a full truncation forgets every producer. The last stable offset
is ``min(high watermark, first offset of the earliest open transaction)``, never below the log start. An ABORT
marker adds ``(producer id, first offset, marker offset, last stable offset after it)`` to the ``.txnindex`` of
the segment holding it; reads collect them (:meth:`PartitionLog.collect_aborted_transactions`).

Thread-safety: one re-entrant lock per partition (:attr:`PartitionLog.lock`) serializes every mutation
(append, roll, truncate, segment deletion and replacement, flush, offset updates, producer state). Reads take it
only to snapshot (:meth:`PartitionLog.snapshot`) and do their I/O outside it (:mod:`.log_reader`). The
roll-flush task runs on the executor's thread: it fsyncs and writes the producer snapshot outside the lock and
takes the lock to read the unflushed list, to rename the snapshot into place and to move the recovery point.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from broker_runtime.errors import (
    ErrorCode,
    OffsetOutOfRangeError,
    ProducerStateError,
    StorageError,
)
from broker_runtime.fsutil import fsync_dir, write_synced
from broker_runtime.protocol.batch_header import (
    BatchHeader,
    iter_batch_spans,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from broker_runtime.protocol.records import RecordBatch
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_dir_failure import LogDirFailureChannel
from broker_runtime.storage.log_loader import (
    index_aborted_txn,
    load_segments,
    rebuild_producer_state,
    replay_batch,
)
from broker_runtime.storage.log_reader import LogSnapshot
from broker_runtime.storage.producer_state import BatchMetadata, ProducerStateManager, snapshot_path
from broker_runtime.storage.segment import LogSegment
from broker_runtime.storage.segment_swap import discard_swap, finish_swap

__all__ = ["AppendInfo", "PartitionLog", "default_clock"]

_log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _control_marker(buf: memoryview, pos: int, header: BatchHeader) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of a control batch at ``pos`` of ``buf``; None for a data batch."""
    if not header.is_control:
        return None
    return RecordBatch(buf[pos : pos + header.size]).control_record()


def default_clock() -> int:
    """Wall-clock milliseconds."""
    return int(time.time() * 1000)


def _on_snapshot(
    read: Callable[Concatenate[LogSnapshot, _P], _R],
) -> Callable[Concatenate[PartitionLog, _P], _R]:
    """A :class:`PartitionLog` method running ``read`` on a snapshot of the log taken now (same signature, same
    docstring)."""

    @functools.wraps(read)
    def on_snapshot(log: PartitionLog, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return read(log.snapshot(), *args, **kwargs)

    return on_snapshot


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What one append did (ProduceResponse fields come from here)."""

    first_offset: int
    last_offset: int
    #: The LogAppendTime stamped on the batches, or -1 under CreateTime.
    log_append_time_ms: int
    max_timestamp: int
    #: Last offset of the batch holding ``max_timestamp`` (what the time index records).
    offset_of_max_timestamp: int
    num_batches: int
    size_bytes: int
    #: True when the set duplicates a batch the producer state retains: nothing was written and the offsets
    #: and timestamps above are the original batch's.
    duplicate: bool = False


class PartitionLog:
    """The segments, offsets and policies of one topic partition."""

    def __init__(
        self,
        dir: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.dir = Path(dir)
        self.topic = topic
        self.partition = partition
        #: ``<topic>-<partition>``, for messages.
        self.name = f"{topic}-{partition}"
        #: The topic id of the directory's ``partition.metadata`` (:mod:`.partition_metadata`); None while the
        #: directory has none (written before pylog had topic ids, until the log manager assigns one).
        self.topic_id: uuid.UUID | None = None
        self.config = config
        #: Milliseconds now (wall clock unless given).
        self.clock = clock or default_clock
        self._lock = threading.RLock()
        self._segments: tuple[LogSegment, ...] = ()
        self._bases: tuple[int, ...] = ()
        self._leo = 0
        self._hw = 0
        self._log_start = 0
        self.recovery_point = 0
        #: While true the high watermark moves with the LEO (single replica); replication sets it False.
        self.hw_follows_leo = True
        #: Segments loading cut short (a truncated file, or a later segment deleted after such a cut), and the
        #: bytes they lost; each also logged at WARNING (see :mod:`.log_loader`).
        self.recovery_truncations = 0
        self.recovery_bytes_dropped = 0
        #: Called (under this log's lock) after a roll moved :attr:`recovery_point`; the log manager writes the
        #: recovery-point checkpoint there, so a crash never re-validates segments already fsynced.
        self.on_roll: Callable[[PartitionLog], None] | None = None
        #: Where a roll's fsyncs run (see "Roll" in the module docstring); None: on the appending thread.
        self.flush_executor: Executor | None = None
        #: Called (on the flush thread, no lock held) with ``"segment"`` or ``"producer snapshot"`` when a
        #: roll's fsync or its producer snapshot failed (the log manager counts them for the metrics).
        self.on_flush_failure: Callable[[str], None] | None = None
        #: The offline flag of the directories (the log manager shares its own with every log it holds): once
        #: set, every read and write of this log raises LogDirOfflineError before any I/O
        #: (:mod:`.log_dir_failure`).
        self.dir_failure = LogDirFailureChannel()
        #: Rolled segments whose fsync has not finished yet, oldest first.
        self._unflushed: list[LogSegment] = []
        #: Bumped by every truncation: a roll flush that started before one does not move the recovery point.
        self._truncations = 0
        self._last_flush_ms = self.clock()
        self._closed = False
        self._producer_state = ProducerStateManager(
            self.dir, producer_id_expiration_ms=config.producer_id_expiration_ms
        )

    # -- construction -----------------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        dir: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        clock: Callable[[], int] | None = None,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        needs_recovery: bool = True,
        hw_follows_leo: bool = True,
    ) -> PartitionLog:
        """Open (or create) the partition directory and load its segments, recovering if asked.

        With ``hw_follows_leo`` (a single replica) the high watermark is the LEO and ``high_watermark`` is
        ignored; without it (a replicated partition) the high watermark starts at ``high_watermark`` (0 when
        None), clamped to [log start, LEO].
        """
        log = cls(dir, topic, partition, config, clock)
        log.hw_follows_leo = hw_follows_leo
        log.dir.mkdir(parents=True, exist_ok=True)
        log._load(recovery_point, log_start_offset, high_watermark, needs_recovery)
        return log

    def _load(self, recovery_point: int, log_start: int, hw: int | None, needs_recovery: bool) -> None:
        loaded = load_segments(
            self.dir,
            self.name,
            self.config,
            self.clock(),
            self._producer_state,
            recovery_point=recovery_point,
            log_start_offset=log_start,
            needs_recovery=needs_recovery,
        )
        self.recovery_truncations += loaded.truncations
        self.recovery_bytes_dropped += loaded.bytes_dropped
        self._set_segments(loaded.segments)
        self._leo = loaded.log_end_offset
        self._log_start = loaded.log_start_offset
        self.recovery_point = loaded.recovery_point
        if self.hw_follows_leo:
            self._hw = self._leo
        else:
            self._hw = min(max(0 if hw is None else hw, self._log_start), self._leo)
        self._rebuild_producer_state()

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self._segments = tuple(segments)
        self._bases = tuple(s.base_offset for s in segments)

    @property
    def lock(self) -> threading.RLock:
        """The partition's re-entrant lock: every mutation holds it; a caller holds it to make several calls one
        step (a retention pass does, :mod:`.retention`)."""
        return self._lock

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """An OSError inside fails the log directory (:attr:`dir_failure`), then is raised on (Kafka's
        ``LocalLog.maybeHandleIOException``); ``what`` names the write in the reason."""
        try:
            yield
        except OSError as exc:
            self.dir_failure.maybe_add_offline_log_dir(f"{self.name} ({what})", exc)
            raise

    # -- offsets ------------------------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        with self._lock:
            self._hw = min(max(value, self._log_start), self._leo)

    @property
    def last_stable_offset(self) -> int:
        """``min(high watermark, first offset of the earliest open transaction)``, at least the log start."""
        with self._lock:
            first_unstable = self._producer_state.first_unstable_offset
            if first_unstable is None:
                return self._hw
            return max(min(self._hw, first_unstable), self._log_start)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The current segments, oldest first (an immutable snapshot)."""
        return self._segments

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    # -- append -----------------------------------------------------------------------------------------------

    @staticmethod
    def _spans(buf: memoryview) -> list[tuple[int, BatchHeader]]:
        spans = iter_batch_spans(buf)
        end = spans[-1][0] + spans[-1][1].size if spans else 0
        if end != len(buf):
            raise StorageError(f"records end with {len(buf) - end} bytes that are not a whole batch")
        return spans

    def append(self, records: bytes | bytearray | memoryview, *, leader_epoch: int = 0) -> AppendInfo:
        """Append validated batches, assigning offsets from the LEO.

        A ``bytearray`` or writable ``memoryview`` is rewritten in place (no copy); ``bytes`` are copied once.
        """
        buf = memoryview(records)
        if buf.readonly:
            buf = memoryview(bytearray(buf))
        if buf.nbytes == 0:
            raise StorageError("append of an empty record set")
        spans = self._spans(buf)
        log_append = self.config.log_append_time
        headers = [header for _, header in spans]
        idempotent = any(header.producer_id >= 0 for header in headers)
        with self._lock:
            self._ensure_open()
            producer_state = self._producer_state
            if idempotent:
                verdict = producer_state.check_batches(headers)
                if verdict.duplicate is not None:
                    return self._duplicate_info(verdict.duplicate)
                if verdict.error != ErrorCode.NONE:
                    raise ProducerStateError(verdict.error, verdict.message)
                for pos, header in spans:
                    control = _control_marker(buf, pos, header)
                    if control is not None:
                        producer_state.check_coordinator_epoch(header.producer_id, control[1], self.dir.name)
            now = self.clock()
            first = offset = self._leo
            max_ts, offset_of_max = -1, first
            assigned: list[tuple[int, int, int]] = []
            for pos, header in spans:
                set_base_offset(buf, pos, offset)
                set_partition_leader_epoch(buf, pos, leader_epoch)
                last = offset + header.last_offset_delta
                if log_append:
                    set_log_append_time(buf, pos, header.size, now)
                    ts = now
                else:
                    ts = header.max_timestamp
                if ts > max_ts:
                    max_ts, offset_of_max = ts, last
                assigned.append((offset, last, ts))
                offset = last + 1
            with self._writing("append"):
                self._append_set(buf, first, offset - 1, max_ts, offset_of_max, now)
                if idempotent:
                    for (pos, header), (batch_first, batch_last, ts) in zip(spans, assigned, strict=True):
                        control = _control_marker(buf, pos, header)
                        completed = producer_state.update(
                            header,
                            batch_first,
                            batch_last,
                            ts,
                            coordinator_epoch=None if control is None else control[1],
                            control_type=None if control is None else control[0],
                        )
                        if completed is not None:
                            index_aborted_txn(producer_state, completed, self._segments[-1])
            producer_state.update_map_end_offset(self._leo)
            return AppendInfo(
                first, offset - 1, now if log_append else -1, max_ts, offset_of_max, len(spans), buf.nbytes
            )

    def _duplicate_info(self, original: BatchMetadata) -> AppendInfo:
        """What an append of a duplicate answers: the original batch's offsets and timestamp, nothing written."""
        log_append_time = original.timestamp if self.config.log_append_time else -1
        return AppendInfo(
            original.first_offset,
            original.last_offset,
            log_append_time,
            original.timestamp,
            original.last_offset,
            0,
            0,
            duplicate=True,
        )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches keeping their own offsets (replication); the first must be >= the LEO."""
        buf = memoryview(records)
        spans = self._spans(buf)
        with self._lock:
            self._ensure_open()
            now = self.clock()
            expected = self._leo
            max_ts, offset_of_max = -1, spans[0][1].base_offset if spans else expected
            for pos, header in spans:
                if header.base_offset < expected:
                    raise StorageError(
                        f"batch at position {pos} has base offset {header.base_offset}, "
                        f"below the expected offset {expected} of {self.name}"
                    )
                if header.max_timestamp > max_ts:
                    max_ts, offset_of_max = header.max_timestamp, header.last_offset
                expected = header.next_offset
            first = spans[0][1].base_offset
            with self._writing("follower append"):
                self._append_set(buf, first, expected - 1, max_ts, offset_of_max, now)
                for pos, header in spans:
                    if header.producer_id >= 0:
                        marker = functools.partial(_control_marker, buf, pos, header)
                        replay_batch(self._producer_state, header, marker, self._segments[-1])
            self._producer_state.update_map_end_offset(self._leo)
            return AppendInfo(first, expected - 1, -1, max_ts, offset_of_max, len(spans), buf.nbytes)

    def _append_set(
        self, buf: memoryview, first: int, last: int, max_ts: int, offset_of_max: int, now: int
    ) -> None:
        size = buf.nbytes
        if size > self.config.segment_bytes:
            raise StorageError(
                f"record set of {size} bytes for {self.name} exceeds segment.bytes "
                f"{self.config.segment_bytes}"
            )
        if last - first > _INT32_MAX:
            raise StorageError(f"record set spans offsets {first}..{last}, more than a segment can index")
        segment = self._segments[-1]
        if segment.should_roll(size, max_ts, last, now):
            segment = self._roll(first, now)
        segment.append(buf, last, max_ts, offset_of_max)
        self._leo = last + 1
        if self.hw_follows_leo:
            self._hw = self._leo
        if (
            self._leo - self.recovery_point >= self.config.flush_messages
            or now - self._last_flush_ms >= self.config.flush_ms
        ):
            self._flush_locked(now)

    def _roll(self, base_offset: int, now: int) -> LogSegment:
        old = self._segments[-1]
        if old.size == 0:
            # An empty active segment is replaced rather than kept (Kafka does the same).
            old.delete()
            segments = list(self._segments[:-1])
        else:
            old.on_become_inactive()
            # Encoded now (the state as of the roll), written by the flush task after the segment's fsync.
            snapshot = self._producer_state.encode_state()
            segments = list(self._segments)
        new = LogSegment.create(self.dir, base_offset, self.config, now)
        segments.append(new)
        self._set_segments(segments)
        if not old.size:
            fsync_dir(self.dir)
            return new
        self._unflushed.append(old)
        if self.flush_executor is None:
            self._flush_rolled(self._leo, self._truncations, snapshot)
        else:
            self.flush_executor.submit(self._flush_rolled, self._leo, self._truncations, snapshot)
        return new

    def _flush_rolled(self, target: int, truncations: int, snapshot: bytes | None = None) -> None:
        """fsync the rolled segments below ``target`` and the directory, write the producer ``snapshot`` taken
        at the roll as ``<target>.snapshot``, then move the recovery point to ``target`` (unless a truncation
        came in between); see "Roll" in the module docstring. Nothing once the directories went offline."""
        if self.dir_failure.offline is not None:
            return
        with self._lock:
            pending = [seg for seg in self._unflushed if seg.base_offset < target]
        try:
            for seg in pending:
                seg.flush()
            fsync_dir(self.dir)
        except Exception as exc:  # OSError; or the segment closed meanwhile (close() flushed it then)
            with self._lock:
                if self._closed:
                    return  # closed meanwhile: close() flushed what was left
            _log.warning(
                "%s: fsync after rolling at offset %d failed, the recovery point stays at %d: %s",
                self.name,
                target,
                self.recovery_point,
                exc,
            )
            self._flush_failed("segment")
            if isinstance(exc, OSError):  # Kafka's flush after a roll fails the log dir (UnifiedLog.flush)
                self.dir_failure.maybe_add_offline_log_dir(f"{self.name} (fsync after a roll)", exc)
            return
        if snapshot is not None and self.dir_failure.offline is None:
            self._write_roll_snapshot(target, truncations, snapshot)
        with self._lock:
            done = set(map(id, pending))
            self._unflushed = [seg for seg in self._unflushed if id(seg) not in done]
            if self.dir_failure.offline is not None:
                return  # the recovery point (and its checkpoint) must not claim more after a failure
            if self._closed or truncations != self._truncations or target <= self.recovery_point:
                return
            # Everything before ``target`` is now on disk (older segments were fsynced after their roll).
            self.recovery_point = target
            if self.on_roll is not None:
                self.on_roll(self)

    def _write_roll_snapshot(self, target: int, truncations: int, snapshot: bytes) -> None:
        """Write the producer snapshot a roll at ``target`` encoded (its segments are fsynced already): a
        temporary file written and fsynced outside the lock, renamed under it unless the log was truncated or
        closed meanwhile (a truncation rebuilt the state; close writes its own), then the directory fsynced.
        A failure is logged at WARNING, counted and fails the log directory (a later load replays from an older
        snapshot)."""
        path = snapshot_path(self.dir, target)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.roll.tmp")
        try:
            write_synced(tmp, snapshot)
            with self._lock:
                if self._closed or truncations != self._truncations:
                    tmp.unlink(missing_ok=True)
                    return
                os.replace(tmp, path)
                self._producer_state.prune_snapshots()
            fsync_dir(self.dir)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            with self._lock:
                if self._closed:
                    return  # closed (or deleted) meanwhile: close() wrote its own snapshot
            _log.warning(
                "%s: writing the producer snapshot %s after a roll failed: %s",
                self.name,
                path.name,
                exc,
            )
            self._flush_failed("producer snapshot")
            # Kafka takes this snapshot inside UnifiedLog.roll, whose IOException fails the log dir.
            self.dir_failure.maybe_add_offline_log_dir(f"{self.name} (producer snapshot {path.name})", exc)

    def _flush_failed(self, what: str) -> None:
        if self.on_flush_failure is not None:
            self.on_flush_failure(what)

    def roll(self) -> None:
        """Force a roll now (no-op when the active segment is empty)."""
        with self._lock:
            self.dir_failure.check(f"log {self.name}")
            if self._segments[-1].size:
                with self._writing("roll"):
                    self._roll(self._leo, self.clock())

    # -- reads -------------------------------------------------------------------------------------------------

    def snapshot(self) -> LogSnapshot:
        """The readable state now (segments, offsets, active size), for reads without the lock (:mod:`.log_reader`)."""
        with self._lock:
            self._ensure_open()
            segments = self._segments
            return LogSnapshot(
                self.name,
                segments,
                self._bases,
                self._leo,
                self._hw,
                self._log_start,
                segments[-1].size,
            )

    # Reads run on a snapshot, outside the lock (:mod:`.log_reader`): each is the snapshot's method of that name.
    read = _on_snapshot(LogSnapshot.read)
    collect_aborted_transactions = _on_snapshot(LogSnapshot.collect_aborted_transactions)
    position_for = _on_snapshot(LogSnapshot.position_for)
    offset_for_timestamp = _on_snapshot(LogSnapshot.offset_for_timestamp)
    max_timestamp_offset = _on_snapshot(LogSnapshot.max_timestamp_offset)

    def reconfigure(self, config: LogConfig) -> None:
        """Run with ``config`` from now on (a dynamic topic or broker config change, as Kafka's
        ``UnifiedLog.updateConfig``): the next append, roll, retention pass and cleaning use it; the active
        segment's roll checks too. Existing segments are not rewritten."""
        with self._lock:
            self.config = config
            for seg in self._segments:
                seg.config = config

    # -- retention and truncation ----------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (DeleteRecords; -1 = the high watermark); returns it."""
        with self._lock:
            self._ensure_open()
            if offset == -1:
                offset = self._hw
            if offset < 0 or offset > self._hw:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset of {self.name} to {offset}: "
                    f"it must be within [0, high watermark {self._hw}]"
                )
            if offset > self._log_start:
                self._log_start = offset
                self.delete_segments_below_log_start()
            return self._log_start

    def delete_segments_below_log_start(self) -> int:
        """Delete the segments wholly below the log start offset; returns how many."""
        return self.delete_old_segments(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start
        )

    def delete_old_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Delete the oldest segments while ``predicate(segment, next segment or None)`` holds (Kafka's
        ``deleteOldSegments``), never one holding offsets at or above the high watermark, never the active one
        unless it is non-empty (then the log rolls first); the log start offset becomes at least the first
        remaining base offset. Returns how many segments went. The retention policies are in :mod:`.retention`."""
        with self._lock:
            self._ensure_open()
            segments = self._segments
            deletable: list[LogSegment] = []
            for i, seg in enumerate(segments):
                nxt = segments[i + 1] if i + 1 < len(segments) else None
                upper = nxt.base_offset if nxt is not None else self._leo
                if nxt is None and seg.size == 0:
                    break
                if not (self._hw >= upper and predicate(seg, nxt)):
                    break
                deletable.append(seg)
            if not deletable:
                return 0
            with self._writing("segment deletion"):
                if len(deletable) == len(segments):
                    self._roll(self._leo, self.clock())
                remaining = list(self._segments[len(deletable) :])
                self._set_segments(remaining)
                self._log_start = max(self._log_start, remaining[0].base_offset)
                for seg in deletable:
                    seg.delete()
            return len(deletable)

    def replace_segments(self, old: list[LogSegment], swap: Path) -> None:
        """Replace the consecutive closed segments ``old`` by their cleaned group ``swap``
        (``<first base>.log.swap``, with its ``.txnindex.swap``; see :mod:`.cleaner`): the old files are
        deleted (readers holding them keep reading the old bytes), the swap files take the first segment's
        names, its indexes are rebuilt."""
        with self._lock:
            self._ensure_open()
            segments = list(self._segments)
            i = segments.index(old[0]) if old[0] in segments else -1
            if i < 0 or segments[i : i + len(old)] != old or i + len(old) >= len(segments):
                discard_swap(swap)
                raise StorageError(
                    f"segments {old[0].log_path.name}.. ({len(old)}) of {self.name} are gone "
                    "or active; their cleaned copy is dropped"
                )
            base = old[0].base_offset
            with self._writing("cleaned segment swap"):
                finish_swap(self.dir, base, [s.base_offset for s in old])
                new = LogSegment.open(self.dir, base, self.config, self.clock())
                if new.recover().truncated_bytes:
                    raise StorageError(
                        f"the cleaned copy of {old[0].log_path.name} of {self.name} did not recover whole"
                    )
                new.flush()
            segments[i : i + len(old)] = [new]
            self._set_segments(segments)

    def last_records_of_active_producers(self) -> dict[int, tuple[int, int]]:
        """producer id -> (offset of its last data batch or -1, its epoch), for every producer the state
        tracks (Kafka's ``lastRecordsOfActiveProducers``): the batches the cleaner must keep."""
        with self._lock:
            return {
                pid: (entry.last_data_offset, entry.producer_epoch)
                for pid, entry in self._producer_state.producers.items()
            }

    def truncate_to(self, offset: int) -> None:
        """Drop every offset >= ``offset`` (replication). A batch holding ``offset`` is dropped whole."""
        with self._lock, self._writing("truncation"):
            self._ensure_open()
            if offset >= self._leo:
                return
            now = self.clock()
            if offset < self._log_start or offset <= self._segments[0].base_offset:
                self._start_empty_at(max(offset, 0), now)
            else:
                keep = [s for s in self._segments if s.base_offset <= offset]
                for seg in self._segments[len(keep) :]:
                    seg.delete()
                active = keep[-1]
                found = active.translate_offset(offset)
                new_leo = offset if found is None else min(offset, found[1].base_offset)
                active.truncate_to(offset)
                self._set_segments(keep)
                self._leo = new_leo
                self._rebuild_producer_state()
            self._hw = min(self._hw, self._leo) if not self.hw_follows_leo else self._leo
            self.recovery_point = min(self.recovery_point, self._leo)
            self._truncations += 1

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start over with one empty segment at ``offset`` (Kafka's
        ``truncateFullyAndStartAt``): log start = LEO = high watermark = recovery point = ``offset``.

        Used by a follower whose log end is below the leader's log start; ``offset`` may be anywhere, even
        below the current log start. The next append gets ``offset``.
        """
        if offset < 0:
            raise StorageError(f"cannot start {self.name} at negative offset {offset}")
        with self._lock, self._writing("full truncation"):
            self._ensure_open()
            now = self.clock()
            self._start_empty_at(offset, now)
            self._hw = self.recovery_point = offset
            self._truncations += 1
            self._unflushed = []
            self._last_flush_ms = now

    def _start_empty_at(self, offset: int, now: int) -> None:
        """Delete every segment; one empty segment at ``offset`` makes it the log start and the LEO, and the
        producer state forgets every producer. Caller holds the lock and sets the other offsets."""
        for seg in self._segments:
            seg.delete()
        self._set_segments([LogSegment.create(self.dir, offset, self.config, now)])
        fsync_dir(self.dir)
        self._leo = self._log_start = offset
        self._producer_state.truncate_fully_and_start_at(offset)

    # -- producer state ----------------------------------------------------------------------------------------

    @property
    def producer_state(self) -> ProducerStateManager:
        """The idempotent-producer state of this partition (read-only by convention; the log updates it)."""
        return self._producer_state

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; returns how many (a periodic task)."""
        with self._lock:
            return self._producer_state.remove_expired_producers(self.clock() if now_ms is None else now_ms)

    def _rebuild_producer_state(self) -> None:
        """Bring the producer state in line with ``[log start, LEO)`` (:func:`~.log_loader.rebuild_producer_state`).
        Caller holds the lock (or is loading)."""
        state = self._producer_state
        rebuild_producer_state(state, self._segments, self._log_start, self._leo, self.clock(), self.name)

    # -- flush and close ----------------------------------------------------------------------------------------

    def _flush_locked(self, now: int) -> None:
        for seg in self._unflushed:  # rolled, their own flush not done yet
            seg.flush()
        self._unflushed = []
        self._segments[-1].flush()
        self.recovery_point = self._leo
        self._last_flush_ms = now

    def flush(self) -> None:
        """fsync everything appended so far; the recovery point becomes the LEO."""
        with self._lock:
            self._ensure_open()
            with self._writing("flush"):
                self._flush_locked(self.clock())

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Flush when ``flush.ms`` passed since the last flush and something is unflushed (for a scheduler)."""
        with self._lock:
            if self._closed or self.dir_failure.offline is not None:
                return False  # offline: the failure was reported once, where it happened
            now = self.clock() if now_ms is None else now_ms
            if self.recovery_point < self._leo and now - self._last_flush_ms >= self.config.flush_ms:
                with self._writing("flush"):
                    self._flush_locked(now)
                return True
            return False

    def close(self) -> None:
        """Flush, snapshot the producer state at the LEO, write the final time-index entries and trim the
        indexes. Idempotent. Once the directories went offline it writes nothing (as close_without_flush)."""
        with self._lock:
            if self._closed:
                return
            if self.dir_failure.offline is not None:
                self._closed = True
                return
            # Not routed to dir_failure (see "Failed writes" in the module docstring): nothing writes this log
            # after its close, and the next load recovers what the close could not write.
            with contextlib.suppress(FileNotFoundError):
                self._flush_locked(self.clock())
            try:
                self._producer_state.take_snapshot(self._leo)
            except (StorageError, OSError) as exc:  # the next load replays the log instead
                _log.warning("%s: producer snapshot failed: %s", self.name, exc)
            for seg in self._segments:
                seg.close()
            self._closed = True

    def close_without_flush(self) -> None:
        """Mark closed without writing (the directory is about to be deleted)."""
        with self._lock:
            self._closed = True

    def _ensure_open(self) -> None:
        """Every read and write starts here: refused once the directories went offline, or the log closed."""
        self.dir_failure.check(f"log {self.name}")
        if self._closed:
            raise StorageError(f"log {self.name} is closed")

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.name}, start={self._log_start}, hw={self._hw}, "
            f"leo={self._leo}, segments={len(self._segments)})"
        )
