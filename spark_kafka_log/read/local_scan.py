"""A read-only scanner of one partition directory in Kafka's on-disk layout (the reader's direct transport).

Runs on: executors (task).

Where this runs: on **executors**, inside ``DataSourceReader.read()``, when the partition's directory
``<log dir>/<topic>-<partition>/`` is on the task's machine. It never writes, locks, creates or maps a file
for writing: the broker process owns the directory and keeps appending to the active segment, rolling new
segments and deleting old ones while we read.

The files are read through storage's read-only :class:`~broker_runtime.storage.segment_reader.SegmentReader`,
which owns Kafka's on-disk format (file names, the offset index and how much of an active, preallocated
index can be trusted). The segment holding an offset is the one with the greatest base offset <= that offset;
within it the offset index gives a byte position at or before the first batch that holds the offset; the
scanner starts there and reads whole batches forward.

What the broker may do meanwhile, and what is done about it:

* the active segment's index is preallocated and untrimmed, an entry may be half written: the reader trusts
  only the well-formed prefix; a missing or unreadable index just means "scan from byte 0";
* the ``.log`` file may end in a partial batch (an append in progress): the scan stops before it;
* retention may delete a segment between listing and opening: :class:`SegmentGoneError` tells the caller,
  which resumes through Fetch (or reports data loss) from the next offset it still needs.

read_committed (``kafka.isolation.level``): :meth:`LocalPartitionScanner.aborted_transactions` reads the
``.txnindex`` files (read-only, whole entries only) of the segment holding the range's start and of every later
segment, as Kafka's ``collectAbortedTransactions`` does for a Fetch; the read task filters the chunks with them
(:mod:`spark_kafka_log.read.txn_filter`). The scanner has no way to learn the last stable offset from the files: it
relies on the planner, which ends every read_committed range at or below the LSO, so every transaction with
records in the range is complete and its ABORT marker's entry is on disk (the broker writes the entry in the
same locked append as the marker, before the LSO can move past the transaction).

Thread-safety: a scanner holds no open file between calls; one scanner per task.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from broker_runtime.errors import SegmentGoneError
from broker_runtime.protocol.batch_header import HEADER_SIZE, iter_batch_spans, parse_header
from broker_runtime.storage.segment import list_segment_bases
from broker_runtime.storage.segment_reader import SegmentReader, collect_aborted_transactions
from broker_runtime.storage.txn_index import AbortedTxn

__all__ = [
    "LocalPartitionScanner",
    "ScanChunk",
    "SegmentGoneError",
    "find_partition_dir",
]


@dataclass(frozen=True, slots=True)
class ScanChunk:
    """Whole record batches read from one segment: ``data`` holds complete batches only (a view of the bytes read,
    not a copy).

    ``next_offset`` is the offset after the last batch in ``data``; ``batches`` how many batches it holds.
    The first batch may start before the offset asked for (the decoder drops those records).
    """

    data: bytes | memoryview
    next_offset: int
    batches: int


def find_partition_dir(log_dirs: tuple[str, ...] | list[str], topic: str, partition: int) -> str | None:
    """The directory ``<log dir>/<topic>-<partition>`` holding at least one ``.log`` segment, or None."""
    name = f"{topic}-{partition}"
    for log_dir in log_dirs:
        path = os.path.join(log_dir, name)
        try:
            if list_segment_bases(path):
                return path
        except OSError:
            continue
    return None


class LocalPartitionScanner:
    """Reads whole record batches of one partition straight from its segment files (read-only)."""

    def __init__(self, partition_dir: str, chunk_bytes: int = 8 * 1024 * 1024) -> None:
        self.partition_dir = partition_dir
        self.chunk_bytes = chunk_bytes

    def segment_bases(self) -> list[int]:
        """Base offsets of the segments present now, ascending."""
        try:
            return list_segment_bases(self.partition_dir)
        except OSError as exc:
            raise SegmentGoneError(
                f"partition directory {self.partition_dir} cannot be listed: {exc}"
            ) from exc

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, end_offset)`` (from the ``.txnindex`` files).

        ``end_offset`` must be at or below the partition's last stable offset (see the module docstring).
        Raises :class:`~broker_runtime.errors.CorruptIndexError` for a malformed ``.txnindex`` and
        :class:`SegmentGoneError` when the directory cannot be listed or an index cannot be read.
        """
        try:
            return collect_aborted_transactions(self.partition_dir, start_offset, end_offset)
        except OSError as exc:
            raise SegmentGoneError(
                f"the transaction indexes of {self.partition_dir} cannot be read: {exc}"
            ) from exc

    def start_position(self, base: int, offset: int, log_size: int) -> int:
        """Byte position in segment ``base`` at or before the first batch holding ``offset``."""
        try:
            return SegmentReader(self.partition_dir, base).start_position(offset, log_size)
        except SegmentGoneError:
            return 0

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
            segment = SegmentReader(self.partition_dir, base)  # SegmentGoneError when deleted meanwhile
            position = segment.start_position(next_offset) if next_offset > base else 0
            while True:
                # Each read starts at a batch boundary; a batch cut by the chunk's end is read again with the
                # next chunk (from the page cache) rather than copied onto it.
                data = segment.pread(position, max(self.chunk_bytes, HEADER_SIZE))
                spans = iter_batch_spans(data)
                if not spans and len(data) >= HEADER_SIZE:
                    need = parse_header(data).size
                    if need > len(data):  # one batch larger than the chunk: read all of it in one go
                        data = segment.pread(position, need)
                        spans = iter_batch_spans(data)
                if not spans:
                    break  # the end of the file, or a partial batch there (an append in progress)
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
                    yield ScanChunk(memoryview(data)[:cut], next_offset, len(kept))
                if done or next_offset >= end_offset:
                    return
                position += spans[-1][0] + spans[-1][1].size
