"""The preallocated, fixed-entry index file shared by the offset and time indexes (Kafka's ``AbstractIndex``).

On disk an index file is a flat array of fixed-size big-endian entries with no header and no checksum. While its
segment is active the file is preallocated to ``segment.index.bytes`` rounded down to a multiple of the entry
size, and only the first :attr:`IndexFile.entries` entries are meaningful; when the segment is rolled or closed
the file is trimmed to exactly ``entries * entry_size`` bytes. On open, the entry count is the file length
divided by the entry size (rounded down), so an untrimmed file left by a crash looks full of zero entries;
``sanity_check`` spots that in O(1) (the last entry is not after the first) and the log rebuilds the index.

Kafka memory-maps index files. pylog writes each entry with one ``pwrite`` into the preallocated file and keeps
a native-endian copy of every field in memory (``array``; 4 or 8 bytes per field per entry, loaded lazily on
first use with one read and a numpy byte swap). Lookups are ``bisect`` over those columns: O(log entries), in C.
(A first write into a large shared mapping costs milliseconds of page-fault work here, which a plain ``pwrite``
does not.) The file descriptor is closed when its last user releases it, never under a reader.

Thread-safety: writes (append, truncate, resize) must be serialized by the owner (the partition lock). Readers
may run concurrently without a lock: they read :attr:`IndexFile.entries` once and touch only entries below it;
an entry is in the columns before the count grows, and columns only shrink on truncation, which the partition
log performs only above what readers may read.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from array import array
from pathlib import Path
from typing import ClassVar

import numpy as np

from broker_runtime.errors import CorruptIndexError, StorageError

__all__ = ["IndexFile"]

#: Both index formats store an offset as an int32 relative to the segment's base offset.
_INT32_MAX = 2**31 - 1


class _Fd:
    """A file descriptor closed when the last reference goes."""

    __slots__ = ("fd",)

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR)

    def __del__(self) -> None:
        fd = getattr(self, "fd", -1)  # unset when os.open failed in __init__
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


class IndexFile:
    """A fixed-entry index file of one segment; subclasses define :attr:`ENTRY` and the meaning of entries."""

    #: The struct of one entry; subclasses set it.
    ENTRY: ClassVar[struct.Struct]

    __slots__ = ("_columns", "_entries", "_fd", "_max_entries", "base_offset", "max_index_size", "path")

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._fd: _Fd | None = None
        self._columns: list[array[int]] | None = None
        if not path.exists():
            # Newly created: preallocate, no entries yet.
            size = self._round(max_index_size)
            with open(path, "wb") as f:
                f.truncate(size)
            self._entries = 0
            self._max_entries = size // self.ENTRY.size
            self._columns = [array(code) for code in self._typecodes()]
        else:
            length = path.stat().st_size
            self._entries = length // self.ENTRY.size
            self._max_entries = self._entries

    # -- sizing -------------------------------------------------------------------------------------------

    @classmethod
    def _typecodes(cls) -> list[str]:
        """array typecodes of the entry's fields ('q' int64, 'i' int32), from the struct format."""
        return ["q" if c == "q" else "i" for c in cls.ENTRY.format.lstrip(">")]

    @classmethod
    def _round(cls, size: int) -> int:
        return max(0, size) // cls.ENTRY.size * cls.ENTRY.size

    @property
    def entries(self) -> int:
        """Number of meaningful entries."""
        return self._entries

    @property
    def max_entries(self) -> int:
        """Capacity of the file as currently sized."""
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    @property
    def size_bytes(self) -> int:
        """Bytes of meaningful entries."""
        return self._entries * self.ENTRY.size

    def _handle(self) -> int:
        handle = self._fd
        if handle is None:
            handle = self._fd = _Fd(self.path)
        return handle.fd

    def _cols(self) -> list[array[int]]:
        """The in-memory columns, loaded from the file on first use."""
        cols = self._columns
        if cols is None:
            n = self._entries
            codes = self._typecodes()
            cols = [array(code) for code in codes]
            if n:
                raw = os.pread(self._handle(), n * self.ENTRY.size, 0)
                fmt = self.ENTRY.format.lstrip(">")
                dtype = np.dtype([(f"f{i}", ">" + c) for i, c in enumerate(fmt)])
                table = np.frombuffer(raw, dtype=dtype, count=len(raw) // self.ENTRY.size)
                for i, code in enumerate(codes):
                    cols[i].frombytes(table[f"f{i}"].astype("=i8" if code == "q" else "=i4").tobytes())
            self._columns = cols
        return cols

    def _sync_columns(self) -> None:
        cols = self._columns
        if cols is None:
            return
        n = self._entries
        for col in cols:
            if len(col) > n:
                del col[n:]

    def resize(self, new_size: int) -> None:
        """Set the file length to ``new_size`` rounded down to whole entries (keeps entries that still fit)."""
        rounded = self._round(new_size)
        self._cols()  # load before a shrink cuts bytes off
        os.truncate(self.path, rounded)
        self._max_entries = rounded // self.ENTRY.size
        self._entries = min(self._entries, self._max_entries)
        self._sync_columns()

    def trim(self) -> None:
        """Trim the file to its meaningful entries (on roll, close and after recovery)."""
        self.resize(self.size_bytes)

    def preallocate(self) -> None:
        """Grow the file back to the configured maximum (when the segment becomes active again)."""
        self.resize(self.max_index_size)

    def reset(self) -> None:
        """Drop every entry and preallocate (before a rebuild)."""
        self._entries = 0
        self._columns = [array(code) for code in self._typecodes()]
        self.resize(self.max_index_size)

    def _truncate_to_entries(self, n: int) -> None:
        self._cols()
        self._entries = max(0, min(n, self._entries))
        self._sync_columns()

    # -- raw entry access -------------------------------------------------------------------------------------

    def _append_raw(self, *fields: int) -> None:
        n = self._entries
        if n >= self._max_entries:
            raise StorageError(f"attempt to append to a full index {self.path.name} ({n} entries)")
        cols = self._cols()
        os.pwrite(self._handle(), self.ENTRY.pack(*fields), n * self.ENTRY.size)
        for col, value in zip(cols, fields, strict=True):
            col.append(value)
        self._entries = n + 1

    def _entry(self, n: int) -> tuple[int, ...]:
        return tuple(col[n] for col in self._cols())

    def _largest_lower_bound(self, target: int, field: int) -> int:
        """Slot of the last entry whose ``field`` is <= ``target`` (fields must be non-decreasing); -1 if none."""
        n = self._entries
        if n == 0:
            return -1
        return min(bisect.bisect_right(self._cols()[field], target), n) - 1

    def read_all(self) -> bytes:
        """The meaningful bytes of the index file (for tests and tools)."""
        return os.pread(self._handle(), self.size_bytes, 0) if self._entries else b""

    # -- lifecycle ------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the file (if it was ever written through this object)."""
        if self._fd is not None:
            os.fsync(self._fd.fd)

    def close(self) -> None:
        """Trim to the meaningful entries and drop the descriptor (closed with its last user)."""
        if self.path.exists():
            self.trim()
        self._fd = None

    def rename(self, new_path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        """Unlink the file; the in-memory entries stay readable for in-flight readers."""
        self.path.unlink(missing_ok=True)

    def relative_offset(self, offset: int) -> int:
        """``offset - base`` if it fits the int32 relative offset both index formats store, else raise."""
        rel = offset - self.base_offset
        if not 0 <= rel <= _INT32_MAX:
            raise self._corrupt(
                f"offset {offset} does not fit a relative offset from base {self.base_offset}"
            )
        return rel

    def can_append_offset(self, offset: int) -> bool:
        """True if ``offset`` fits a relative offset from this index's base."""
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def _corrupt(self, message: str) -> CorruptIndexError:
        return CorruptIndexError(f"{message} in {self.path.name}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path.name}, entries={self._entries}, max={self._max_entries})"
