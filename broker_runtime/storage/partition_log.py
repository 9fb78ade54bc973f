"""The log of one partition: an ordered run of segments under ``<log.dir>/<topic>-<partition>/`` (Kafka's
``UnifiedLog`` + ``LocalLog`` + ``LogLoader``, single replica).

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
relative offset. Rolling finalizes the old segment (last time-index entry, trimmed indexes) and creates the new
files; then the old segment is fsynced, the directory fsynced, and the recovery point moved to the new base
offset. With :attr:`PartitionLog.flush_executor` set (the log manager sets it) those fsyncs run on that
executor's thread, as Kafka schedules its ``flush-log`` task after a roll, so the appending thread (the
broker's event loop) does not wait for the disk: fsyncing a segment of ``segment.bytes`` of dirty pages may take
seconds. Until that task ends the rolled segment is listed as unflushed and the recovery point stays below it;
an explicit :meth:`PartitionLog.flush` or :meth:`PartitionLog.close` fsyncs unflushed segments itself first.
A truncation meanwhile wins: the task then leaves the recovery point alone (the truncation lowered it). A failed
fsync is logged at WARNING and leaves the recovery point where it was (a crash recovers those segments). The
roll's producer snapshot follows the same path: the state is encoded under the lock at the roll (CPU only), and
the task writes it as ``<new base>.snapshot`` only after the segment and directory fsyncs (a snapshot never
claims offsets whose batches are not durable) and before it moves the recovery point: a temporary file written
and fsynced outside the lock, renamed under it unless a truncation or close came in between (those rebuild or
write the state themselves), then the directory fsynced. A failed snapshot write is logged at WARNING and the
recovery point still moves (the next load replays from an older snapshot). Failures of either kind are reported
to :attr:`PartitionLog.on_flush_failure` (the log manager counts them for the metrics).

Flush: fsync when ``flush.messages`` messages are unflushed or ``flush.ms`` passed since the last flush (both
default to never: the page cache, as Kafka), on roll and on close. Everything below the recovery point is on disk.

Retention (:meth:`PartitionLog.run_retention`): delete the oldest segments while ``now - largest timestamp >
retention.ms``, while the log minus the segment is still >= ``retention.bytes``, or while the next segment starts
at or below the log start offset -- never a segment holding offsets at or above the high watermark, never the
active segment unless it is non-empty (then the log rolls first). The log start offset becomes the first
remaining base offset. Time and size apply only when ``cleanup.policy`` holds ``delete`` (Kafka's rule): a
compact-only log keeps its segments (the log cleaner, :mod:`.cleaner`, removes superseded records instead).
Deleted segment files are renamed to ``.deleted`` and unlinked right away. :meth:`PartitionLog.replace_segments`
replaces consecutive closed segments by their cleaned group under the lock.

Loading (:meth:`PartitionLog.load`): a clean a crash interrupted is finished (``<base>.log.swap`` replaces
the segments it groups) or undone (``.cleaned`` removed) first, see :mod:`.cleaner`; stray ``.deleted``/``.tmp`` files are
removed,
index files without a ``.log`` are dropped; each segment's indexes get an O(1) sanity check and are rebuilt
when missing or broken. After an unclean shutdown, segments from the one holding the recovery point onwards are
recovered batch by batch (size, magic, CRC, increasing offsets); at the first invalid byte the segment is cut
and every later segment deleted (Kafka's LogLoader). Segments below the recovery point were fsynced before it
moved past them and are not re-validated: corruption there is reported when it is read, not a reason to drop
everything after it (the operator may ask for a full recovery, :class:`~.log_manager.LogManager`'s
``recover_all``). Every cut and every deletion is logged at WARNING (partition, segment, byte, offset, bytes
dropped, why) and counted in :attr:`PartitionLog.recovery_truncations` / ``recovery_bytes_dropped``. A roll moves
the recovery point and calls :attr:`PartitionLog.on_roll` (the manager persists it at once). Cost is
proportional to the data after the recovery point.

Producer state (Kafka's ``UnifiedLog`` owning its ``ProducerStateManager``, see :mod:`.producer_state`): the log
owns the partition's idempotent-producer state and keeps it equal to its batches below the LEO.
:meth:`PartitionLog.append` checks an idempotent set first: a duplicate of a retained batch returns an
:class:`AppendInfo` marked ``duplicate`` with the original offsets (nothing written); an out-of-order sequence or
a fenced epoch raises :class:`~broker_runtime.errors.ProducerStateError`; otherwise each batch is recorded with
the offsets it got. :meth:`PartitionLog.append_as_follower` records the leader's batches unvalidated, so a
follower that becomes leader recognises retries. Truncation rebuilds the state (newest snapshot at or below the
new LEO, then a replay of the later batch headers); a full truncation forgets every producer. Snapshots
(``<offset, 20 digits>.snapshot`` in the partition directory, the two newest kept) are written after a roll (at
the new segment's base offset, by the roll-flush task: see "Roll") and on close (at the LEO). Loading restores the newest snapshot and replays the batch
headers after it; a cleanly closed log without any snapshot starts empty (Kafka's shortcut: no full scan).
:meth:`PartitionLog.remove_expired_producers` forgets producers whose last batch timestamp is older than
``producer.id.expiration.ms``.

Transactions (Kafka's ``UnifiedLog`` with its ``ProducerStateManager`` and ``TransactionIndex``): the producer
state tracks the open transaction of each producer (first offset of its first transactional batch here); a
control batch (COMMIT/ABORT marker, written by the transaction coordinator) closes it. The last stable offset
(:attr:`PartitionLog.last_stable_offset`) is ``min(high watermark, first offset of the earliest open
transaction)``, never below the log start offset. When an ABORT marker is appended (leader or follower), an
entry ``(producer id, first offset, marker offset, last stable offset after it)`` goes to the ``.txnindex`` of
the segment holding the marker; :meth:`PartitionLog.collect_aborted_transactions` gathers the entries of the
transactions overlapping a fetched range from the segment holding the fetch offset onwards (Kafka's
``collectAbortedTransactions``). Recovery rebuilds them: the ``.txnindex`` of every recovered segment is emptied,
the producer snapshots above the first recovered segment are deleted, and the replay of the batch headers from
the remaining snapshot re-appends the entries of the ABORT markers it meets (entries already present are kept).
Retention follows Kafka: segments go only below the high watermark (an open transaction's first batches may
go with them, then the last stable offset is the log start offset).

Thread-safety: the roll-flush task (above) runs on the executor's thread: it fsyncs and writes the producer
snapshot outside the lock and takes the lock to read the unflushed list, to rename the snapshot into place and
to move the recovery point. One re-entrant lock per partition serializes every mutation (append, roll, truncate, retention,
flush, offset updates, producer state). Reads take the lock only to snapshot (segments, LEO, HW, log start,
active size) and do their I/O outside it: closed segments are immutable, and active-segment reads stay below the
snapshot size. Callers must not read offsets at or above a truncation point while :meth:`PartitionLog.truncate_to` runs
(replication truncates only above the high watermark, which fetches do not cross).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

from broker_runtime.errors import (
    ErrorCode,
    OffsetOutOfRangeError,
    ProducerStateError,
    PylogError,
    StorageError,
)
from broker_runtime.fsutil import fsync_dir
from broker_runtime.protocol.batch_header import (
    BatchHeader,
    iter_batch_spans,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from broker_runtime.protocol.records import RecordBatch
from broker_runtime.storage.cleaner import complete_swaps, finish_swap
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.file_handle import FileSlice
from broker_runtime.storage.producer_state import (
    BatchMetadata,
    CompletedTxn,
    ProducerStateManager,
    snapshot_path,
)
from broker_runtime.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
    segment_path,
)
from broker_runtime.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

__all__ = ["AppendInfo", "FetchData", "PartitionLog", "default_clock"]

_log = logging.getLogger(__name__)

_STRAY_SUFFIXES = (DELETED_SUFFIX, ".cleaned", ".swap", ".tmp")
_INT32_MAX = 2**31 - 1


def _control_marker(buf: memoryview, pos: int, header: BatchHeader) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of a control batch at ``pos`` of ``buf``; None for a data batch."""
    if not header.is_control:
        return None
    return RecordBatch(buf[pos : pos + header.size]).control_record()


def _read_control_marker(segment: LogSegment, pos: int, header: BatchHeader) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of the control batch at ``pos`` of ``segment``."""
    if not header.is_control:
        return None
    return RecordBatch(segment.pread(pos, header.size)).control_record()


def default_clock() -> int:
    """Wall-clock milliseconds."""
    return int(time.time() * 1000)


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


@dataclass(frozen=True, slots=True)
class FetchData:
    """Whole batches read from one segment."""

    #: Whole record batches (empty at the end of the readable range).
    records: bytes
    #: Base offset of the first returned batch (the fetch offset when nothing is returned).
    first_offset: int
    high_watermark: int
    log_start_offset: int
    #: Offset after the last returned batch (the fetch offset when nothing is returned).
    next_offset: int = -1
    #: ``(.log path, start byte, end byte)`` of the returned batches in their segment file, or None.
    file_range: tuple[Path, int, int] | None = None
    #: The returned batches as a slice of the segment's open file, not read (``records`` is then empty): see
    #: ``slice_min_bytes`` of :meth:`PartitionLog.read`.
    file_slice: FileSlice | None = None

    @property
    def size(self) -> int:
        """Bytes returned (in ``records`` or ``file_slice``)."""
        return len(self.records) if self.file_slice is None else len(self.file_slice)


class _Snapshot:
    __slots__ = ("active_size", "bases", "hw", "leo", "log_start", "segments")

    def __init__(self, log: PartitionLog) -> None:
        self.segments = log._segments
        self.bases = log._bases
        self.leo = log._leo
        self.hw = log._hw
        self.log_start = log._log_start
        self.active_size = log._segments[-1].size


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
        self.config = config
        self._clock = clock or default_clock
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
        #: bytes they lost; each also logged at WARNING (see the module docstring, "Loading").
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
        #: Rolled segments whose fsync has not finished yet, oldest first.
        self._unflushed: list[LogSegment] = []
        #: Bumped by every truncation: a roll flush that started before one does not move the recovery point.
        self._truncations = 0
        self._last_flush_ms = self._clock()
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
        now = self._clock()
        complete_swaps(self.dir)
        bases: list[int] = []
        index_bases: set[int] = set()
        for entry in os.scandir(self.dir):
            name = entry.name
            if any(name.endswith(s) for s in _STRAY_SUFFIXES):
                os.unlink(entry.path)
                continue
            parsed = parse_segment_file_name(name)
            if parsed is None:
                continue
            if parsed[1] == LOG_SUFFIX:
                bases.append(parsed[0])
            elif parsed[1] in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                index_bases.add(parsed[0])
        bases.sort()
        for base in index_bases.difference(bases):  # orphaned index files
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                segment_path(self.dir, base, suffix).unlink(missing_ok=True)

        segments: list[LogSegment] = []
        truncated_by_base: dict[int, int] = {}
        for base in bases:
            seg = LogSegment.open(self.dir, base, self.config, now)
            try:
                seg.sanity_check_indexes()
            except (FileNotFoundError, PylogError) as exc:
                # Kafka's LogLoader does the same: a segment whose index is missing or broken is recovered
                # (indexes rebuilt, the file cut at its first invalid batch), wherever the recovery point is.
                _log.info(
                    "%s-%d: rebuilding the indexes of %s (%s)",
                    self.topic,
                    self.partition,
                    seg.log_path.name,
                    exc,
                )
                truncated_by_base[base] = self._recover_segment(seg, "its index was missing or corrupt")
            segments.append(seg)

        recovered = set(truncated_by_base)
        if needs_recovery and segments:
            first = max(0, bisect.bisect_right(bases, recovery_point) - 1)
            recovered.update(seg.base_offset for seg in segments[first:])
            for i in range(first, len(segments)):
                seg = segments[i]
                truncated = (
                    truncated_by_base[seg.base_offset]
                    if seg.base_offset in truncated_by_base
                    else self._recover_segment(
                        seg, f"unclean shutdown, segment at or above the recovery point {recovery_point}"
                    )
                )
                if truncated:
                    for later in segments[i + 1 :]:
                        self._drop_later_segment(later, seg)
                    del segments[i + 1 :]
                    break
            for seg in segments[first:]:
                seg.flush()

        if not segments:
            segments.append(LogSegment.create(self.dir, max(0, log_start), self.config, now))
            fsync_dir(self.dir)
        else:
            # Closed segments keep trimmed indexes; the active one is preallocated again.
            for seg in segments[:-1]:
                if seg.offset_index.max_entries > seg.offset_index.entries:
                    seg.offset_index.trim()
                if seg.time_index.max_entries > seg.time_index.entries:
                    seg.time_index.trim()
            segments[-1].make_active()

        if recovered:
            # Their .txnindex entries are rebuilt by the producer-state replay below, from a snapshot at or
            # below the first recovered segment (Kafka's recoverSegment does the same from its base offset).
            first_recovered = min(recovered)
            for seg in segments:
                if seg.base_offset >= first_recovered:
                    seg.txn_index.truncate_to(seg.base_offset)
            self._producer_state.delete_snapshots_after(first_recovered)
        self._set_segments(segments)
        self._leo = segments[-1].read_next_offset()
        self._log_start = min(max(log_start, segments[0].base_offset), self._leo)
        self.recovery_point = self._leo if needs_recovery else min(max(recovery_point, 0), self._leo)
        if self.hw_follows_leo:
            self._hw = self._leo
        else:
            self._hw = min(max(0 if hw is None else hw, self._log_start), self._leo)
        if not needs_recovery and self._producer_state.latest_snapshot_offset() is None:
            # Kafka's shortcut: a cleanly closed log without a snapshot had no producer state worth a full scan.
            self._producer_state.update_map_end_offset(self._leo)
        self._rebuild_producer_state()

    def _recover_segment(self, seg: LogSegment, why: str) -> int:
        """Recover one segment while loading; a cut is logged at WARNING and counted. Returns bytes cut."""
        result = seg.recover()
        if result.truncated_bytes:
            self.recovery_truncations += 1
            self.recovery_bytes_dropped += result.truncated_bytes
            _log.warning(
                "%s-%d: recovery truncated segment %s at byte %d, offset %d: %d byte(s) dropped (%s; recovered "
                "because %s)",
                self.topic,
                self.partition,
                seg.log_path.name,
                result.valid_bytes,
                result.next_offset,
                result.truncated_bytes,
                result.reason,
                why,
            )
        return result.truncated_bytes

    def _drop_later_segment(self, seg: LogSegment, cut: LogSegment) -> None:
        """Delete a segment that follows a truncated one (Kafka's rule: the log ends at the first invalid
        batch after the recovery point); logged at WARNING and counted."""
        size = seg.log_path.stat().st_size if seg.log_path.exists() else seg.size
        self.recovery_truncations += 1
        self.recovery_bytes_dropped += size
        _log.warning(
            "%s-%d: recovery deleted segment %s (offsets from %d, %d byte(s)) because the earlier segment %s "
            "was truncated",
            self.topic,
            self.partition,
            seg.log_path.name,
            seg.base_offset,
            size,
            cut.log_path.name,
        )
        seg.delete()

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self._segments = tuple(segments)
        self._bases = tuple(s.base_offset for s in segments)

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
                self._check_coordinator_epochs(buf, spans)
            now = self._clock()
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
                        self._on_txn_completed(completed, self._segments[-1])
            producer_state.update_map_end_offset(self._leo)
            return AppendInfo(
                first, offset - 1, now if log_append else -1, max_ts, offset_of_max, len(spans), buf.nbytes
            )

    def _check_coordinator_epochs(self, buf: memoryview, spans: list[tuple[int, BatchHeader]]) -> None:
        """A transaction marker from an older coordinator epoch than the producer's last marker is refused
        (Kafka's TRANSACTION_COORDINATOR_FENCED: a coordinator that lost its partition must not end a
        transaction its successor already ended)."""
        for pos, header in spans:
            control = _control_marker(buf, pos, header)
            if control is None:
                continue
            entry = self._producer_state.last_entry(header.producer_id)
            if entry is not None and control[1] < entry.coordinator_epoch:
                raise ProducerStateError(
                    ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                    f"{self.dir.name}: marker of producer {header.producer_id} from coordinator epoch {control[1]}, "
                    f"older than the epoch {entry.coordinator_epoch} of its last marker",
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
            now = self._clock()
            expected = self._leo
            max_ts, offset_of_max = -1, spans[0][1].base_offset if spans else expected
            for pos, header in spans:
                if header.base_offset < expected:
                    raise StorageError(
                        f"batch at position {pos} has base offset {header.base_offset}, "
                        f"below the expected offset {expected} of {self.topic}-{self.partition}"
                    )
                if header.max_timestamp > max_ts:
                    max_ts, offset_of_max = header.max_timestamp, header.last_offset
                expected = header.next_offset
            first = spans[0][1].base_offset
            self._append_set(buf, first, expected - 1, max_ts, offset_of_max, now)
            for pos, header in spans:
                if header.producer_id >= 0:
                    self._replay(
                        header, functools.partial(_control_marker, buf, pos, header), self._segments[-1]
                    )
            self._producer_state.update_map_end_offset(self._leo)
            return AppendInfo(first, expected - 1, -1, max_ts, offset_of_max, len(spans), buf.nbytes)

    def _replay(
        self,
        header: BatchHeader,
        read_marker: Callable[[], tuple[int, int] | None],
        segment: LogSegment,
    ) -> None:
        """Feed one batch read back (or replicated) to the producer state, indexing an aborted transaction."""
        control = read_marker() if header.is_control else None
        completed = self._producer_state.replay(
            header,
            coordinator_epoch=None if control is None else control[1],
            control_type=None if control is None else control[0],
        )
        if completed is not None:
            self._on_txn_completed(completed, segment)

    def _on_txn_completed(self, completed: CompletedTxn, segment: LogSegment) -> None:
        """A marker ended a transaction: index it in ``segment`` (holding the marker) when it was aborted.

        Kafka's ``LogSegment.updateTxnIndex``. An entry already present (a replay over an intact index) is kept.
        """
        if not completed.is_aborted or completed.last_offset <= segment.txn_index.last_offset:
            return
        lso = self._producer_state.last_stable_offset_after(completed)
        segment.txn_index.append(
            AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)
        )

    def _append_set(
        self, buf: memoryview, first: int, last: int, max_ts: int, offset_of_max: int, now: int
    ) -> None:
        size = buf.nbytes
        if size > self.config.segment_bytes:
            raise StorageError(
                f"record set of {size} bytes for {self.topic}-{self.partition} exceeds segment.bytes "
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
        came in between); see "Roll" in the module docstring."""
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
                "%s-%d: fsync after rolling at offset %d failed, the recovery point stays at %d: %s",
                self.topic,
                self.partition,
                target,
                self.recovery_point,
                exc,
            )
            self._flush_failed("segment")
            return
        if snapshot is not None:
            self._write_roll_snapshot(target, truncations, snapshot)
        with self._lock:
            done = set(map(id, pending))
            self._unflushed = [seg for seg in self._unflushed if id(seg) not in done]
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
        A failure is logged at WARNING and counted; a later load then replays from an older snapshot."""
        path = snapshot_path(self.dir, target)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.roll.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(snapshot)
                f.flush()
                os.fsync(f.fileno())
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
                "%s-%d: writing the producer snapshot %s after a roll failed: %s",
                self.topic,
                self.partition,
                path.name,
                exc,
            )
            self._flush_failed("producer snapshot")

    def _flush_failed(self, what: str) -> None:
        if self.on_flush_failure is not None:
            self.on_flush_failure(what)

    def roll(self) -> None:
        """Force a roll now (no-op when the active segment is empty)."""
        with self._lock:
            if self._segments[-1].size:
                self._roll(self._leo, self._clock())

    # -- reads -------------------------------------------------------------------------------------------------

    def _snapshot(self) -> _Snapshot:
        with self._lock:
            self._ensure_open()
            return _Snapshot(self)

    def _check_range(self, offset: int, snap: _Snapshot) -> None:
        if offset < snap.log_start or offset > snap.leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{snap.log_start}, {snap.leo}] of {self.topic}-{self.partition}"
            )

    @staticmethod
    def _segment_end(snap: _Snapshot, i: int) -> int:
        return snap.active_size if i == len(snap.segments) - 1 else snap.segments[i].size

    def _end_position(self, snap: _Snapshot, i: int, end_offset: int, start_pos: int) -> int:
        """Byte position in segment ``i`` before which every batch ends below ``end_offset``."""
        seg = snap.segments[i]
        seg_end = self._segment_end(snap, i)
        next_base = snap.bases[i + 1] if i + 1 < len(snap.bases) else snap.leo
        if end_offset >= next_base:
            return seg_end
        found = seg.translate_offset(end_offset, start_pos, seg_end)
        return seg_end if found is None else found[0]

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        slice_min_bytes: int | None = None,
    ) -> FetchData:
        """Whole batches from the one holding ``start_offset``, within ``max_bytes`` and below ``max_offset``.

        Reads one segment per call (as Kafka does). With ``min_one_batch`` the first batch is returned even when
        it alone exceeds ``max_bytes``. Raises OffsetOutOfRangeError outside [log start, LEO]. With
        ``slice_min_bytes``, a range of at least that many bytes is not read: it is returned as
        :attr:`FetchData.file_slice` (the segment's open file, valid after a deletion; see
        :class:`~.file_handle.FileSlice`) for a writer that sends it with ``sendfile``.
        """
        snap = self._snapshot()
        self._check_range(start_offset, snap)
        end_offset = snap.leo if max_offset is None else min(max_offset, snap.leo)
        empty = FetchData(b"", start_offset, snap.hw, snap.log_start, start_offset)
        if start_offset >= end_offset or max_bytes < 0:
            return empty
        i = max(0, bisect.bisect_right(snap.bases, start_offset) - 1)
        try:
            while i < len(snap.segments):
                seg = snap.segments[i]
                seg_end = self._segment_end(snap, i)
                found = seg.translate_offset(start_offset, 0, seg_end)
                if found is None:
                    i += 1
                    continue
                pos, header = found
                if header.base_offset >= end_offset:
                    return empty
                max_pos = self._end_position(snap, i, end_offset, pos)
                if pos + header.size > max_pos:
                    return empty
                budget = max(max_bytes, header.size) if min_one_batch else max_bytes
                limit = min(max_pos, pos + budget)
                if limit < pos + header.size:
                    return empty
                end, last = seg.last_batch_in(pos, limit)
                if slice_min_bytes is not None and end - pos >= slice_min_bytes and last is not None:
                    return FetchData(
                        b"",
                        header.base_offset,
                        snap.hw,
                        snap.log_start,
                        last.next_offset,
                        (seg.log_path, pos, end),
                        seg.file_slice(pos, end - pos),
                    )
                data = seg.pread(pos, end - pos)
                if len(data) != end - pos or last is None:
                    raise OffsetOutOfRangeError(
                        f"segment {seg.log_path.name} of {self.topic}-{self.partition} shrank during a read"
                    )
                next_offset = last.next_offset
                return FetchData(
                    data, header.base_offset, snap.hw, snap.log_start, next_offset, (seg.log_path, pos, end)
                )
        except FileNotFoundError:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} of {self.topic}-{self.partition} was deleted during the read"
            ) from None
        return empty

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound)`` (Kafka's
        ``collectAbortedTransactions``): the ``.txnindex`` entries of the segment holding ``start_offset`` and
        every later one, oldest first."""
        snap = self._snapshot()
        i = max(0, bisect.bisect_right(snap.bases, start_offset) - 1)
        found: list[AbortedTxn] = []
        for seg in snap.segments[i:]:
            found.extend(seg.txn_index.collect(start_offset, upper_bound))
        return found

    def position_for(self, offset: int) -> tuple[Path, int] | None:
        """(.log path, byte position) of the batch holding ``offset`` (or the first after it); None at the LEO.

        Segment by binary search over base offsets, then the offset index, then a short header walk.
        """
        snap = self._snapshot()
        self._check_range(offset, snap)
        i = max(0, bisect.bisect_right(snap.bases, offset) - 1)
        while i < len(snap.segments):
            seg = snap.segments[i]
            found = seg.translate_offset(offset, 0, self._segment_end(snap, i))
            if found is not None:
                return seg.log_path, found[0]
            i += 1
        return None

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp_ms`` (ListOffsets); None if none."""
        snap = self._snapshot()
        for seg in snap.segments:
            if seg.largest_timestamp() >= timestamp_ms:
                found = seg.find_offset_by_timestamp(timestamp_ms, snap.log_start)
                if found is not None and found.offset < snap.leo:
                    return found.offset, found.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the largest timestamp (ListOffsets -3); None if empty."""
        snap = self._snapshot()
        best: LogSegment | None = None
        for seg in snap.segments:
            if seg.size and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                best = seg
        if best is None:
            return None
        found = best.exact_offset_of_max_timestamp()
        return None if found is None else (found.offset, found.timestamp)

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
                    f"cannot move the log start offset of {self.topic}-{self.partition} to {offset}: "
                    f"it must be within [0, high watermark {self._hw}]"
                )
            if offset > self._log_start:
                self._log_start = offset
                self._delete_old_segments(
                    lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start
                )
            return self._log_start

    def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass (time, size, log start); returns the number of segments deleted.

        As Kafka's ``UnifiedLog.deleteOldSegments``: time and size retention apply only when ``cleanup.policy``
        holds ``delete``; a compact-only log loses segments only below its log start offset."""
        with self._lock:
            self._ensure_open()
            now = self._clock() if now_ms is None else now_ms
            deleted = 0
            retention_ms = self.config.retention_ms if self.config.delete else -1
            retention_bytes = self.config.retention_bytes if self.config.delete else -1
            if retention_ms >= 0:
                deleted += self._delete_old_segments(
                    lambda seg, nxt: now - seg.largest_timestamp() > retention_ms
                )
            if retention_bytes >= 0:
                excess = self.size_bytes - retention_bytes

                def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                    nonlocal excess
                    if excess - seg.size >= 0:
                        excess -= seg.size
                        return True
                    return False

                if excess > 0:
                    deleted += self._delete_old_segments(over_size)
            deleted += self._delete_old_segments(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start
            )
            return deleted

    def _delete_old_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
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
        if len(deletable) == len(segments):
            self._roll(self._leo, self._clock())
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
                swap.unlink(missing_ok=True)
                swap.with_name(swap.name.replace(LOG_SUFFIX, TXN_INDEX_SUFFIX)).unlink(missing_ok=True)
                raise StorageError(
                    f"segments {old[0].log_path.name}.. ({len(old)}) of {self.topic}-{self.partition} are gone "
                    "or active; their cleaned copy is dropped"
                )
            base = old[0].base_offset
            finish_swap(self.dir, base, [s.base_offset for s in old])
            new = LogSegment.open(self.dir, base, self.config, self._clock())
            if new.recover().truncated_bytes:
                raise StorageError(
                    f"the cleaned copy of {old[0].log_path.name} of {self.topic}-{self.partition} "
                    "did not recover whole"
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
        with self._lock:
            self._ensure_open()
            if offset >= self._leo:
                return
            now = self._clock()
            if offset < self._log_start or offset <= self._segments[0].base_offset:
                for seg in self._segments:
                    seg.delete()
                start = max(offset, 0)
                self._set_segments([LogSegment.create(self.dir, start, self.config, now)])
                fsync_dir(self.dir)
                self._leo = self._log_start = start
                self._producer_state.truncate_fully_and_start_at(start)
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
            raise StorageError(f"cannot start {self.topic}-{self.partition} at negative offset {offset}")
        with self._lock:
            self._ensure_open()
            now = self._clock()
            for seg in self._segments:
                seg.delete()
            self._set_segments([LogSegment.create(self.dir, offset, self.config, now)])
            fsync_dir(self.dir)
            self._leo = self._log_start = self._hw = offset
            self.recovery_point = offset
            self._truncations += 1
            self._unflushed = []
            self._last_flush_ms = now
            self._producer_state.truncate_fully_and_start_at(offset)

    # -- producer state ----------------------------------------------------------------------------------------

    @property
    def producer_state(self) -> ProducerStateManager:
        """The idempotent-producer state of this partition (read-only by convention; the log updates it)."""
        return self._producer_state

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; returns how many (a periodic task)."""
        with self._lock:
            return self._producer_state.remove_expired_producers(self._clock() if now_ms is None else now_ms)

    def _rebuild_producer_state(self) -> None:
        """Bring the producer state in line with ``[log start, LEO)``: newest usable snapshot, then a replay of
        the later batch headers (Kafka's ``rebuildProducerState``). Caller holds the lock (or is loading)."""
        state = self._producer_state
        start = max(state.truncate_and_reload(self._log_start, self._leo, self._clock()), self._log_start)
        if start < self._leo:
            i = max(0, bisect.bisect_right(self._bases, start) - 1)
            replayed = 0
            for seg in self._segments[i:]:
                position = seg.lookup(start).position if seg.base_offset <= start else 0
                for pos, header in seg.scan(position, seg.size):
                    if header.last_offset >= start:
                        self._replay(header, functools.partial(_read_control_marker, seg, pos, header), seg)
                        replayed += 1
            _log.info("%s-%d: producer state rebuilt from %d batch(es)", self.topic, self.partition, replayed)
        state.update_map_end_offset(self._leo)

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
            self._flush_locked(self._clock())

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Flush when ``flush.ms`` passed since the last flush and something is unflushed (for a scheduler)."""
        with self._lock:
            if self._closed:
                return False
            now = self._clock() if now_ms is None else now_ms
            if self.recovery_point < self._leo and now - self._last_flush_ms >= self.config.flush_ms:
                self._flush_locked(now)
                return True
            return False

    def close(self) -> None:
        """Flush, snapshot the producer state at the LEO, write the final time-index entries and trim the
        indexes. Idempotent."""
        with self._lock:
            if self._closed:
                return
            with contextlib.suppress(FileNotFoundError):
                self._flush_locked(self._clock())
            try:
                self._producer_state.take_snapshot(self._leo)
            except (StorageError, OSError) as exc:  # the next load replays the log instead
                _log.warning("%s-%d: producer snapshot failed: %s", self.topic, self.partition, exc)
            for seg in self._segments:
                seg.close()
            self._closed = True

    def close_without_flush(self) -> None:
        """Mark closed without writing (the directory is about to be deleted)."""
        with self._lock:
            self._closed = True

    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.topic}-{self.partition} is closed")

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, start={self._log_start}, hw={self._hw}, "
            f"leo={self._leo}, segments={len(self._segments)})"
        )
