"""Log compaction of one partition log (Kafka's ``Cleaner`` / ``LogCleanerManager``), one segment at a time.

What is cleaned: the closed segments below the *first uncleanable offset* = min(base offset of the active
segment, high watermark, last stable offset, base offset of the first segment whose largest timestamp is newer
than ``now - min.compaction.lag.ms``); whole segments only. The *dirty* section starts at the first dirty offset
(the log's entry in ``cleaner-offset-checkpoint``, at least the log start offset); everything before it is the
*clean* section (cleaned by an earlier pass).

When: the dirty section's share of the cleanable bytes is at least ``min.cleanable.dirty.ratio``, or a dirty
segment's first batch is older than ``now - max.compaction.lag.ms``.

How (Kafka's rules, pylog's simplifications named):
  * the offset map holds, per key, the last offset of that key in the dirty section (a dict of the key bytes,
    not Kafka's fixed-size hash map: memory grows with the dirty key set);
  * every cleanable segment (clean and dirty) is rewritten keeping a record when its key is null, or when no
    later offset of its key is in the map; a tombstone (null value) is dropped as well once it lies in the clean
    section and its segment's largest timestamp is older than ``now - delete.retention.ms``;
  * offsets are kept (gaps are legal); a batch keeps its base offset, lastOffsetDelta, timestamps, producer
    id/epoch/base sequence and codec; a batch of an idempotent producer that loses every record stays as an
    empty batch (so producer state rebuilt from the log keeps its sequence), other emptied batches go;
  * simplification: a segment holding any transactional or control batch is left whole, and transactional
    records never enter the offset map, so no transaction's data (open, committed or aborted) or marker is
    ever removed, and a non-transactional record is only superseded by a later non-transactional one.

Crash safety (Kafka's file suffixes): the replacement of segment ``B`` is written to ``B.log.cleaned`` and
fsynced, renamed to ``B.log.swap`` (directory fsynced), then -- under the partition lock, the only time the
cleaner holds it -- the old segment's files are deleted and ``B.log.swap`` renamed to ``B.log``.
:func:`complete_swaps` (called when a log loads, before stray files are removed) finishes a swap a crash
interrupted: a ``.swap`` is a complete cleaned segment, so it replaces ``B.log`` and the indexes are rebuilt; a
``.cleaned`` file is an unfinished clean and is deleted.

Threading: :func:`clean_log` reads closed segments (immutable) without the partition lock and takes it per swap
through :meth:`~broker_runtime.storage.partition_log.PartitionLog.swap_cleaned_segment`; one cleaner per log at a
time (the log manager runs one cleaner thread).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker_runtime.fsutil import fsync_dir
from broker_runtime.protocol import compression as _compression
from broker_runtime.protocol.batch_header import ATTR_COMPRESSION_MASK, BatchHeader
from broker_runtime.protocol.records import RecordBatch, assemble_batch, encode_record
from broker_runtime.storage.segment import LOG_SUFFIX, LogSegment, parse_segment_file_name, segment_path

if TYPE_CHECKING:
    from broker_runtime.storage.partition_log import PartitionLog

__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "CleanResult", "clean_log", "complete_swaps"]

_log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


@dataclass(frozen=True)
class CleanResult:
    """What one pass did: the new first dirty offset, bytes before/after, records removed."""

    first_dirty_offset: int
    bytes_read: int
    bytes_written: int
    records_removed: int


def complete_swaps(dir: Path) -> None:
    """Finish or undo a clean a crash interrupted (see the module docstring). Called before a log loads."""
    for entry in sorted(os.scandir(dir), key=lambda e: e.name):
        name = entry.name
        if name.endswith(LOG_SUFFIX + CLEANED_SUFFIX):
            os.unlink(entry.path)
        elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            parsed = parse_segment_file_name(name[: -len(SWAP_SUFFIX)])
            if parsed is None:
                continue
            base = parsed[0]
            _log.info("%s/%s: completing a clean interrupted by a crash", dir.name, name)
            for suffix in (".index", ".timeindex"):
                segment_path(dir, base, suffix).unlink(missing_ok=True)
            os.replace(entry.path, segment_path(dir, base, LOG_SUFFIX))
            fsync_dir(dir)


def _has_transactional_data(segment: LogSegment) -> bool:
    return any(h.is_transactional or h.is_control for _, h in segment.scan(0, segment.size))


def _batches(segment: LogSegment) -> list[tuple[BatchHeader, RecordBatch]]:
    data = segment.pread(0, segment.size)
    view = memoryview(data)
    return [(h, RecordBatch(view[pos : pos + h.size])) for pos, h in segment.scan(0, segment.size)]


def _build_offset_map(segments: list[LogSegment], first_dirty: int) -> dict[bytes, int]:
    offsets: dict[bytes, int] = {}
    for seg in segments:
        for header, batch in _batches(seg):
            if header.is_transactional or header.is_control or header.last_offset < first_dirty:
                continue
            for rec in batch.records(strict=False):
                if rec.key is not None and rec.offset >= first_dirty:
                    offsets[rec.key] = rec.offset
    return offsets


def _filter_segment(
    segment: LogSegment, offsets: dict[bytes, int], drop_tombstones: bool
) -> tuple[bytes, int]:
    """The segment's bytes with superseded records removed, and how many records went."""
    out: list[bytes] = []
    removed = 0
    for header, batch in _batches(segment):
        records = batch.records(strict=False)
        kept = [
            r
            for r in records
            if r.key is None
            or (offsets.get(r.key, -1) <= r.offset and not (drop_tombstones and r.value is None))
        ]
        removed += len(records) - len(kept)
        if len(kept) == len(records):
            out.append(bytes(batch.raw()))
            continue
        if not kept and header.producer_id < 0:
            continue
        section = b"".join(
            encode_record(
                r.offset - header.base_offset, r.timestamp - header.base_timestamp, r.key, r.value, r.headers
            )
            for r in kept
        )
        codec = header.attributes & ATTR_COMPRESSION_MASK
        if codec != _compression.NONE and section:
            section = _compression.compress(codec, section)
        out.append(
            assemble_batch(
                section,
                base_offset=header.base_offset,
                partition_leader_epoch=header.partition_leader_epoch,
                attributes=header.attributes,
                last_offset_delta=header.last_offset_delta,
                base_timestamp=header.base_timestamp,
                max_timestamp=header.max_timestamp,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                records_count=len(kept),
            )
        )
    return b"".join(out), removed


def _write_swap(segment: LogSegment, data: bytes) -> Path:
    cleaned = segment.log_path.with_name(segment.log_path.name + CLEANED_SUFFIX)
    with open(cleaned, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    swap = segment.log_path.with_name(segment.log_path.name + SWAP_SUFFIX)
    os.replace(cleaned, swap)
    fsync_dir(segment.dir)
    return swap


def clean_log(
    log: PartitionLog, first_dirty_offset: int, now_ms: int, *, force: bool = False
) -> CleanResult | None:
    """One cleaning pass over ``log`` if it is due (or ``force``); None when there is nothing to clean or the
    dirty ratio is below ``min.cleanable.dirty.ratio``."""
    config = log.config
    segments = list(log.segments)
    first_dirty = max(first_dirty_offset, log.log_start_offset)
    bound = min(segments[-1].base_offset, log.high_watermark, log.last_stable_offset)
    cleanable: list[LogSegment] = []
    for i, seg in enumerate(segments[:-1]):
        upper = segments[i + 1].base_offset
        lag = config.min_compaction_lag_ms
        if upper > bound or (lag > 0 and now_ms - seg.largest_timestamp() < lag):
            break
        cleanable.append(seg)
    uppers = {s.base_offset: n.base_offset for s, n in zip(segments, segments[1:], strict=False)}
    dirty = [s for s in cleanable if uppers[s.base_offset] > first_dirty]
    if not dirty:
        return None
    dirty_bytes = sum(s.size for s in dirty)
    total = sum(s.size for s in cleanable)
    overdue = config.max_compaction_lag_ms < now_ms and any(
        now_ms - s.largest_timestamp() > config.max_compaction_lag_ms for s in dirty
    )
    if not force and not overdue and dirty_bytes < config.min_cleanable_dirty_ratio * total:
        return None
    offsets = _build_offset_map(dirty, first_dirty)
    end = uppers[cleanable[-1].base_offset]
    written = removed = 0
    for seg in cleanable:
        if _has_transactional_data(seg):
            written += seg.size
            continue
        drop_tombstones = (
            uppers[seg.base_offset] <= first_dirty
            and now_ms - seg.largest_timestamp() > config.delete_retention_ms
        )
        data, gone = _filter_segment(seg, offsets, drop_tombstones)
        if not gone:
            written += seg.size
            continue
        swap = _write_swap(seg, data)
        log.swap_cleaned_segment(seg, swap)
        written += len(data)
        removed += gone
    return CleanResult(end, total, written, removed)
