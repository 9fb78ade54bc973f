"""read_committed on the reader side: drop the batches of aborted transactions and every control batch.

Runs on: executors (task).

Where this runs: the **executors**, inside :func:`spark_kafka_log.read.read_task.read_range`, on the raw bytes of whole
record batches before they are decoded (both transports: a Fetch answer, or a chunk of the direct segment scan).

The rule is the Kafka consumer's (``CompletedFetch`` in read_committed), applied per batch, never per record: a
batch is transactional as a whole (attributes bit 4) and carries one producer id. The input is the list of
aborted transactions ``(producer id, first offset)`` overlapping the range (Fetch's ``AbortedTransactions``, or
the ``.txnindex`` entries the direct scan collects), and the batches in offset order:

* before a batch with a producer id is looked at, every aborted transaction whose first offset is <= the batch's
  last offset makes its producer id "aborted";
* a control batch (attributes bit 5) holding an ABORT marker clears its producer id (what follows from that
  producer belongs to a later transaction); control batches are never returned;
* a transactional data batch whose producer id is aborted is dropped; everything else is kept.

The state (aborted producer ids, the transactions not yet reached) lives in one :class:`ReadCommittedFilter`,
so it must see the batches of one sequence in order: one filter per Fetch answer (Kafka's unit: the aborted list
belongs to the answer), one per direct scan of a range. The kept batches are returned as they are (the same
buffer when nothing was dropped, else the kept byte runs joined), so the decoder and the CRC check see the
original bytes.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from broker_runtime.protocol.batch_header import iter_batch_spans
from broker_runtime.protocol.records import CONTROL_ABORT, RecordBatch

__all__ = ["ReadCommittedFilter"]


class ReadCommittedFilter:
    """The Kafka consumer's read_committed filter over one ordered sequence of record batches."""

    __slots__ = ("_aborted_pids", "_pending", "batches_dropped")

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        """``aborted``: ``(producer id, first offset)`` of the aborted transactions overlapping the range."""
        self._pending: list[tuple[int, int]] = [(first, pid) for pid, first in aborted]
        heapq.heapify(self._pending)
        self._aborted_pids: set[int] = set()
        #: Data batches of aborted transactions dropped so far (control batches not counted).
        self.batches_dropped = 0

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            self._aborted_pids.add(heapq.heappop(pending)[1])

    def keep(self, data: bytes | memoryview) -> bytes | memoryview:
        """The whole batches of ``data`` a read_committed consumer returns records of, in order."""
        mv = memoryview(data)
        runs: list[tuple[int, int]] = []  # [begin, end) byte runs of kept batches, contiguous ones merged
        dropped = False
        for position, header in iter_batch_spans(mv):
            end = position + header.size
            if header.producer_id >= 0:
                self._consume_up_to(header.last_offset)
                if header.is_control:
                    marker_type, _ = RecordBatch(mv[position:end]).control_record()
                    if marker_type == CONTROL_ABORT:
                        self._aborted_pids.discard(header.producer_id)
                    dropped = True
                    continue
                if header.is_transactional and header.producer_id in self._aborted_pids:
                    self.batches_dropped += 1
                    dropped = True
                    continue
            elif header.is_control:  # a control batch without a producer id: never returned either
                dropped = True
                continue
            if runs and runs[-1][1] == position:
                runs[-1] = (runs[-1][0], end)
            else:
                runs.append((position, end))
        if not dropped:
            return data
        if len(runs) == 1:
            return mv[runs[0][0] : runs[0][1]]
        return b"".join(mv[b:e] for b, e in runs)
