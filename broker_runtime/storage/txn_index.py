"""The aborted-transaction index of one segment: ``<base offset, 20 digits>.txnindex`` (Kafka's
``TransactionIndex``).

File format (big-endian, no header, nothing but entries; Kafka's ``AbortedTxn``), 34 bytes per entry::

    offset  field             type
    0       version           int16   0
    2       producerId        int64
    10      firstOffset       int64   first offset of the aborted transaction (may lie in an older segment)
    18      lastOffset        int64   offset of its ABORT marker (in this segment)
    26      lastStableOffset  int64   the partition's last stable offset once the marker was written

An entry is appended when an ABORT marker is appended to the segment (the segment holding the marker, as
Kafka's ``LogSegment.updateTxnIndex``); entries are ordered by strictly increasing ``lastOffset``. The file is
created with its first entry (a segment without aborted transactions has no ``.txnindex``, as in Kafka).
Truncating the segment drops the entries whose marker is at or above the truncation offset.

Reads (:meth:`TransactionIndex.collect`, Kafka's ``collectAbortedTxns``): the entries of transactions that
overlap ``[fetch offset, upper bound)``: ``lastOffset >= fetch offset and firstOffset < upper bound``.

A reader outside the broker process (the connector's direct scan) uses :func:`read_entries_read_only`: it never
opens the file for writing and keeps whole entries only, since the broker may be appending one meanwhile. A
partial last entry belongs to an ABORT marker being appended right now, at the log end, so its transaction was
still open a moment ago: it lies at or above the last stable offset any reader planned against.

Thread-safety: the partition log serializes writers; :meth:`TransactionIndex.collect` reads an immutable
tuple of entries, so readers need no lock.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from broker_runtime.errors import CorruptIndexError, StorageError

__all__ = ["ABORTED_TXN", "TXN_INDEX_SUFFIX", "AbortedTxn", "TransactionIndex", "read_entries_read_only"]

TXN_INDEX_SUFFIX = ".txnindex"
#: version int16, producerId int64, firstOffset int64, lastOffset int64, lastStableOffset int64.
ABORTED_TXN = struct.Struct(">hqqqq")
assert ABORTED_TXN.size == 34
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction of a partition."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ABORTED_TXN.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def decode_entries(data: bytes, name: str) -> list[AbortedTxn]:
    """Parse a whole ``.txnindex``; raises :class:`CorruptIndexError` naming what is wrong."""
    if len(data) % ABORTED_TXN.size:
        raise CorruptIndexError(
            f"{name}: {len(data)} bytes is not a multiple of the {ABORTED_TXN.size}-byte entry size"
        )
    entries: list[AbortedTxn] = []
    previous = -1
    for version, pid, first, last, lso in ABORTED_TXN.iter_unpack(data):
        if version != _VERSION:
            raise CorruptIndexError(f"{name}: entry {len(entries)} has version {version}, expected 0")
        if last <= previous or first > last:
            raise CorruptIndexError(
                f"{name}: entry {len(entries)} spans offsets {first}..{last} after an entry ending at {previous}"
            )
        previous = last
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


def read_entries_read_only(path: Path) -> list[AbortedTxn]:
    """The whole entries of a ``.txnindex`` the broker may be appending to (read-only; see the module docstring).

    A missing file has no entries; a partial last entry is left out; a malformed entry raises
    :class:`CorruptIndexError`.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % ABORTED_TXN.size
    return decode_entries(data[:whole], path.name)


class TransactionIndex:
    """The ``.txnindex`` of one segment (see the module docstring)."""

    __slots__ = ("_entries", "base_offset", "path")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: tuple[AbortedTxn, ...] = ()

    @classmethod
    def open(cls, path: Path, base_offset: int) -> TransactionIndex:
        """Load the file if it exists (a corrupt one raises :class:`CorruptIndexError`)."""
        index = cls(path, base_offset)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return index
        index._entries = tuple(decode_entries(data, path.name))
        return index

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        return self._entries

    @property
    def last_offset(self) -> int:
        """The marker offset of the newest entry, or -1 when empty."""
        return self._entries[-1].last_offset if self._entries else -1

    def append(self, entry: AbortedTxn) -> None:
        """Append an entry; its ``lastOffset`` must exceed the previous one (Kafka's rule)."""
        if entry.last_offset <= self.last_offset:
            raise StorageError(
                f"{self.path.name}: aborted transaction ending at {entry.last_offset} does not follow the "
                f"last entry ending at {self.last_offset}"
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, entry.encode())
        finally:
            os.close(fd)
        self._entries = (*self._entries, entry)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Entries of transactions overlapping ``[fetch_offset, upper_bound)``."""
        return [e for e in self._entries if e.last_offset >= fetch_offset and e.first_offset < upper_bound]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset``."""
        keep = tuple(e for e in self._entries if e.last_offset < offset)
        if len(keep) == len(self._entries):
            return
        self._entries = keep
        if keep:
            with open(self.path, "r+b") as f:
                f.truncate(len(keep) * ABORTED_TXN.size)
        else:
            self.path.unlink(missing_ok=True)

    def flush(self) -> None:
        """fsync the file (when it exists)."""
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def __len__(self) -> int:
        return len(self._entries)
