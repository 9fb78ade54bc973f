"""The sparse offset index of a segment: ``<20-digit base offset>.index`` (Kafka's ``OffsetIndex``).

Format: a flat array of 8-byte big-endian entries, no header::

    offset  field            type
    0       relativeOffset   int32   offset - segment base offset
    4       position         int32   byte position in the .log file

An entry ``(o, p)`` says: the batch set whose last offset is ``o`` starts at byte ``p`` of the .log file, so the
batch holding any offset ``> o`` starts at or after ``p``. Entries are sparse (one per ``index.interval.bytes``
appended, see ``LogSegment.append``) and strictly increasing in both fields. Lookups return the greatest entry
whose offset is <= the target, or ``(base offset, 0)`` when there is none.

Opened read-only (:meth:`~.index_file.IndexFile.open_read_only`) the index trusts the longest prefix whose first
entry is non-negative and inside the ``.log`` size seen, and whose later entries increase in both fields and
stay inside it: a zero entry after the first (the preallocated tail) or a half-written entry ends it.

Thread-safety: see :mod:`broker_runtime.storage.index_file` (serialized writers, lock-free readers).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, NamedTuple

from broker_runtime.storage.index_file import IndexFile

if TYPE_CHECKING:
    import numpy as np

__all__ = ["OFFSET_INDEX_ENTRY", "OffsetIndex", "OffsetPosition"]

#: relativeOffset int32, position int32.
OFFSET_INDEX_ENTRY = struct.Struct(">ii")


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(IndexFile):
    """Maps offsets to .log byte positions, sparsely."""

    ENTRY = OFFSET_INDEX_ENTRY
    OFFSET_FIELD = 0
    __slots__ = ()

    @classmethod
    def _trustworthy(cls, fields: list[np.ndarray], log_size: int) -> np.ndarray:
        import numpy as np  # only for an index read from a file (see index_file)

        rel, pos = fields[0].astype(np.int64), fields[1].astype(np.int64)
        ok = np.empty(len(rel), dtype=bool)
        ok[0] = rel[0] >= 0 and 0 <= pos[0] < log_size
        ok[1:] = (np.diff(rel) > 0) & (np.diff(pos) > 0) & (pos[1:] < log_size)
        return ok

    def entry(self, n: int) -> OffsetPosition:
        rel, pos = self._entry(n)
        return OffsetPosition(self.base_offset + rel, pos)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must strictly increase (positions must not decrease)."""
        n = self._entries
        if n > 0:
            last_rel, last_pos = self._entry(n - 1)
            last = self.base_offset + last_rel
            if offset <= last:
                raise self._corrupt(f"offset {offset} is not larger than the last offset {last}")
            if position < last_pos:
                raise self._corrupt(f"position {position} is before the last position {last_pos}")
        self._append_raw(self.relative_offset(offset), position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Greatest entry with offset <= ``target_offset``; ``(base, 0)`` if none."""
        slot = self._largest_lower_bound(target_offset - self.base_offset, 0)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def lookup_by_position(self, position: int) -> OffsetPosition | None:
        """Greatest entry with position <= ``position`` (a known batch boundary), or None."""
        slot = self._largest_lower_bound(position, 1)
        return None if slot < 0 else self.entry(slot)

    def sanity_check(self, log_size: int) -> None:
        """O(1) structural check (Kafka's): raises :class:`CorruptIndexError` on a broken file."""
        n = self._whole_entries()
        if n == 0:
            return
        first_rel, first_pos = self._entry(0)
        last_rel, last_pos = self._entry(n - 1)
        if first_rel < 0 or first_pos < 0:
            raise self._corrupt(f"first entry ({first_rel}, {first_pos}) is negative")
        if n > 1 and (last_rel <= first_rel or last_pos <= first_pos):
            raise self._corrupt(
                f"last entry ({last_rel}, {last_pos}) of {n} is not after the first ({first_rel}, {first_pos})"
            )
        if last_pos >= max(log_size, 1):
            raise self._corrupt(f"last position {last_pos} is not inside the {log_size}-byte log")
