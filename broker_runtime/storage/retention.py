"""Retention of a partition log: which old segments go (Kafka's ``UnifiedLog.deleteOldSegments`` with its three
breaches, run for every log by the log manager's periodic task, as Kafka's ``LogManager.cleanupLogs``).

One pass (:func:`run_retention`) deletes the oldest segments, in this order:

* while ``now - largest timestamp of the segment > retention.ms`` (time);
* while the log minus the segment is still >= ``retention.bytes`` (size);
* while the next segment starts at or below the log start offset (what DeleteRecords or a leader's log start
  moved past).

Time and size apply only when ``cleanup.policy`` holds ``delete`` (Kafka's rule): a compact-only log keeps its
segments (the log cleaner, :mod:`.cleaner`, removes superseded records instead). -1 disables either. The
deletion itself is the log's (:meth:`~.partition_log.PartitionLog.delete_old_segments`): never a segment holding
offsets at or above the high watermark, never the active segment unless it is non-empty (then the log rolls
first); the log start offset becomes the first remaining base offset; the files are renamed to ``.deleted`` and
unlinked right away. An open transaction's first batches may go with their segment: the last stable offset is
then the log start offset (as in Kafka).

Threading: a pass holds the partition lock throughout (appends wait for it; reads do not), so its three steps
see one log; the log manager runs passes on its scheduler thread.
"""

from __future__ import annotations

from broker_runtime.storage.partition_log import PartitionLog
from broker_runtime.storage.segment import LogSegment

__all__ = ["run_retention"]


def run_retention(log: PartitionLog, now_ms: int | None = None) -> int:
    """One retention pass over ``log`` (time, size, log start); returns the number of segments deleted."""
    with log.lock:
        now = log.clock() if now_ms is None else now_ms
        config = log.config
        deleted = 0
        retention_ms = config.retention_ms if config.delete else -1
        retention_bytes = config.retention_bytes if config.delete else -1
        if retention_ms >= 0:
            deleted += log.delete_old_segments(lambda seg, nxt: now - seg.largest_timestamp() > retention_ms)
        if retention_bytes >= 0:
            excess = log.size_bytes - retention_bytes

            def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            if excess > 0:
                deleted += log.delete_old_segments(over_size)
        return deleted + log.delete_segments_below_log_start()
