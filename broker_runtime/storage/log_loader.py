"""Loading a partition log from its directory: segments, indexes and producer state as they were at the last
fsync, recovered where a crash may have left them torn (Kafka's ``LogLoader`` and ``UnifiedLog.rebuildProducerState``).

Files read (the layout of :mod:`.segment`, :mod:`.producer_state` and :mod:`.segment_swap`): ``<base>.log`` with
its ``.index``, ``.timeindex`` and ``.txnindex``; ``<offset>.snapshot`` producer snapshots; and what a crash may
leave behind: ``.cleaned`` / ``.swap`` files of a clean, ``.deleted`` segment files, ``.tmp`` files.

Order (:func:`load_segments`):

1. a clean a crash interrupted is finished (``<base>.log.swap`` replaces the segments it groups) or undone
   (``.cleaned`` removed), see :func:`~.segment_swap.complete_swaps`; stray ``.deleted``/``.tmp`` files are
   removed; index files without a ``.log`` are dropped;
2. each segment's indexes get an O(1) sanity check and are rebuilt (the segment recovered) when missing or broken,
   wherever the recovery point is (Kafka does the same);
3. after an unclean shutdown, segments from the one holding the recovery point onwards are recovered batch by
   batch (size, magic, CRC, increasing offsets); at the first invalid byte the segment is cut and every later
   segment deleted (Kafka's rule: the log ends at the first invalid batch after the recovery point). Segments
   below the recovery point were fsynced before it moved past them and are not re-validated: corruption there is
   reported when it is read, not a reason to drop everything after it (the operator may ask for a full recovery,
   :class:`~.log_manager.LogManager`'s ``recover_all``). Every cut and every deletion is logged at WARNING
   (partition, segment, byte, offset, bytes dropped, why) and counted in :class:`LoadedSegments`;
4. an empty directory gets one empty segment at the log start offset; closed segments keep trimmed indexes, the
   active one is preallocated again;
5. the ``.txnindex`` of every recovered segment is emptied and the producer snapshots above the first recovered
   segment deleted: :func:`rebuild_producer_state` (which the partition log runs next) re-appends the entries of
   the ABORT markers it replays (entries already present are kept).

Producer state (:func:`rebuild_producer_state`, used at load and after a truncation): the newest usable snapshot
at or below the log end, then a replay of the later batch headers (:func:`replay_batch`, also how a follower's
appended batches reach the state). A cleanly closed log without any snapshot starts empty (Kafka's shortcut: no
full scan). Cost is proportional to the data after the recovery point (or the newest snapshot).

Threading: loading runs before the log is shared (no lock needed); :func:`rebuild_producer_state` and
:func:`replay_batch` run under the partition lock when the log is open.
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker_runtime.errors import PylogError
from broker_runtime.fsutil import fsync_dir
from broker_runtime.protocol.batch_header import BatchHeader
from broker_runtime.protocol.records import RecordBatch
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.producer_state import CompletedTxn, ProducerStateManager
from broker_runtime.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
    segment_path,
)
from broker_runtime.storage.segment_swap import CLEANED_SUFFIX, SWAP_SUFFIX, complete_swaps
from broker_runtime.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

__all__ = [
    "LoadedSegments",
    "index_aborted_txn",
    "load_segments",
    "read_control_marker",
    "rebuild_producer_state",
    "replay_batch",
]

_log = logging.getLogger(__name__)

_STRAY_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")


@dataclass(frozen=True, slots=True)
class LoadedSegments:
    """What :func:`load_segments` found: the segments (oldest first, the last one active) and the offsets."""

    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    #: Segments loading cut short (a truncated file, or a later segment deleted after such a cut) and the bytes
    #: they lost; each also logged at WARNING.
    truncations: int
    bytes_dropped: int


class _Loader:
    """One load of one partition directory (see the module docstring for the order)."""

    def __init__(self, dir: Path, name: str, config: LogConfig, now: int) -> None:
        self.dir = dir
        self.name = name
        self.config = config
        self.now = now
        self.truncations = 0
        self.bytes_dropped = 0

    def list_bases(self) -> list[int]:
        """Base offsets of the ``.log`` files, after removing stray files and orphaned indexes."""
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
        return bases

    def recover_segment(self, seg: LogSegment, why: str) -> int:
        """Recover one segment; a cut is logged at WARNING and counted. Returns bytes cut."""
        result = seg.recover()
        if result.truncated_bytes:
            self.truncations += 1
            self.bytes_dropped += result.truncated_bytes
            _log.warning(
                "%s: recovery truncated segment %s at byte %d, offset %d: %d byte(s) dropped (%s; recovered "
                "because %s)",
                self.name,
                seg.log_path.name,
                result.valid_bytes,
                result.next_offset,
                result.truncated_bytes,
                result.reason,
                why,
            )
        return result.truncated_bytes

    def drop_later_segment(self, seg: LogSegment, cut: LogSegment) -> None:
        """Delete a segment that follows a truncated one; logged at WARNING and counted."""
        size = seg.log_path.stat().st_size if seg.log_path.exists() else seg.size
        self.truncations += 1
        self.bytes_dropped += size
        _log.warning(
            "%s: recovery deleted segment %s (offsets from %d, %d byte(s)) because the earlier segment %s "
            "was truncated",
            self.name,
            seg.log_path.name,
            seg.base_offset,
            size,
            cut.log_path.name,
        )
        seg.delete()

    def open_segments(self, bases: list[int]) -> tuple[list[LogSegment], dict[int, int]]:
        """Every segment opened; those with missing or broken indexes recovered (base -> bytes cut)."""
        segments: list[LogSegment] = []
        truncated_by_base: dict[int, int] = {}
        for base in bases:
            seg = LogSegment.open(self.dir, base, self.config, self.now)
            try:
                seg.sanity_check_indexes()
            except (FileNotFoundError, PylogError) as exc:
                _log.info("%s: rebuilding the indexes of %s (%s)", self.name, seg.log_path.name, exc)
                truncated_by_base[base] = self.recover_segment(seg, "its index was missing or corrupt")
            segments.append(seg)
        return segments, truncated_by_base

    def recover_from(
        self, segments: list[LogSegment], first: int, truncated_by_base: dict[int, int], why: str
    ) -> None:
        """Recover ``segments[first:]`` (those not recovered yet); at the first cut, delete every later one."""
        for i in range(first, len(segments)):
            seg = segments[i]
            truncated = (
                truncated_by_base[seg.base_offset]
                if seg.base_offset in truncated_by_base
                else self.recover_segment(seg, why)
            )
            if truncated:
                for later in segments[i + 1 :]:
                    self.drop_later_segment(later, seg)
                del segments[i + 1 :]
                break
        for seg in segments[first:]:
            seg.flush()


def load_segments(
    dir: Path,
    name: str,
    config: LogConfig,
    now: int,
    producer_state: ProducerStateManager,
    *,
    recovery_point: int,
    log_start_offset: int,
    needs_recovery: bool,
) -> LoadedSegments:
    """Load the segments of the partition directory ``dir`` (``name`` = ``<topic>-<partition>`` in messages),
    recovering if ``needs_recovery``; prepares ``producer_state`` for :func:`rebuild_producer_state` (which the
    caller runs once the segments are in place)."""
    loader = _Loader(dir, name, config, now)
    bases = loader.list_bases()
    segments, truncated_by_base = loader.open_segments(bases)

    recovered = set(truncated_by_base)
    if needs_recovery and segments:
        first = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        recovered.update(seg.base_offset for seg in segments[first:])
        why = f"unclean shutdown, segment at or above the recovery point {recovery_point}"
        loader.recover_from(segments, first, truncated_by_base, why)

    if not segments:
        segments.append(LogSegment.create(dir, max(0, log_start_offset), config, now))
        fsync_dir(dir)
    else:
        # Closed segments keep trimmed indexes; the active one is preallocated again.
        for seg in segments[:-1]:
            if seg.offset_index.max_entries > seg.offset_index.entries:
                seg.offset_index.trim()
            if seg.time_index.max_entries > seg.time_index.entries:
                seg.time_index.trim()
        segments[-1].make_active()

    if recovered:
        # Their .txnindex entries are rebuilt by the producer-state replay, from a snapshot at or below the
        # first recovered segment (Kafka's recoverSegment does the same from its base offset).
        first_recovered = min(recovered)
        for seg in segments:
            if seg.base_offset >= first_recovered:
                seg.txn_index.truncate_to(seg.base_offset)
        producer_state.delete_snapshots_after(first_recovered)
    leo = segments[-1].read_next_offset()
    if not needs_recovery and producer_state.latest_snapshot_offset() is None:
        # Kafka's shortcut: a cleanly closed log without a snapshot had no producer state worth a full scan.
        producer_state.update_map_end_offset(leo)
    return LoadedSegments(
        segments,
        log_start_offset=min(max(log_start_offset, segments[0].base_offset), leo),
        log_end_offset=leo,
        recovery_point=leo if needs_recovery else min(max(recovery_point, 0), leo),
        truncations=loader.truncations,
        bytes_dropped=loader.bytes_dropped,
    )


def read_control_marker(segment: LogSegment, pos: int, header: BatchHeader) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of the control batch at ``pos`` of ``segment``; None for a data batch."""
    if not header.is_control:
        return None
    return RecordBatch(segment.pread(pos, header.size)).control_record()


def replay_batch(
    state: ProducerStateManager,
    header: BatchHeader,
    read_marker: Callable[[], tuple[int, int] | None],
    segment: LogSegment,
) -> None:
    """Feed one batch read back (or replicated) to the producer state; a marker that ends an aborted
    transaction indexes it in ``segment`` (the segment holding the marker)."""
    control = read_marker() if header.is_control else None
    completed = state.replay(
        header,
        coordinator_epoch=None if control is None else control[1],
        control_type=None if control is None else control[0],
    )
    if completed is not None:
        index_aborted_txn(state, completed, segment)


def index_aborted_txn(state: ProducerStateManager, completed: CompletedTxn, segment: LogSegment) -> None:
    """A marker ended a transaction: index it in ``segment`` (holding the marker) when it was aborted, with the
    last stable offset after it (Kafka's ``LogSegment.updateTxnIndex``). An entry already present (a replay over
    an intact index) is kept."""
    if not completed.is_aborted or completed.last_offset <= segment.txn_index.last_offset:
        return
    lso = state.last_stable_offset_after(completed)
    segment.txn_index.append(
        AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)
    )


def rebuild_producer_state(
    state: ProducerStateManager,
    segments: tuple[LogSegment, ...],
    log_start: int,
    leo: int,
    now: int,
    name: str,
) -> None:
    """Bring ``state`` in line with ``[log_start, leo)`` of ``segments``: the newest usable snapshot, then a
    replay of the later batch headers (Kafka's ``rebuildProducerState``)."""
    start = max(state.truncate_and_reload(log_start, leo, now), log_start)
    if start < leo:
        i = max(0, bisect.bisect_right([s.base_offset for s in segments], start) - 1)
        replayed = 0
        for seg in segments[i:]:
            position = seg.lookup(start).position if seg.base_offset <= start else 0
            for pos, header in seg.scan(position, seg.size):
                if header.last_offset >= start:
                    replay_batch(state, header, functools.partial(read_control_marker, seg, pos, header), seg)
                    replayed += 1
        _log.info("%s: producer state rebuilt from %d batch(es)", name, replayed)
    state.update_map_end_offset(leo)
