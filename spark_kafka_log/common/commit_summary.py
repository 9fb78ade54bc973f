"""What a write task reports to the driver, and the one-line summary the driver logs for a job or micro-batch.

Runs on: executors (task); driver (commit).

Where this runs: :class:`PartitionStats` and :class:`PylogCommitMessage` are filled on the **executors** (one
message per successful task, pickled back by Spark); :func:`merge_partitions` and :func:`summarize` run on the
**driver** in ``commit()`` / ``abort()``, which see nothing but these messages (PySpark calls them on an
unpickled writer in a fresh Python worker). Plain data, no I/O, not shared between threads.

Counting rule: ``records`` are the records a task's successful attempt had acknowledged; ``recovered`` are the
records failed earlier attempts of the same task had already written, which the idempotent retry found in the
log and skipped. Both are in the log, so a job made ``records + recovered`` records visible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark.sql.datasource import WriterCommitMessage

__all__ = ["PartitionStats", "PylogCommitMessage", "merge_partitions", "summarize"]


@dataclass
class PartitionStats:
    """What one task wrote to one topic partition (carried to the driver in the commit message)."""

    topic: str
    partition: int
    records: int = 0
    bytes: int = 0
    first_offset: int = -1
    last_offset: int = -1
    #: Records a failed earlier attempt of the task had already written here (skipped by this attempt).
    recovered: int = 0

    def add(self, base_offset: int, count: int, size: int) -> None:
        """Count an acknowledged batch (``base_offset`` < 0: unknown, e.g. acks=0 or a duplicate)."""
        self.records += count
        self.bytes += size
        if base_offset >= 0:
            if self.first_offset < 0 or base_offset < self.first_offset:
                self.first_offset = base_offset
            self.last_offset = max(self.last_offset, base_offset + count - 1)


@dataclass
class PylogCommitMessage(WriterCommitMessage):
    """What one write task delivered, sent from the executor to the driver's commit()."""

    write_id: str
    task: int
    attempt: int
    records: int
    recovered: int
    bytes: int
    producer_id: int
    producer_epoch: int
    seconds: float
    partitions: list[PartitionStats] = field(default_factory=list)
    #: The task's transactional id when it wrote inside a transaction (flushed, NOT committed: the driver
    #: commits it with EndTxn on ``producer_id``/``producer_epoch``); None when not transactional.
    transactional_id: str | None = None
    #: Wall-clock ms when the task's transaction began (its first AddPartitionsToTxn); -1 when none.
    transaction_started_ms: int = -1
    #: Wall-clock ms when the task had every record acknowledged (the streaming sink records the latest one).
    finished_ms: int = -1


def merge_partitions(messages: Sequence[WriterCommitMessage | None]) -> dict[tuple[str, int], PartitionStats]:
    """Per topic partition, the sum of what every task reported (offsets: the overall first..last)."""
    merged: dict[tuple[str, int], PartitionStats] = {}
    for m in messages:
        if not isinstance(m, PylogCommitMessage):
            continue
        for s in m.partitions:
            acc = merged.setdefault((s.topic, s.partition), PartitionStats(s.topic, s.partition))
            acc.records += s.records
            acc.bytes += s.bytes
            acc.recovered += s.recovered
            if s.first_offset >= 0 and (acc.first_offset < 0 or s.first_offset < acc.first_offset):
                acc.first_offset = s.first_offset
            acc.last_offset = max(acc.last_offset, s.last_offset)
    return merged


def _partition_text(t: str, p: int, s: PartitionStats) -> str:
    text = f"{t}-{p}@{s.first_offset}..{s.last_offset}" if s.first_offset >= 0 else f"{t}-{p}({s.records})"
    return text + (f" (+{s.recovered} earlier, by failed attempts)" if s.recovered else "")


def summarize(messages: Sequence[WriterCommitMessage | None]) -> str:
    """One line: records made visible (and how many by failed attempts), bytes, tasks, per-partition offsets.

    Without retried tasks: ``25 records, 2500 bytes, 2 partition(s) from 2 task(s): t-0@0..19, t-1@20..24``.
    With them the records count includes what failed attempts wrote, and says how many those were.
    """
    done = [m for m in messages if isinstance(m, PylogCommitMessage)]
    merged = merge_partitions(done)
    written = sum(m.records for m in done)
    recovered = sum(m.recovered for m in done)
    size = sum(m.bytes for m in done)
    ranges = ", ".join(_partition_text(t, p, s) for (t, p), s in sorted(merged.items()))
    if recovered:
        head = (
            f"{written + recovered} records, {recovered} of them written by failed attempts of retried tasks "
            f"(kept, not rewritten) and {written} by the final attempts ({size} bytes)"
        )
    else:
        head = f"{written} records, {size} bytes"
    return f"{head}, {len(merged)} partition(s) from {len(done)} task(s)" + (f": {ranges}" if ranges else "")
