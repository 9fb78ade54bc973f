"""A read-only scanner of one partition directory in Kafka's on-disk layout (the reader's direct transport).

Where this runs: on **executors**, inside ``DataSourceReader.read()``, when the partition's directory
``<log dir>/<topic>-<partition>/`` is on the task's machine. It never writes, locks, creates or maps a file
for writing: the broker process owns the directory and keeps appending to the active segment, rolling new
segments and deleting old ones while we read.

On-disk layout read here (Kafka's ``LogSegment`` / ``OffsetIndex``)::

    00000000000000000000.log     record batches, back to back (the 61-byte header of batch_header.py)
    00000000000000000000.index   entries of 8 bytes: int32 relativeOffset, int32 file position
                                 (big-endian); sparse: one entry per ``index.interval.bytes`` of appends;
                                 an entry (o, pos) means "the batch set holding offset base+o starts at pos"

The segment holding an offset is the one with the greatest base offset <= that offset (file names are the
20-digit base offsets). Within it the offset index gives a byte position at or before the first batch that
holds the offset; the reader starts there and reads whole batches forward.

Invariants relied upon, and what is done when they do not hold:

* The active segment's index is preallocated (zero-filled) and untrimmed: only the prefix whose relative
  offsets AND positions strictly increase is trusted (a (0, 0) entry after the first ends it, and so does
  an entry the broker is writing right now). A position past the end of the ``.log`` file is ignored.
  A missing or unreadable index just means "scan from byte 0" -- slower, never wrong.
* The ``.log`` file may end in a partial batch (an append in progress): the scan stops before it.
* Retention may delete a segment between listing and opening: :class:`SegmentGoneError` tells the caller,
  which resumes through Fetch (or reports data loss) from the next offset it still needs.

Thread-safety: a scanner holds no open file between calls; one scanner per task.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from broker_runtime.errors import StorageError
from broker_runtime.protocol.batch_header import HEADER_SIZE, iter_batch_spans, parse_header

__all__ = [
    "LocalPartitionScanner",
    "ScanChunk",
    "SegmentGoneError",
    "find_partition_dir",
]

_LOG_NAME = re.compile(r"^(\d{20})\.log$")
#: One offset-index entry: relativeOffset, position (big-endian int32 pair).
_INDEX_ENTRY_DTYPE = np.dtype(">i4")
_INDEX_ENTRY_SIZE = 8


class SegmentGoneError(StorageError):
    """A segment file vanished (retention or compaction) while the scan needed it."""


@dataclass(frozen=True, slots=True)
class ScanChunk:
    """Whole record batches read from one segment: ``data`` holds complete batches only.

    ``next_offset`` is the offset after the last batch in ``data``; ``batches`` how many batches it holds.
    The first batch may start before the offset asked for (the decoder drops those records).
    """

    data: bytes
    next_offset: int
    batches: int


def find_partition_dir(log_dirs: tuple[str, ...] | list[str], topic: str, partition: int) -> str | None:
    """The directory ``<log dir>/<topic>-<partition>`` holding at least one ``.log`` segment, or None."""
    name = f"{topic}-{partition}"
    for log_dir in log_dirs:
        path = os.path.join(log_dir, name)
        try:
            if any(_LOG_NAME.match(entry) for entry in os.listdir(path)):
                return path
        except OSError:
            continue
    return None


def _valid_index_entries(raw: bytes, log_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(relative offsets, positions) of the trustworthy prefix of an offset index's bytes."""
    usable = len(raw) - len(raw) % _INDEX_ENTRY_SIZE
    if usable == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    pairs = np.frombuffer(raw, dtype=_INDEX_ENTRY_DTYPE, count=usable // 4).reshape(-1, 2).astype(np.int64)
    rel, pos = pairs[:, 0], pairs[:, 1]
    ok = np.ones(len(rel), dtype=bool)
    ok[0] = rel[0] >= 0 and 0 <= pos[0] < log_size
    if len(rel) > 1:
        ok[1:] = (np.diff(rel) > 0) & (np.diff(pos) > 0) & (pos[1:] < log_size)
    bad = np.flatnonzero(~ok)
    n = int(bad[0]) if len(bad) else len(rel)
    return rel[:n], pos[:n]


class LocalPartitionScanner:
    """Reads whole record batches of one partition straight from its segment files (read-only)."""

    def __init__(self, partition_dir: str, chunk_bytes: int = 8 * 1024 * 1024) -> None:
        self.partition_dir = partition_dir
        self.chunk_bytes = chunk_bytes

    def segment_bases(self) -> list[int]:
        """Base offsets of the segments present now, ascending."""
        try:
            names = os.listdir(self.partition_dir)
        except OSError as exc:
            raise SegmentGoneError(
                f"partition directory {self.partition_dir} cannot be listed: {exc}"
            ) from exc
        return sorted(int(m.group(1)) for m in map(_LOG_NAME.match, names) if m)

    def _path(self, base: int, suffix: str) -> str:
        return os.path.join(self.partition_dir, f"{base:020d}{suffix}")

    def start_position(self, base: int, offset: int, log_size: int) -> int:
        """Byte position in segment ``base`` at or before the first batch holding ``offset``."""
        try:
            with open(self._path(base, ".index"), "rb") as fh:
                raw = fh.read()
        except OSError:
            return 0
        rel, pos = _valid_index_entries(raw, log_size)
        i = int(np.searchsorted(rel, offset - base, side="right")) - 1
        return int(pos[i]) if i >= 0 else 0

    def chunks(self, start_offset: int, end_offset: int) -> Iterator[ScanChunk]:
        """Complete batches covering [start_offset, end_offset), in order, in chunks of about chunk_bytes.

        Stops early (without error) when the files end before ``end_offset`` -- the caller decides what the
        missing tail means. Raises :class:`SegmentGoneError` when the first needed segment is gone.
        """
        bases = self.segment_bases()
        if not bases:
            raise SegmentGoneError(f"no segment left in {self.partition_dir}")
        first = int(np.searchsorted(np.array(bases, dtype=np.int64), start_offset, side="right")) - 1
        if first < 0:
            raise SegmentGoneError(
                f"offset {start_offset} is before the first segment ({bases[0]:020d}.log) of {self.partition_dir}"
            )
        next_offset = start_offset
        for i in range(first, len(bases)):
            base = bases[i]
            if base >= end_offset:
                return
            if i + 1 < len(bases) and bases[i + 1] <= next_offset:
                continue  # the next segment already starts at or before what we still need
            log_path = self._path(base, ".log")
            try:
                fh = open(log_path, "rb")  # noqa: SIM115 - closed in the finally below
            except FileNotFoundError as exc:
                raise SegmentGoneError(f"segment {log_path} was deleted while reading") from exc
            try:
                size = os.fstat(fh.fileno()).st_size
                position = self.start_position(base, next_offset, size) if next_offset > base else 0
                fh.seek(position)
                pending = b""
                while True:
                    want = max(self.chunk_bytes, HEADER_SIZE) - len(pending)
                    data = fh.read(want)
                    buf = pending + data if pending else data
                    if not buf:
                        break
                    spans = iter_batch_spans(buf)
                    if not spans:
                        if not data:
                            break  # partial batch at the end of the file (append in progress)
                        if len(buf) >= HEADER_SIZE:
                            # One batch larger than the chunk: read the rest of it in one go.
                            need = parse_header(buf).size - len(buf)
                            more = fh.read(need)
                            buf += more
                            if len(more) < need:
                                break
                            spans = iter_batch_spans(buf)
                        if not spans:
                            pending = buf
                            continue
                    # Keep only batches that start before the end of the range.
                    kept = spans
                    done = False
                    if spans[-1][1].base_offset >= end_offset:
                        kept = [s for s in spans if s[1].base_offset < end_offset]
                        done = True
                    if kept:
                        last_pos, last = kept[-1]
                        cut = last_pos + last.size
                        next_offset = max(next_offset, last.next_offset)
                        yield ScanChunk(buf[:cut], next_offset, len(kept))
                    if done or next_offset >= end_offset:
                        return
                    end_of_spans = spans[-1][0] + spans[-1][1].size
                    pending = buf[end_of_spans:]
                    if not data:
                        break
            finally:
                fh.close()
