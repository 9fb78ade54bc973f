"""A read-only view of one segment's files, for readers outside the broker process (Kafka's
``OffsetIndex(..., writable = false)`` idea applied to a whole segment).

What it opens (names from :mod:`.segment`): ``<base>.log`` through a read-only
:class:`~.file_handle.FileHandle`, and ``<base>.index`` with
:meth:`~.index_file.IndexFile.open_read_only` on first use. It never creates, writes, truncates, locks or
maps a file for writing, so the broker may keep appending, rolling and deleting meanwhile:

* the ``.log`` size is taken once when the reader opens (:attr:`SegmentReader.size`); ``pread`` may still
  return bytes appended later, and the file may end in a partial batch -- callers keep whole batches only;
* the active segment's index is preallocated and untrimmed, and an entry may be half written: only the
  trusted prefix is used, and entries pointing at or past :attr:`SegmentReader.size` are ignored;
* a missing or unreadable index means "start at byte 0" (slower, never wrong);
* a ``.log`` deleted by retention before it was opened raises
  :class:`~broker_runtime.errors.SegmentGoneError`; once open, the descriptor stays valid after an unlink.

:func:`collect_aborted_transactions` reads the ``.txnindex`` files of a partition directory the same way
(:func:`~.txn_index.read_entries_read_only`): Kafka's ``collectAbortedTransactions`` for a reader beside the
broker.

Thread-safety: one reader per thread (the lazily opened index is not guarded).
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path

from broker_runtime.errors import SegmentGoneError
from broker_runtime.storage.file_handle import FileHandle
from broker_runtime.storage.offset_index import OffsetIndex
from broker_runtime.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, list_segment_bases, segment_path
from broker_runtime.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, read_entries_read_only

__all__ = ["SegmentReader", "collect_aborted_transactions"]


def collect_aborted_transactions(
    dir: str | os.PathLike[str], start_offset: int, upper_bound: int
) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[start_offset, upper_bound)`` of the partition in ``dir``, read-only.

    Kafka's ``collectAbortedTransactions``: the ``.txnindex`` entries (``lastOffset >= start_offset`` and
    ``firstOffset < upper_bound``) of the segment holding ``start_offset`` and of every later segment (an ABORT
    marker may lie in a later segment than the transaction's records), oldest first. Only meaningful when
    ``upper_bound`` is at or below the partition's last stable offset: then every transaction overlapping the
    range is complete and its entry is on disk. Raises :class:`~broker_runtime.errors.CorruptIndexError` for a
    malformed file and ``OSError`` when one cannot be read.
    """
    bases = list_segment_bases(Path(dir))
    first = max(0, bisect.bisect_right(bases, start_offset) - 1)
    found: list[AbortedTxn] = []
    for base in bases[first:]:
        for entry in read_entries_read_only(segment_path(Path(dir), base, TXN_INDEX_SUFFIX)):
            if entry.last_offset >= start_offset and entry.first_offset < upper_bound:
                found.append(entry)
    return found


class SegmentReader:
    """The ``.log`` and ``.index`` of one segment, opened read-only."""

    __slots__ = ("_index", "_log", "base_offset", "dir", "size")

    def __init__(self, dir: str | os.PathLike[str], base_offset: int) -> None:
        self.dir = Path(dir)
        self.base_offset = base_offset
        path = segment_path(self.dir, base_offset, LOG_SUFFIX)
        try:
            self._log = FileHandle(path, writable=False)
        except FileNotFoundError as exc:
            raise SegmentGoneError(f"segment {path} was deleted while reading") from exc
        #: Size of the ``.log`` when the reader opened it.
        self.size = self._log.size()
        self._index: OffsetIndex | None = None

    @property
    def log_path(self) -> Path:
        return self._log.path

    def start_position(self, offset: int, log_size: int | None = None) -> int:
        """Byte position at or before the first batch holding ``offset`` (a batch boundary; 0 if unknown).

        Index entries at or past ``log_size`` (default: :attr:`size`) are not trusted.
        """
        if offset <= self.base_offset:
            return 0
        index = self._index
        if index is None or (log_size is not None and log_size != self.size):
            try:
                index = OffsetIndex.open_read_only(
                    segment_path(self.dir, self.base_offset, INDEX_SUFFIX),
                    self.base_offset,
                    self.size if log_size is None else log_size,
                )
            except OSError:
                return 0
            if log_size is None:
                self._index = index
        return index.lookup(offset).position

    def pread(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes of the ``.log`` from ``position`` (fewer at its current end)."""
        return self._log.pread(size, position)

    def __repr__(self) -> str:
        return f"SegmentReader({self.log_path.name}, size={self.size})"
