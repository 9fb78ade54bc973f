"""Reading a whole partition log batch by batch: the replay loop of the coordinators' internal topics.

:func:`read_batches` yields every :class:`~broker_runtime.protocol.records.RecordBatch` of a
:class:`~.partition_log.PartitionLog` from its log start offset (or ``start``) up to its log end offset as it
was when the call began (or ``end``), in offset order, one segment read of at most ``chunk_bytes`` at a time
(a larger batch is still returned whole). Control batches are included (a transaction marker ends pending
transactional offsets on replay). Both coordinators replay ``__consumer_offsets`` / ``__transaction_state``
through it at start and when they become leader of a partition.

Thread-safety: as :meth:`PartitionLog.read` (the broker's event-loop thread); the yielded batches are views of
bytes read once, valid after the log moves on.
"""

from __future__ import annotations

from collections.abc import Iterator

from broker_runtime.protocol.records import RecordBatch
from broker_runtime.storage.partition_log import PartitionLog

__all__ = ["DEFAULT_CHUNK_BYTES", "read_batches"]

#: Bytes asked of one segment read (Kafka's loaders read ``offsets.load.buffer.size``, 5 MiB, at a time).
DEFAULT_CHUNK_BYTES = 1 << 20


def read_batches(
    log: PartitionLog,
    start: int | None = None,
    end: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Iterator[RecordBatch]:
    """Every batch of ``log`` in ``[start, end)`` (defaults: log start, log end offset now), in order."""
    offset = log.log_start_offset if start is None else start
    stop = log.log_end_offset if end is None else end
    while offset < stop:
        data = log.read(offset, chunk_bytes, max_offset=stop)
        if not data.records:
            return
        view = memoryview(data.records)
        pos = 0
        while pos < len(view):
            batch = RecordBatch(view, pos)
            yield batch
            pos += batch.header.size
        offset = data.next_offset
