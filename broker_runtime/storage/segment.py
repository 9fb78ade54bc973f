"""One log segment: a ``.log`` file of record batches plus its ``.index`` and ``.timeindex`` (Kafka's ``LogSegment``).

Files (in the partition directory, named by the segment's base offset, 20 digits zero-padded)::

    00000000000000000123.log        RecordBatch v2 after RecordBatch v2, nothing else (no header, no padding)
    00000000000000000123.index      sparse offset -> position entries   (:mod:`.offset_index`)
    00000000000000000123.timeindex  sparse timestamp -> offset entries  (:mod:`.time_index`)
    00000000000000000123.txnindex   aborted transactions whose ABORT marker is in this segment
                                    (:mod:`.txn_index`; only once there is one)

Invariants:
  * the base offset is <= the first offset in the segment and > every offset of the previous segment;
  * batches are whole and their offsets strictly increase; the in-memory :attr:`LogSegment.size` counts only
    bytes of whole appended batches (readers never go past it);
  * index rule (Kafka's ``LogSegment.append``): before writing a batch set at position ``p``, if more than
    ``index.interval.bytes`` were appended since the last index entry, add offset-index entry
    ``(last offset of the set, p)`` and time-index entry ``(max timestamp so far, its offset)``, reset the
    counter; then add the set's size to the counter. The first append therefore never adds an entry. Recovery
    rebuilds with the same rule per batch. ``max timestamp so far`` tracks the largest batch maxTimestamp
    and the last offset of that batch (Kafka's "shallow" offset of the max timestamp).
  * when the segment stops being active (roll, close) the final ``(max timestamp, offset)`` entry is added to
    the time index (a reserved slot) and both indexes are trimmed to their entries.

The ``.txnindex`` is written by the partition log (it knows the producer state); the segment opens it, truncates
it with the segment, and deletes it with the segment. A corrupt one is deleted on open and the segment is
recovered (the partition log then rebuilds it from the markers).

Deletion renames the files to ``*.deleted`` and unlinks them right away. Open descriptors and mappings
held by in-flight readers stay valid after unlink (POSIX); they are released when the last reference goes
(every descriptor is a :class:`~.file_handle.FileHandle`). Readers in other processes open these files with
:class:`~.segment_reader.SegmentReader` (read-only).

Thread-safety: not thread-safe for writers (the partition log serializes append, truncate, recover, roll).
Reads (``pread``, ``translate_offset``, scans) are safe concurrently with appends as long as they stay below a
size snapshot taken under the partition lock.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from broker_runtime.errors import CorruptIndexError, PylogError, StorageError
from broker_runtime.protocol.batch_header import HEADER_SIZE, BatchHeader, compute_crc, parse_header
from broker_runtime.protocol.records import RecordBatch
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.file_handle import FileHandle, FileSlice
from broker_runtime.storage.offset_index import OffsetIndex, OffsetPosition
from broker_runtime.storage.time_index import TimeIndex, TimestampOffset
from broker_runtime.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

__all__ = [
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "LogSegment",
    "SegmentRecovery",
    "list_segment_bases",
    "parse_segment_file_name",
    "segment_file_stem",
    "segment_path",
]

_log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"

#: Header walks read small chunks first (a lookup usually needs one or two headers), doubling up to the max;
#: after jumping over a batch larger than the chunk they start small again (only its header is needed).
_SCAN_MIN_CHUNK = 512
_SCAN_MAX_CHUNK = 64 * 1024
_NO_TIMESTAMP = -1


class SegmentRecovery(NamedTuple):
    """What :meth:`LogSegment.recover` found: bytes cut off the end of the file (0: the segment was whole),
    the offset after the last valid batch (the first offset dropped when ``truncated_bytes``), the valid byte
    length the file was cut to, and why the walk stopped there (None when it reached the end of the file)."""

    truncated_bytes: int
    next_offset: int
    valid_bytes: int
    reason: str | None


def segment_file_stem(base_offset: int) -> str:
    """``00000000000000000123`` for base offset 123 (Kafka's ``LogFileUtils.filenamePrefixFromOffset``)."""
    return f"{base_offset:020d}"


def segment_path(dir: Path, base_offset: int, suffix: str) -> Path:
    """``<dir>/<20-digit base offset><suffix>``, e.g. ``.../00000000000000000123.log``."""
    return dir / (segment_file_stem(base_offset) + suffix)


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """``(123, ".log")`` for ``00000000000000000123.log`` (any suffix); None for a name not of that form."""
    stem, dot, suffix = name.partition(".")
    if not dot or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem), "." + suffix


def list_segment_bases(dir: str | os.PathLike[str]) -> list[int]:
    """Base offsets of the ``.log`` files in a partition directory, ascending (``OSError`` if unlistable)."""
    bases = []
    for name in os.listdir(dir):
        parsed = parse_segment_file_name(name)
        if parsed is not None and parsed[1] == LOG_SUFFIX:
            bases.append(parsed[0])
    bases.sort()
    return bases


class LogSegment:
    """A segment of a partition log. Build with :meth:`create` (new) or :meth:`open` (existing files)."""

    __slots__ = (
        "_bytes_since_last_index_entry",
        "_file",
        "_indexes_missing",
        "_max_timestamp",
        "_offset_of_max_timestamp",
        "_rolling_based_timestamp",
        "base_offset",
        "config",
        "created_ms",
        "dir",
        "log_path",
        "offset_index",
        "roll_jitter_ms",
        "size",
        "time_index",
        "txn_index",
    )

    def __init__(self, dir: Path, base_offset: int, config: LogConfig, now_ms: int) -> None:
        self.dir = dir
        self.base_offset = base_offset
        self.config = config
        self.created_ms = now_ms
        self.roll_jitter_ms = (
            random.randrange(min(config.segment_jitter_ms, config.segment_ms))
            if config.segment_jitter_ms
            else 0
        )
        self.log_path = segment_path(dir, base_offset, LOG_SUFFIX)
        index_bytes = config.segment_index_bytes
        self.offset_index = OffsetIndex(
            segment_path(dir, base_offset, INDEX_SUFFIX), base_offset, index_bytes
        )
        self.time_index = TimeIndex(
            segment_path(dir, base_offset, TIME_INDEX_SUFFIX), base_offset, index_bytes
        )
        self.txn_index = TransactionIndex(segment_path(dir, base_offset, TXN_INDEX_SUFFIX), base_offset)
        self._file: FileHandle | None = None
        self.size = 0
        self._bytes_since_last_index_entry = 0
        self._max_timestamp: int | None = None
        self._offset_of_max_timestamp = base_offset
        self._rolling_based_timestamp: int | None = None
        self._indexes_missing = False

    # -- construction ---------------------------------------------------------------------------------------

    @classmethod
    def create(cls, dir: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        """A new, empty segment (stale index files of the same base offset are replaced)."""
        log_path = segment_path(dir, base_offset, LOG_SUFFIX)
        if log_path.exists() and log_path.stat().st_size > 0:
            raise StorageError(f"cannot create segment {log_path.name}: a non-empty file already exists")
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            segment_path(dir, base_offset, suffix).unlink(missing_ok=True)
        seg = cls(dir, base_offset, config, now_ms)
        seg._file = FileHandle(log_path, writable=True, create=True)
        seg._max_timestamp = _NO_TIMESTAMP
        return seg

    @classmethod
    def open(cls, dir: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        """An existing segment; its files are opened lazily. Missing index files are created empty
        (callers then rebuild them with :meth:`recover`)."""
        missing = not all(
            segment_path(dir, base_offset, s).exists() for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
        )
        seg = cls(dir, base_offset, config, now_ms)
        seg.size = seg.log_path.stat().st_size
        try:
            seg.txn_index = TransactionIndex.open(seg.txn_index.path, base_offset)
        except CorruptIndexError as exc:
            _log.warning("%s; deleting it, the segment is recovered and its entries rebuilt", exc)
            seg.txn_index.path.unlink(missing_ok=True)
            missing = True
        seg._indexes_missing = missing
        return seg

    # -- paths and files --------------------------------------------------------------------------------------

    def _handle(self) -> FileHandle:
        handle = self._file
        if handle is None:
            handle = self._file = FileHandle(self.log_path, writable=True)
        return handle

    def pread(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes of the .log file from ``position`` (one system call)."""
        return self._handle().pread(size, position)

    def file_slice(self, position: int, size: int) -> FileSlice:
        """``size`` bytes of the .log file from ``position``, not read (see :class:`~.file_handle.FileSlice`)."""
        return FileSlice(self._handle(), position, size)

    # -- timestamps ---------------------------------------------------------------------------------------------

    def _load_max_timestamp(self) -> None:
        last = self.time_index.last_entry
        self._max_timestamp = last.timestamp
        self._offset_of_max_timestamp = last.offset

    @property
    def max_timestamp_so_far(self) -> int:
        """Largest batch maxTimestamp in the segment (-1 if none has a timestamp)."""
        if self._max_timestamp is None:
            self._load_max_timestamp()
        assert self._max_timestamp is not None
        return self._max_timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        """Last offset of the batch holding :attr:`max_timestamp_so_far`."""
        if self._max_timestamp is None:
            self._load_max_timestamp()
        return self._offset_of_max_timestamp

    def largest_timestamp(self) -> int:
        """The timestamp retention.ms compares with: max timestamp so far, else the file's mtime."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        try:
            return int(self.log_path.stat().st_mtime * 1000)
        except FileNotFoundError:
            return 0

    def _first_batch_timestamp(self) -> int:
        if self._rolling_based_timestamp is None:
            first = next(self.scan(0, self.size), None)
            if first is None:
                return _NO_TIMESTAMP
            self._rolling_based_timestamp = first[1].max_timestamp
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's rule: the new batch's timestamp minus the first batch's, else wall time since creation."""
        first = self._first_batch_timestamp()
        if first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def should_roll(self, messages_size: int, max_timestamp: int, max_offset: int, now_ms: int) -> bool:
        """True when a set of ``messages_size`` bytes ending at ``max_offset`` must go to a new segment."""
        config = self.config
        if self.size > config.segment_bytes - messages_size:
            return True
        if self.size > 0 and (
            self.time_waited_for_roll(now_ms, max_timestamp) > config.segment_ms - self.roll_jitter_ms
        ):
            return True
        return (
            self.offset_index.is_full
            or self.time_index.is_full
            or not self.offset_index.can_append_offset(max_offset)
        )

    # -- append ---------------------------------------------------------------------------------------------------

    def append(
        self,
        records: memoryview | bytes | bytearray,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
    ) -> None:
        """Write a set of whole batches (offsets already assigned) at the end and update the indexes."""
        n = len(records)
        if n == 0:
            return
        if not self.offset_index.can_append_offset(largest_offset):
            raise StorageError(
                f"offset {largest_offset} does not fit a relative offset of segment {self.log_path.name}"
            )
        position = self.size
        if position == 0:
            self._rolling_based_timestamp = largest_timestamp
        self._handle().pwrite_all(records, position)
        self.size = position + n
        if largest_timestamp > self.max_timestamp_so_far:
            self._max_timestamp = largest_timestamp
            self._offset_of_max_timestamp = offset_of_max_timestamp
        if self._bytes_since_last_index_entry > self.config.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += n

    # -- reads ----------------------------------------------------------------------------------------------------

    def scan(self, position: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch in ``[position, end)`` by header walk (chunked preads)."""
        buf = b""
        chunk_start = position
        pos = position
        chunk = _SCAN_MIN_CHUNK
        while end - pos >= HEADER_SIZE:
            off = pos - chunk_start
            if off + HEADER_SIZE > len(buf):
                chunk = _SCAN_MIN_CHUNK if off > len(buf) + chunk else min(chunk * 2, _SCAN_MAX_CHUNK)
                chunk_start, off = pos, 0
                buf = self.pread(pos, min(chunk, end - pos))
                if len(buf) < HEADER_SIZE:
                    return
            header = parse_header(buf, off)
            if pos + header.size > end:
                return
            yield pos, header
            pos += header.size

    def translate_offset(
        self, offset: int, start_position: int = 0, end: int | None = None
    ) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset`` (None if none)."""
        mapping = self.offset_index.lookup(offset)
        limit = self.size if end is None else end
        for pos, header in self.scan(max(mapping.position, start_position), limit):
            if header.last_offset >= offset:
                return pos, header
        return None

    def last_batch_in(self, start: int, limit: int) -> tuple[int, BatchHeader | None]:
        """End position and header of the last whole batch in ``[start, limit)`` (``(start, None)`` if none).

        ``start`` must be a batch boundary. Jumps with the offset index (its positions are batch boundaries)
        so only the bytes after the last entry below ``limit`` are walked.
        """
        high = limit
        while True:
            entry = self.offset_index.lookup_by_position(high - 1) if high > start else None
            first = start if entry is None or entry.position < start else entry.position
            end, last = first, None
            for pos, header in self.scan(first, limit):
                end, last = pos + header.size, header
            if last is not None or first == start:
                return end, last
            high = first

    def read_next_offset(self) -> int:
        """The offset after the last batch (scans from the last offset-index entry)."""
        n = self.offset_index.entries
        start = self.offset_index.entry(n - 1).position if n else 0
        next_offset = self.base_offset
        for _, header in self.scan(start, self.size):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> TimestampOffset | None:
        """(timestamp, offset) of the first record with timestamp >= ``timestamp`` and offset >= ``starting_offset``."""
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        for pos, header in self.scan(position, self.size):
            if header.max_timestamp >= timestamp and header.last_offset >= starting_offset:
                found = self._first_record_at_or_after(pos, header, timestamp, starting_offset)
                if found is not None:
                    return found
        return None

    def exact_offset_of_max_timestamp(self) -> TimestampOffset | None:
        """(max timestamp, offset of the first record carrying it), or None for an empty segment."""
        max_ts = self.max_timestamp_so_far
        if max_ts < 0 and self.size == 0:
            return None
        position = self.offset_index.lookup(self.offset_of_max_timestamp_so_far).position
        for pos, header in self.scan(position, self.size):
            if header.max_timestamp == max_ts:
                return self._first_record_at_or_after(pos, header, max_ts, header.base_offset)
        return None

    def _first_record_at_or_after(
        self, position: int, header: BatchHeader, timestamp: int, starting_offset: int
    ) -> TimestampOffset | None:
        """Record-level step of a timestamp search inside one batch."""
        if header.timestamp_type == 1:
            # LogAppendTime: every record carries the batch's maxTimestamp.
            return TimestampOffset(header.max_timestamp, max(header.base_offset, starting_offset))
        try:
            records = RecordBatch(self.pread(position, header.size)).records(strict=False)
        except PylogError:
            return TimestampOffset(header.max_timestamp, max(header.base_offset, starting_offset))
        for record in records:
            if record.timestamp >= timestamp and record.offset >= starting_offset:
                return TimestampOffset(record.timestamp, record.offset)
        return None

    # -- recovery and truncation ------------------------------------------------------------------------------

    def sanity_check_indexes(self) -> None:
        """O(1) checks of both index files; raises CorruptIndexError (also for a missing file)."""
        if self._indexes_missing:
            raise CorruptIndexError(f"an index file of segment {self.log_path.name} is missing")
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()

    def recover(self) -> SegmentRecovery:
        """Validate every batch, rebuild both indexes, cut the file at the first invalid byte.

        Checks per batch: a whole header with magic 2 and batchLength >= 49, the whole batch inside the file,
        the CRC-32C, lastOffsetDelta >= 0, base offset >= the segment base and >= the previous batch's next
        offset, and a last offset that fits a relative offset. The caller logs and counts a truncation (it
        knows the partition and why recovery ran); see :class:`SegmentRecovery`.
        """
        oi, ti = self.offset_index, self.time_index
        oi.reset()
        ti.reset()
        interval = self.config.index_interval_bytes
        file_size = self.log_path.stat().st_size
        valid = 0
        last_index_entry = 0
        next_offset = self.base_offset
        max_ts, offset_of_max = _NO_TIMESTAMP, self.base_offset
        reason: str | None = None
        if file_size:
            mm = mmap.mmap(self._handle().fd, file_size, access=mmap.ACCESS_READ)
            view = memoryview(mm)
            try:
                while file_size - valid >= HEADER_SIZE:
                    try:
                        header = parse_header(view, valid)
                    except PylogError as exc:
                        reason = f"invalid batch header: {exc}"
                        break
                    size = header.size
                    if valid + size > file_size:
                        reason = f"batch of {size} bytes runs past the end of the file ({file_size} bytes)"
                        break
                    if compute_crc(view, valid, size) != header.crc:
                        reason = f"CRC-32C mismatch in the batch of offsets {header.base_offset}..{header.last_offset}"
                        break
                    if (
                        header.last_offset_delta < 0
                        or header.base_offset < next_offset
                        or not oi.can_append_offset(header.last_offset)
                    ):
                        reason = (
                            f"batch offsets {header.base_offset}..{header.last_offset} do not follow offset "
                            f"{next_offset - 1}"
                        )
                        break
                    if header.max_timestamp > max_ts:
                        max_ts, offset_of_max = header.max_timestamp, header.last_offset
                    if valid - last_index_entry > interval:
                        if not oi.is_full:
                            oi.append(header.last_offset, valid)
                        if not ti.is_full:
                            ti.maybe_append(max_ts, offset_of_max)
                        last_index_entry = valid
                    valid += size
                    next_offset = header.next_offset
            finally:
                view.release()
                mm.close()
        truncated = file_size - valid
        if truncated:
            if reason is None:
                reason = f"{truncated} trailing byte(s), fewer than a batch header ({HEADER_SIZE} bytes)"
            self._handle().truncate(valid)
        else:
            reason = None
        self.size = valid
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, offset_of_max
        self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        oi.trim()
        ti.maybe_append(max_ts, offset_of_max, skip_full_check=True)
        ti.trim()
        self._indexes_missing = False
        return SegmentRecovery(truncated, next_offset, valid, reason)

    def truncate_to(self, offset: int) -> int:
        """Cut the file at the batch holding ``offset`` (or the first batch after it); returns bytes removed.

        The segment becomes the active one: its indexes are preallocated again."""
        mapping = self.translate_offset(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.offset_index.preallocate()
        self.time_index.preallocate()
        removed = 0
        if mapping is not None:
            position = mapping[0]
            removed = self.size - position
            self._handle().truncate(position)
            self.size = position
        if self.size == 0:
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        self._recompute_max_timestamp()
        return removed

    def _recompute_max_timestamp(self) -> None:
        last = self.time_index.last_entry
        max_ts, offset_of_max = last.timestamp, last.offset
        start = self.offset_index.lookup(last.offset).position
        for _, header in self.scan(start, self.size):
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, offset_of_max

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """Roll: write the final time-index entry and trim both indexes."""
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self._offset_of_max_timestamp, skip_full_check=True
        )
        self.offset_index.trim()
        self.time_index.trim()

    def make_active(self) -> None:
        """Reopened as the active segment: preallocate the indexes again."""
        self.offset_index.preallocate()
        self.time_index.preallocate()

    def flush(self) -> None:
        """fsync the .log and msync both indexes."""
        self._handle().fsync()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Final time-index entry, trim the indexes (the .log descriptor closes with the last reference)."""
        if self._max_timestamp is not None and self.time_index.path.exists():
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        """Rename the files to ``*.deleted``, then unlink them (readers holding descriptors keep working)."""
        renamed: list[Path] = []
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            target = path.with_name(path.name + DELETED_SUFFIX)
            # A file already gone is tolerated, as Kafka's deleteIfExists; any other OSError is raised (the
            # partition log then fails the log directory).
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, target)
                renamed.append(target)
        for target in renamed:
            target.unlink(missing_ok=True)

    def lookup(self, offset: int) -> OffsetPosition:
        return self.offset_index.lookup(offset)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
