"""read_batches: every batch of a log, over several segments and read chunks, in order, control batches
included, bounded by the log end offset when the call began."""

from __future__ import annotations

from broker_runtime.protocol.records import CONTROL_COMMIT, build_control_batch
from broker_runtime.storage.log_batches import read_batches
from tests.support.storage import make_batch


def test_every_batch_over_segments_and_chunks_in_order(open_log) -> None:
    log = open_log(segment_bytes=600)
    counts = [3, 1, 5, 2, 4, 1, 3]
    for count in counts:
        log.append(make_batch(count, value_size=30))
    log.append(build_control_batch(CONTROL_COMMIT, 0, producer_id=7, producer_epoch=0, timestamp=1_000))
    assert len(log.segments) > 2, "the test needs several segments"
    for chunk in (1, 200, 1 << 20):  # one batch per read (min one batch), a few, everything
        batches = list(read_batches(log, chunk_bytes=chunk))
        assert [b.header.records_count for b in batches] == [*counts, 1]
        assert [b.header.base_offset for b in batches] == [sum(counts[:i]) for i in range(len(counts) + 1)]
        assert batches[-1].header.is_control and not batches[0].header.is_control


def test_bounds_start_and_end_and_the_log_end_when_called(open_log) -> None:
    log = open_log()
    for _ in range(4):
        log.append(make_batch(2))
    assert [b.header.base_offset for b in read_batches(log, start=2, end=6)] == [2, 4]
    batches = read_batches(log)
    first = next(batches)
    log.append(make_batch(2))  # appended after the call began: not part of this replay
    assert [first.header.base_offset] + [b.header.base_offset for b in batches] == [0, 2, 4, 6]
