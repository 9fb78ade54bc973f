"""Log compaction of one partition log (Kafka's ``Cleaner`` / ``LogCleanerManager``), vectorized per segment.

What is cleaned: the closed segments below the *first uncleanable offset* = min(base offset of the active
segment, high watermark, last stable offset, base offset of the first segment whose largest timestamp is newer
than ``now - min.compaction.lag.ms``); whole segments only, so nothing at or above the last stable offset (the
first offset of the earliest open transaction) is ever touched. The *dirty* section starts at the first dirty
offset (the log's entry in ``cleaner-offset-checkpoint``, at least the log start offset); everything before it
is the *clean* section (cleaned by an earlier pass).

When: the dirty section's share of the cleanable bytes is at least ``min.cleanable.dirty.ratio``, or a dirty
segment's first batch is older than ``now - max.compaction.lag.ms``.

How (Kafka's ``Cleaner.doClean``):
  * Offset map (``buildOffsetMap``, :class:`_OffsetMap`): per key, the last offset of that key in the dirty
    section, over the data batches that are not part of an aborted transaction (committed transactional
    records count like any other). Exact key bytes, not Kafka's digest map: there are no collisions to fear
    (a digest collision would drop a live record), at the price of memory that grows with the dirty key set
    (Kafka's map has a fixed size, ``log.cleaner.dedupe.buffer.size``, and cleans less per pass when it
    fills). Per segment the keys are deduplicated by an Arrow group-by (last offset per key); the parts are
    merged by one more group-by into two arrays (keys, offsets), which the filter probes with Arrow's hash
    lookup: no Python work per record or per key, except for a map more than 16 times larger than a segment,
    where a dict of the map is probed once per distinct key of the segment instead. The decoded arrays of the first 32 MiB of dirty
    segments are kept for the filter below, so those segments are decoded once per pass.
  * Filter (``shouldRetainRecord``): every cleanable segment (clean and dirty) is decoded into numpy arrays
    (:func:`~broker_runtime.protocol.record_codec.decode.record_layout`); a record stays when its key is null or
    no later offset of its key is in the map; a tombstone (null value) goes as well once its segment lies in
    the clean section and its largest timestamp is older than ``now - delete.retention.ms``.
  * Transactions (``CleanedTransactionMetadata``, driven by the ``.txnindex`` entries overlapping the
    cleanable range): a data batch of an aborted transaction loses all its records; an ABORT marker stays
    while this pass still met batches of its transaction (and its ``.txnindex`` entry is copied to the
    cleaned segment), a COMMIT marker while this pass met batches of its transaction; a marker that need not
    stay goes once its segment passes the tombstone rule above (``delete.retention.ms`` in the clean
    section). A control batch is kept or dropped whole.
  * Batches (``BatchRetention``): a batch keeps its base offset, lastOffsetDelta, timestamps, producer
    id/epoch/base sequence, attributes and codec; the kept records' bytes are copied unchanged (their deltas
    stay relative to the kept base offset and base timestamp) and recompressed with the batch's codec. A
    batch that loses every record goes, except the batch holding the last data offset of a producer that the
    producer state still tracks (or, for a producer without data, its last marker): it stays, empty and
    uncompressed, so producer state rebuilt from the log keeps its sequence and epoch.
  * Grouping (``groupSegmentsBySize``): consecutive cleanable segments are written into one segment named by
    the first one's base offset while the group's cleaned bytes stay within ``segment.bytes``, its offsets
    within a 32-bit relative offset, and its index entries (one per ``index.interval.bytes``) within
    ``segment.index.bytes`` (Kafka sums the sizes before cleaning; pylog sums them after, so one pass merges
    what it empties). A group of one segment that loses nothing is left as it is.

Crash safety: each group is written and installed through the swap-file protocol of :mod:`.segment_swap`
(``B.log.cleaned`` fsynced, renamed to ``B.log.swap`` as the commit point, then installed under the partition
lock by the partition log's ``replace_segments``; a load finishes or undoes what a crash interrupted).

Aborting (Kafka's ``LogCleaningAbortedException``, checked by its ``checkDone``): :func:`clean_log` asks its
``aborted`` callable before each segment it reads and before each group's commit; once it answers True the pass
raises :class:`LogCleaningAbortedError`, its ``.cleaned`` file removed and nothing swapped in. The log manager aborts
the cleaning of a partition it deletes or moves aside, and waits for the pass to leave it first.

Threading: :func:`clean_log` reads closed segments (immutable) without the partition lock and takes it per
group through :meth:`~broker_runtime.storage.partition_log.PartitionLog.replace_segments`; one cleaner per log
at a time (the log manager runs one cleaner thread).
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_runtime.protocol import compression as _compression
from broker_runtime.protocol.batch_header import ATTR_COMPRESSION_MASK, BatchHeader
from broker_runtime.protocol.record_codec.decode import RecordLayout, record_layout
from broker_runtime.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, assemble_batch
from broker_runtime.storage.segment import LogSegment
from broker_runtime.storage.segment_swap import abandon_cleaned, commit_cleaned, open_cleaned
from broker_runtime.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from broker_runtime.storage.partition_log import PartitionLog

__all__ = ["CleanResult", "LogCleaningAbortedError", "clean_log"]

_INT32_MAX = 2**31 - 1
#: Bytes of one time-index entry (the larger of the two index entry sizes).
_TIME_INDEX_ENTRY = 12
_CONTROL_KEY = struct.Struct(">hh")


class LogCleaningAbortedError(Exception):
    """The cleaning of a log was aborted (its deletion or move aside): nothing of the pass was installed."""


@dataclass(frozen=True)
class CleanResult:
    """What one pass did: the new first dirty offset, bytes before/after, records removed, and how many
    segments the cleanable section had before and after (grouping)."""

    first_dirty_offset: int
    bytes_read: int
    bytes_written: int
    records_removed: int
    segments_before: int = 0
    segments_after: int = 0


# -- transactions ---------------------------------------------------------------------------------------------


class _TxnTracker:
    """Kafka's ``CleanedTransactionMetadata``: which transactions a pass is inside while it walks the batches.

    Fed every batch in offset order; answers whether a data batch belongs to an aborted transaction and
    whether a marker may go, and gathers the ``.txnindex`` entries of the ABORT markers that must stay.
    """

    __slots__ = ("_aborted", "_ongoing_aborted", "_ongoing_committed", "kept_entries")

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._aborted = [(t.first_offset, t.last_offset, t) for t in aborted]
        heapq.heapify(self._aborted)
        #: producer id -> [its aborted transaction, whether this pass met one of its batches]
        self._ongoing_aborted: dict[int, list] = {}
        self._ongoing_committed: set[int] = set()
        self.kept_entries: list[AbortedTxn] = []

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted[txn.producer_id] = [txn, False]

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (its records go)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1] = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, control_type: int | None) -> bool:
        """A control batch (``control_type`` None when it has no record): True when it may go."""
        self._consume_up_to(header.last_offset)
        if control_type is None:
            return True
        pid = header.producer_id
        if control_type == CONTROL_ABORT:
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing[1]:
                self.kept_entries.append(ongoing[0])
                return False
            return True
        if control_type == CONTROL_COMMIT:
            met = pid in self._ongoing_committed
            self._ongoing_committed.discard(pid)
            return not met
        return False

    def take_entries(self) -> list[AbortedTxn]:
        entries, self.kept_entries = self.kept_entries, []
        return entries


def _control_type(layout: RecordLayout, first: int, count: int) -> int | None:
    if count == 0 or layout.key_len[first] < _CONTROL_KEY.size:
        return None
    return _CONTROL_KEY.unpack_from(layout.arena, int(layout.key_start[first]))[1]


# -- offset map -----------------------------------------------------------------------------------------------


_Layout = tuple[bytes, list[BatchHeader], list[int], RecordLayout | None]

#: Segment bytes whose decoded layouts the offset-map pass keeps for the filter pass (each is decoded once).
_LAYOUT_CACHE_BYTES = 32 * 1024 * 1024


def _layout(segment: LogSegment) -> _Layout:
    """The segment's bytes, every batch header and position, and its records laid out (None: no records)."""
    data = segment.pread(0, segment.size)
    layout = record_layout(data, include_control=True, verify_crc=False, allow_partial_tail=False)
    if layout is not None:
        return data, [s.header for s in layout.selected], [s.position for s in layout.selected], layout
    spans = list(segment.scan(0, segment.size))
    return data, [h for _, h in spans], [p for p, _ in spans], None


class _OffsetMap:
    """key -> last offset in the dirty section, as two aligned arrays (exact key bytes, no digest).

    Built from per-segment tables (each already one row per distinct key) merged by one final group-by;
    looked up per segment with Arrow's hash ``index_in`` (C++: O(map + segment)), or, when the map is much
    larger than a segment, through a dict of the map built once (Python: O(distinct keys of the segment)).
    """

    __slots__ = ("_dict", "_keys", "_offsets", "_parts")

    def __init__(self) -> None:
        self._parts: list[pa.Table] = []
        self._keys: pa.Array = pa.array([], pa.binary())
        self._offsets = np.zeros(0, dtype=np.int64)
        self._dict: dict[bytes, int] | None = None

    def add(self, part: pa.Table) -> None:
        self._parts.append(part)

    def seal(self) -> None:
        """Merge the added parts (later offsets win); call once, before :meth:`latest`."""
        if self._parts:
            merged = (
                pa.concat_tables(self._parts).group_by("k", use_threads=False).aggregate([("o_max", "max")])
            )
            self._keys = merged.column("k").combine_chunks()
            self._offsets = merged.column("o_max_max").to_numpy()
        self._parts = []

    def __len__(self) -> int:
        return len(self._keys)

    def latest(self, keys: pa.Array) -> np.ndarray:
        """The map's offset for every key (-1 for a key not in the map or a null key)."""
        n = len(keys)
        if len(self._keys) == 0 or n == 0:
            return np.full(n, -1, dtype=np.int64)
        if len(self._keys) <= 16 * n:
            index = pc.index_in(keys, value_set=self._keys)
            found = self._offsets[index.fill_null(0).to_numpy(zero_copy_only=False)]
            return np.where(index.is_valid().to_numpy(zero_copy_only=False), found, -1)
        if self._dict is None:
            self._dict = dict(zip(self._keys.to_pylist(), self._offsets.tolist(), strict=True))
        encoded = pc.dictionary_encode(keys)
        distinct = encoded.dictionary.to_pylist()
        if not distinct:
            return np.full(n, -1, dtype=np.int64)
        get = self._dict.get
        latest_of = np.fromiter((get(k, -1) for k in distinct), dtype=np.int64, count=len(distinct))
        return latest_of[encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)]


def _add_to_offset_map(
    offsets: _OffsetMap, laid_out: _Layout, first_dirty: int, tracker: _TxnTracker
) -> None:
    _, headers, _, layout = laid_out
    usable = np.zeros(len(headers), dtype=bool)
    for b, header in enumerate(headers):
        if header.is_control:
            count = 0 if layout is None else int(layout.counts[b])
            first = 0 if layout is None else int(layout.first_record[b])
            tracker.on_marker(header, None if layout is None else _control_type(layout, first, count))
        else:
            usable[b] = not tracker.on_batch(header) and header.last_offset >= first_dirty
    if layout is None or not usable.any():
        return
    record_offsets = layout.offsets
    mask = np.repeat(usable, layout.counts) & (layout.key_len >= 0) & (record_offsets >= first_dirty)
    if not mask.any():
        return
    table = pa.table({"k": layout.keys().filter(pa.array(mask)), "o": record_offsets[mask]})
    offsets.add(table.group_by("k", use_threads=False).aggregate([("o", "max")]))


# -- filtering one segment ------------------------------------------------------------------------------------


@dataclass
class _Cleaned:
    """One segment after the filter: its batches (bytes) in order, their size, and what changed."""

    chunks: list[bytes | memoryview] = field(default_factory=list)
    size: int = 0
    removed: int = 0
    changed: bool = False
    entries: list[AbortedTxn] = field(default_factory=list)


class _LastOfProducers:
    """Kafka's ``lastRecordsOfActiveProducers``: the batch of each tracked producer that must stay."""

    __slots__ = ("_last",)

    def __init__(self, last: dict[int, tuple[int, int]]) -> None:
        self._last = last  # producer id -> (last data offset or -1, producer epoch)

    def must_keep(self, header: BatchHeader) -> bool:
        entry = self._last.get(header.producer_id)
        if header.producer_id < 0 or entry is None:
            return False
        last_data_offset, epoch = entry
        if last_data_offset >= 0:
            return header.last_offset == last_data_offset
        return header.is_control and header.producer_epoch == epoch


def _rebuilt(header: BatchHeader, section: bytes, count: int) -> bytes:
    attributes = header.attributes
    codec = attributes & ATTR_COMPRESSION_MASK
    if count == 0:
        attributes &= ~ATTR_COMPRESSION_MASK  # an empty batch is written uncompressed, as Kafka does
    elif codec != _compression.NONE:
        section = _compression.compress(codec, section)
    return assemble_batch(
        section,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=count,
    )


def _filter_segment(
    laid_out: _Layout,
    offsets: _OffsetMap,
    tracker: _TxnTracker,
    drop_deletes: bool,
    last_of_producers: _LastOfProducers,
) -> _Cleaned:
    """The segment's batches with superseded, deleted and aborted records removed (see the module docstring)."""
    data, headers, positions, layout = laid_out
    out = _Cleaned()
    view = memoryview(data)
    nb = len(headers)
    # Batch-level decisions, in offset order (the transaction tracker is sequential by nature).
    discard_records = np.zeros(nb, dtype=bool)
    drop_control = np.zeros(nb, dtype=bool)
    for b, header in enumerate(headers):
        if header.is_control:
            count = 0 if layout is None else int(layout.counts[b])
            first = 0 if layout is None else int(layout.first_record[b])
            may_go = tracker.on_marker(
                header, None if layout is None else _control_type(layout, first, count)
            )
            drop_control[b] = may_go and drop_deletes and not last_of_producers.must_keep(header)
        else:
            discard_records[b] = tracker.on_batch(header)
    out.entries = tracker.take_entries()

    if layout is not None:
        # Record-level decisions, vectorized: the latest offset of each record's key.
        record_offsets = layout.offsets
        has_key = layout.key_len >= 0
        latest = offsets.latest(layout.keys())
        retain = ~has_key | (record_offsets >= latest)
        if drop_deletes:
            retain &= ~(has_key & (layout.value_len < 0))
        is_control = np.array([h.is_control for h in headers], dtype=bool)
        retain |= np.repeat(is_control, layout.counts)  # control batches are kept or dropped whole
        retain &= ~np.repeat(discard_records, layout.counts)
        cum = np.zeros(len(retain) + 1, dtype=np.int64)
        np.cumsum(retain, out=cum[1:])
        kept = cum[layout.first_record + layout.counts] - cum[layout.first_record]
        counts = layout.counts
        arena = np.frombuffer(layout.arena, dtype=np.uint8)
        byte_mask: np.ndarray | None = None
    else:
        kept = counts = np.zeros(nb, dtype=np.int64)

    for b, header in enumerate(headers):
        raw = view[positions[b] : positions[b] + header.size]
        count = int(counts[b])
        if header.is_control:
            if drop_control[b]:
                out.removed += count
                out.changed = True
            else:
                out.chunks.append(raw)
                out.size += header.size
            continue
        k = int(kept[b])
        if k == count and (count or last_of_producers.must_keep(header)):
            out.chunks.append(raw)
            out.size += header.size
            continue
        out.changed = True
        out.removed += count - k
        if k == 0:
            if not last_of_producers.must_keep(header):
                continue
            batch = _rebuilt(header, b"", 0)
        else:
            assert layout is not None
            if byte_mask is None:
                byte_mask = _kept_bytes(layout, retain)
            sel = layout.selected[b]
            section = arena[sel.begin : sel.end][byte_mask[sel.begin : sel.end]].tobytes()
            batch = _rebuilt(header, section, k)
        out.chunks.append(batch)
        out.size += len(batch)
    return out


def _kept_bytes(layout: RecordLayout, retain: np.ndarray) -> np.ndarray:
    """A byte mask over the arena: True inside the kept records."""
    marks = np.zeros(len(layout.arena) + 1, dtype=np.int8)
    marks[layout.starts[retain]] += 1  # starts (and ends) are strictly increasing: no repeated index
    marks[layout.ends[retain]] -= 1
    return np.cumsum(marks[:-1], dtype=np.int64) > 0


# -- groups ---------------------------------------------------------------------------------------------------


class _Group:
    """Consecutive segments being cleaned into one (its first segment's base offset); written lazily."""

    def __init__(self, first: LogSegment) -> None:
        self.segments: list[LogSegment] = [first]
        self.pending: list[_Cleaned] = []
        self.size = 0
        self.changed = False
        self.entries: list[AbortedTxn] = []
        self._file: BinaryIO | None = None

    @property
    def base(self) -> LogSegment:
        return self.segments[0]

    def fits(
        self, cleaned: _Cleaned, upper: int, config_bytes: int, max_index_entries: int, interval: int
    ) -> bool:
        size = self.size + cleaned.size
        return (
            size <= config_bytes
            and upper - 1 - self.base.base_offset <= _INT32_MAX
            and size // max(interval, 1) + 1 <= max_index_entries
        )

    def add(self, segment: LogSegment | None, cleaned: _Cleaned) -> None:
        if segment is not None:
            self.segments.append(segment)
        self.size += cleaned.size
        self.changed |= cleaned.changed
        self.entries.extend(cleaned.entries)
        self.pending.append(cleaned)
        if self.changed or len(self.segments) > 1:
            self._write_pending()

    def _write_pending(self) -> None:
        if self._file is None:
            self._file = open_cleaned(self.base.dir, self.base.base_offset)
        for cleaned in self.pending:
            for chunk in cleaned.chunks:
                self._file.write(chunk)
        self.pending.clear()

    @property
    def needs_rewrite(self) -> bool:
        return self._file is not None

    def commit(self) -> Path:
        """Commit the cleaned group (:func:`~.segment_swap.commit_cleaned`); returns its ``.log.swap``."""
        assert self._file is not None
        return commit_cleaned(self.base.dir, self.base.base_offset, self._file, self.entries)

    def abandon(self) -> None:
        if self._file is not None:
            abandon_cleaned(self.base.dir, self.base.base_offset, self._file)


# -- one pass -------------------------------------------------------------------------------------------------


def clean_log(
    log: PartitionLog,
    first_dirty_offset: int,
    now_ms: int,
    *,
    force: bool = False,
    aborted: Callable[[], bool] | None = None,
) -> CleanResult | None:
    """One cleaning pass over ``log`` if it is due (or ``force``); None when there is nothing to clean or the
    dirty ratio is below ``min.cleanable.dirty.ratio``. :class:`LogCleaningAbortedError` once ``aborted()`` answers
    True (see "Aborting" in the module docstring)."""

    def check_aborted() -> None:
        if aborted is not None and aborted():
            raise LogCleaningAbortedError(f"the cleaning of {log.name} was aborted")

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
    end = uppers[cleanable[-1].base_offset]

    offsets = _OffsetMap()
    map_tracker = _TxnTracker(log.collect_aborted_transactions(first_dirty, end))
    cache: dict[int, _Layout] = {}
    cached_bytes = 0
    for seg in dirty:
        check_aborted()
        laid_out = _layout(seg)
        _add_to_offset_map(offsets, laid_out, first_dirty, map_tracker)
        if cached_bytes + seg.size <= _LAYOUT_CACHE_BYTES:
            cache[seg.base_offset] = laid_out
            cached_bytes += seg.size
        del laid_out
    offsets.seal()
    tracker = _TxnTracker(log.collect_aborted_transactions(cleanable[0].base_offset, end))
    last_of_producers = _LastOfProducers(log.last_records_of_active_producers())
    max_index_entries = config.segment_index_bytes // _TIME_INDEX_ENTRY
    written = removed = 0
    after = 0
    group: _Group | None = None
    try:
        for seg in cleanable:
            check_aborted()
            upper = uppers[seg.base_offset]
            drop_deletes = (
                upper <= first_dirty and now_ms - seg.largest_timestamp() > config.delete_retention_ms
            )
            laid_out = cache.pop(seg.base_offset) if seg.base_offset in cache else _layout(seg)
            cleaned = _filter_segment(laid_out, offsets, tracker, drop_deletes, last_of_producers)
            del laid_out
            removed += cleaned.removed
            if group is not None and group.fits(
                cleaned, upper, config.segment_bytes, max_index_entries, config.index_interval_bytes
            ):
                group.add(seg, cleaned)
                continue
            if group is not None:
                written += _finish_group(log, group, check_aborted)
                after += 1
            group = _Group(seg)
            group.add(None, cleaned)
        if group is not None:
            written += _finish_group(log, group, check_aborted)
            after += 1
            group = None
    finally:
        if group is not None:
            group.abandon()
    return CleanResult(end, total, written, removed, len(cleanable), after)


def _finish_group(log: PartitionLog, group: _Group, check_aborted: Callable[[], None]) -> int:
    """Install the group's cleaned segment (when anything changed); returns its size. The last abort check is
    before the commit: a committed ``.swap`` is installed (the deletion waits for it)."""
    if not group.needs_rewrite:
        return group.size
    check_aborted()
    swap = group.commit()
    log.replace_segments(group.segments, swap)
    return group.size
