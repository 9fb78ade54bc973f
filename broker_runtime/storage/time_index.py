"""The sparse time index of a segment: ``<20-digit base offset>.timeindex`` (Kafka's ``TimeIndex``).

Format: a flat array of 12-byte big-endian entries, no header::

    offset  field            type
    0       timestamp        int64   the largest timestamp seen in the segment so far
    8       relativeOffset   int32   offset of that timestamp (last offset of its batch) - base offset

Entries are strictly increasing in timestamp and non-decreasing in offset: an entry whose timestamp is not
larger than the last one is skipped (``maybe_append``). An entry ``(t, o)`` says: every record before offset ``o``'s
batch has a timestamp <= ``t``. Lookups return the greatest entry whose timestamp is <= the target, or
``(-1, base offset)`` when there is none. The last slot is reserved: the index counts as full one entry early
so that the final "largest timestamp" entry can always be written when the segment is rolled or closed.

Opened read-only (:meth:`~.index_file.IndexFile.open_read_only`) the index trusts the longest prefix whose
relative offsets are non-negative and non-decreasing and whose timestamps strictly increase (the zero tail of
a preallocated active index ends it; the ``.log`` size is not needed).

Thread-safety: see :mod:`broker_runtime.storage.index_file` (serialized writers, lock-free readers).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, NamedTuple

from broker_runtime.errors import StorageError
from broker_runtime.storage.index_file import IndexFile

if TYPE_CHECKING:
    import numpy as np

__all__ = ["TIME_INDEX_ENTRY", "TimeIndex", "TimestampOffset"]

#: timestamp int64, relativeOffset int32.
TIME_INDEX_ENTRY = struct.Struct(">qi")

_NO_TIMESTAMP = -1


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(IndexFile):
    """Maps timestamps to offsets, sparsely."""

    ENTRY = TIME_INDEX_ENTRY
    OFFSET_FIELD = 1
    __slots__ = ()

    @classmethod
    def _trustworthy(cls, fields: list[np.ndarray], log_size: int) -> np.ndarray:
        import numpy as np  # only for an index read from a file (see index_file)

        ts, rel = fields[0], fields[1].astype(np.int64)
        ok = np.empty(len(ts), dtype=bool)
        ok[0] = rel[0] >= 0
        ok[1:] = (np.diff(ts) > 0) & (np.diff(rel) >= 0)
        return ok

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        ts, rel = self._entry(n)
        return TimestampOffset(ts, self.base_offset + rel)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base offset)`` when empty."""
        n = self._entries
        return TimestampOffset(_NO_TIMESTAMP, self.base_offset) if n == 0 else self.entry(n - 1)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append ``(timestamp, offset)`` if ``timestamp`` is larger than the last entry's; True if written."""
        if not skip_full_check and self.is_full:
            raise StorageError(
                f"attempt to append to a full time index {self.path.name} ({self._entries} entries)"
            )
        last = self.last_entry
        if self._entries:
            if offset < last.offset:
                raise self._corrupt(f"offset {offset} is smaller than the last offset {last.offset}")
            if timestamp < last.timestamp:
                raise self._corrupt(
                    f"timestamp {timestamp} is smaller than the last timestamp {last.timestamp}"
                )
        if timestamp <= last.timestamp:
            return False
        rel = self.relative_offset(offset)
        if self._entries >= self._max_entries:
            # Only reachable with skip_full_check on an index trimmed to its entries: grow by one slot.
            self.resize((self._entries + 1) * self.ENTRY.size)
        self._append_raw(timestamp, rel)
        return True

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Greatest entry with timestamp <= ``target_timestamp``; ``(-1, base)`` if none."""
        slot = self._largest_lower_bound(target_timestamp, 0)
        if slot < 0:
            return TimestampOffset(_NO_TIMESTAMP, self.base_offset)
        return self.entry(slot)

    def sanity_check(self) -> None:
        """O(1) structural check (Kafka's): raises :class:`CorruptIndexError` on a broken file."""
        n = self._whole_entries()
        if n == 0:
            return
        first_ts, first_rel = self._entry(0)
        last_ts, last_rel = self._entry(n - 1)
        if first_rel < 0:
            raise self._corrupt(f"first entry offset {first_rel} is negative")
        if n > 1 and (last_ts <= first_ts or last_rel < first_rel):
            raise self._corrupt(
                f"last entry ({last_ts}, {last_rel}) of {n} is not after the first ({first_ts}, {first_rel})"
            )
