"""Reads of a partition log, over an immutable snapshot of it (the read side of Kafka's ``LocalLog``).

A :class:`LogSnapshot` is taken under the partition lock (:meth:`~.partition_log.PartitionLog.snapshot`): the
segment tuple, their base offsets, log start, high watermark, LEO and the active segment's size at that moment.
Every read here then works on the snapshot without the lock.

Invariants: closed segments are immutable; the active segment grows only past the snapshot's ``active_size``, so
a read never sees a batch appended after the snapshot nor a partial one. A segment deleted after the snapshot
(retention, truncation, a clean) keeps its open file valid (POSIX), except that reading a file that was never
opened raises FileNotFoundError, answered as OffsetOutOfRangeError. Offsets outside ``[log start, LEO]`` raise
OffsetOutOfRangeError. Callers must not read offsets at or above a truncation point while a truncation runs
(replication truncates only above the high watermark, which fetches do not cross).

Threading: any thread; a snapshot is never mutated.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

from broker_runtime.errors import OffsetOutOfRangeError
from broker_runtime.storage.file_handle import FileSlice
from broker_runtime.storage.segment import LogSegment
from broker_runtime.storage.txn_index import AbortedTxn

__all__ = ["FetchData", "LogSnapshot"]


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
    #: ``slice_min_bytes`` of :meth:`LogSnapshot.read`.
    file_slice: FileSlice | None = None

    @property
    def size(self) -> int:
        """Bytes returned (in ``records`` or ``file_slice``)."""
        return len(self.records) if self.file_slice is None else len(self.file_slice)


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    """The readable state of one partition log at one moment (see the module docstring)."""

    #: ``<topic>-<partition>``, for messages.
    name: str
    segments: tuple[LogSegment, ...]
    bases: tuple[int, ...]
    leo: int
    hw: int
    log_start: int
    active_size: int

    def check_range(self, offset: int) -> None:
        if offset < self.log_start or offset > self.leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start}, {self.leo}] of {self.name}"
            )

    def _segment_index(self, offset: int) -> int:
        """Index of the segment holding ``offset`` (the first one when ``offset`` is below every base)."""
        return max(0, bisect.bisect_right(self.bases, offset) - 1)

    def _segment_end(self, i: int) -> int:
        return self.active_size if i == len(self.segments) - 1 else self.segments[i].size

    def _end_position(self, i: int, end_offset: int, start_pos: int) -> int:
        """Byte position in segment ``i`` before which every batch ends below ``end_offset``."""
        seg = self.segments[i]
        seg_end = self._segment_end(i)
        next_base = self.bases[i + 1] if i + 1 < len(self.bases) else self.leo
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
        self.check_range(start_offset)
        end_offset = self.leo if max_offset is None else min(max_offset, self.leo)
        empty = FetchData(b"", start_offset, self.hw, self.log_start, start_offset)
        if start_offset >= end_offset or max_bytes < 0:
            return empty
        i = self._segment_index(start_offset)
        try:
            while i < len(self.segments):
                seg = self.segments[i]
                seg_end = self._segment_end(i)
                found = seg.translate_offset(start_offset, 0, seg_end)
                if found is None:
                    i += 1
                    continue
                pos, header = found
                if header.base_offset >= end_offset:
                    return empty
                max_pos = self._end_position(i, end_offset, pos)
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
                        self.hw,
                        self.log_start,
                        last.next_offset,
                        (seg.log_path, pos, end),
                        seg.file_slice(pos, end - pos),
                    )
                data = seg.pread(pos, end - pos)
                if len(data) != end - pos or last is None:
                    raise OffsetOutOfRangeError(
                        f"segment {seg.log_path.name} of {self.name} shrank during a read"
                    )
                next_offset = last.next_offset
                return FetchData(
                    data, header.base_offset, self.hw, self.log_start, next_offset, (seg.log_path, pos, end)
                )
        except FileNotFoundError:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} of {self.name} was deleted during the read"
            ) from None
        return empty

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound)`` (Kafka's
        ``collectAbortedTransactions``): the ``.txnindex`` entries of the segment holding ``start_offset`` and
        every later one, oldest first."""
        found: list[AbortedTxn] = []
        for seg in self.segments[self._segment_index(start_offset) :]:
            found.extend(seg.txn_index.collect(start_offset, upper_bound))
        return found

    def position_for(self, offset: int) -> tuple[Path, int] | None:
        """(.log path, byte position) of the batch holding ``offset`` (or the first after it); None at the LEO.

        Segment by binary search over base offsets, then the offset index, then a short header walk.
        """
        self.check_range(offset)
        i = self._segment_index(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            found = seg.translate_offset(offset, 0, self._segment_end(i))
            if found is not None:
                return seg.log_path, found[0]
            i += 1
        return None

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp_ms`` (ListOffsets); None if none."""
        for seg in self.segments:
            if seg.largest_timestamp() >= timestamp_ms:
                found = seg.find_offset_by_timestamp(timestamp_ms, self.log_start)
                if found is not None and found.offset < self.leo:
                    return found.offset, found.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the largest timestamp (ListOffsets -3); None if empty."""
        best: LogSegment | None = None
        for seg in self.segments:
            if seg.size and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                best = seg
        if best is None:
            return None
        found = best.exact_offset_of_max_timestamp()
        return None if found is None else (found.offset, found.timestamp)
