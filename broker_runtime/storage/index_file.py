"""The preallocated, fixed-entry index file shared by the offset and time indexes (Kafka's ``AbstractIndex``).

On disk an index file is a flat array of fixed-size big-endian entries with no header and no checksum. While its
segment is active the file is preallocated to ``segment.index.bytes`` rounded down to a multiple of the entry
size, and only the first :attr:`IndexFile.entries` entries are meaningful; when the segment is rolled or closed
the file is trimmed to exactly ``entries * entry_size`` bytes. On open, the entry count is the file length
divided by the entry size (rounded down), so an untrimmed file left by a crash looks full of zero entries;
``sanity_check`` spots that in O(1) (the last entry is not after the first) and the log rebuilds the index.

Kafka memory-maps index files. pylog writes each entry with one ``pwrite`` into the preallocated file and keeps
a native-endian copy of every field in memory (``array``; 4 or 8 bytes per field per entry, loaded lazily on
first use with one read and a numpy byte swap; numpy is imported only then, so a broker whose indexes are all
new never loads it). Lookups are ``bisect`` over those columns: O(log entries), in C.
(A first write into a large shared mapping costs milliseconds of page-fault work here, which a plain ``pwrite``
does not.) The descriptor is a :class:`~.file_handle.FileHandle`: closed when its last user releases it, never
under a reader.

Read-only mode (Kafka's ``OffsetIndex(file, baseOffset, maxIndexSize, writable = false)``):
:meth:`IndexFile.open_read_only` opens the file ``O_RDONLY`` through a :class:`~.file_handle.FileHandle` and
reads it once; it never creates, writes, truncates, locks or maps the file, so another process may do so while
the broker keeps appending. Only the *trusted prefix* is kept (each subclass defines it: entries whose fields
increase as the format requires and, for the offset index, whose positions lie inside the ``.log`` size the
reader saw): the zero tail of a preallocated active index and an entry being written end it. Every mutating
call on a read-only index raises :class:`~broker_runtime.errors.StorageError`.

Thread-safety: writes (append, truncate, resize) must be serialized by the owner (the partition lock). Readers
may run concurrently without a lock: they read :attr:`IndexFile.entries` once and touch only entries below it;
an entry is in the columns before the count grows, and columns only shrink on truncation, which the partition
log performs only above what readers may read.
"""

from __future__ import annotations

import abc
import bisect
import struct
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Self

from broker_runtime.errors import CorruptIndexError, StorageError
from broker_runtime.storage.file_handle import FileHandle

if TYPE_CHECKING:
    import numpy as np

__all__ = ["IndexFile"]

#: Both index formats store an offset as an int32 relative to the segment's base offset.
_INT32_MAX = 2**31 - 1


class IndexFile(abc.ABC):
    """A fixed-entry index file of one segment; subclasses define :attr:`ENTRY`, :attr:`OFFSET_FIELD` and the
    meaning of entries."""

    #: The struct of one entry; subclasses set it.
    ENTRY: ClassVar[struct.Struct]
    #: Which field of an entry is the relative offset (entries are non-decreasing in it).
    OFFSET_FIELD: ClassVar[int]

    _fd: FileHandle | None
    _columns: list[array[int]] | None

    __slots__ = (
        "_columns",
        "_entries",
        "_fd",
        "_max_entries",
        "_writable",
        "base_offset",
        "max_index_size",
        "path",
    )

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        """The writable index at ``path``: created preallocated when absent, else opened lazily."""
        self._setup(path, base_offset, max_index_size, writable=True)
        if not path.exists():
            # Newly created: preallocate, no entries yet.
            size = self._round(max_index_size)
            handle = self._fd = FileHandle(path, writable=True, create=True)
            handle.truncate(size)
            self._entries = 0
            self._max_entries = size // self.ENTRY.size
            self._columns = [array(code) for code in self._typecodes()]
        else:
            length = path.stat().st_size
            self._entries = length // self.ENTRY.size
            self._max_entries = self._entries

    def _setup(self, path: Path, base_offset: int, max_index_size: int, *, writable: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._writable = writable
        self._fd = None
        self._columns = None
        self._entries = 0
        self._max_entries = 0

    @classmethod
    def open_read_only(cls, path: Path, base_offset: int, log_size: int) -> Self:
        """The trusted prefix of the index at ``path``, read once through a read-only descriptor.

        ``log_size`` is the size of the segment's ``.log`` the caller saw (entries pointing past it are not
        trusted). Raises ``FileNotFoundError`` (or another ``OSError``) when the file cannot be opened.
        """
        index = cls.__new__(cls)
        index._setup(path, base_offset, 0, writable=False)
        handle = index._fd = FileHandle(path, writable=False)
        fields = cls._decode(handle.pread(handle.size(), 0))
        n = cls._trusted_prefix(fields, log_size) if fields and len(fields[0]) else 0
        index._columns = [
            array(code, field[:n].tobytes()) for code, field in zip(cls._typecodes(), fields, strict=True)
        ]
        index._entries = index._max_entries = n
        index.max_index_size = n * cls.ENTRY.size
        return index

    @classmethod
    def _trusted_prefix(cls, fields: list[np.ndarray], log_size: int) -> int:
        """How many leading entries of a file read while a writer may be appending can be trusted."""
        import numpy as np

        bad = np.flatnonzero(~cls._trustworthy(fields, log_size))
        return int(bad[0]) if len(bad) else len(fields[0])

    @classmethod
    @abc.abstractmethod
    def _trustworthy(cls, fields: list[np.ndarray], log_size: int) -> np.ndarray:
        """Per entry: True when it continues a well-formed index (compared with the entry before it)."""

    @property
    def writable(self) -> bool:
        return self._writable

    # -- sizing -------------------------------------------------------------------------------------------

    @classmethod
    def _typecodes(cls) -> list[str]:
        """array typecodes of the entry's fields ('q' int64, 'i' int32), from the struct format."""
        return ["q" if c == "q" else "i" for c in cls.ENTRY.format.lstrip(">")]

    @classmethod
    def _decode(cls, raw: bytes) -> list[np.ndarray]:
        """The whole entries of ``raw`` as one native-endian numpy column per field."""
        import numpy as np

        fmt = cls.ENTRY.format.lstrip(">")
        dtype = np.dtype([(f"f{i}", ">" + c) for i, c in enumerate(fmt)])
        table = np.frombuffer(raw, dtype=dtype, count=len(raw) // cls.ENTRY.size)
        return [table[f"f{i}"].astype("=i8" if c == "q" else "=i4") for i, c in enumerate(fmt)]

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

    def _handle(self) -> FileHandle:
        handle = self._fd
        if handle is None:
            handle = self._fd = FileHandle(self.path, writable=self._writable)
        return handle

    def _check_writable(self, what: str) -> None:
        if not self._writable:
            raise StorageError(f"cannot {what} {self.path.name}: opened read-only")

    def _cols(self) -> list[array[int]]:
        """The in-memory columns, loaded from the file on first use."""
        cols = self._columns
        if cols is None:
            n = self._entries
            cols = [array(code) for code in self._typecodes()]
            if n:
                fields = self._decode(self._handle().pread(n * self.ENTRY.size, 0))
                for col, field in zip(cols, fields, strict=True):
                    col.frombytes(field.tobytes())
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
        self._check_writable("resize")
        rounded = self._round(new_size)
        self._cols()  # load before a shrink cuts bytes off
        self._handle().truncate(rounded)
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
        self._check_writable("reset")
        self._entries = 0
        self._columns = [array(code) for code in self._typecodes()]
        self.resize(self.max_index_size)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        field, rel = self.OFFSET_FIELD, offset - self.base_offset
        slot = self._largest_lower_bound(rel, field)
        if slot >= 0 and self._entry(slot)[field] == rel:
            # Drop from the first entry at this offset (only a time index may repeat one, in theory).
            while slot > 0 and self._entry(slot - 1)[field] == rel:
                slot -= 1
            self._truncate_to_entries(slot)
        else:
            self._truncate_to_entries(slot + 1)

    def _whole_entries(self) -> int:
        """The first O(1) check of ``sanity_check`` (Kafka's): the file holds whole entries; returns their count."""
        length = self.path.stat().st_size
        if length % self.ENTRY.size:
            raise self._corrupt(f"length {length} is not a multiple of {self.ENTRY.size}")
        return self._entries

    def _truncate_to_entries(self, n: int) -> None:
        self._check_writable("truncate")
        self._cols()
        self._entries = max(0, min(n, self._entries))
        self._sync_columns()

    # -- raw entry access -------------------------------------------------------------------------------------

    def _append_raw(self, *fields: int) -> None:
        self._check_writable("append to")
        n = self._entries
        if n >= self._max_entries:
            raise StorageError(f"attempt to append to a full index {self.path.name} ({n} entries)")
        cols = self._cols()
        self._handle().pwrite_all(self.ENTRY.pack(*fields), n * self.ENTRY.size)
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

    # -- lifecycle ------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the file (if it was ever written through this object; a read-only index wrote nothing)."""
        if self._fd is not None and self._writable:
            self._fd.fsync()

    def close(self) -> None:
        """Trim to the meaningful entries (writable only) and drop the descriptor (closed with its last user)."""
        if self._writable and self.path.exists():
            self.trim()
        self._fd = None

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
