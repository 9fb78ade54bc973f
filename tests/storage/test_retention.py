"""Retention by time, by size and by log start offset, with the injected clock."""

from __future__ import annotations

from broker_runtime.storage.retention import run_retention
from tests.support.storage import make_batch


def fill(log, count, ts_of):
    one = None
    for i in range(count):
        one = make_batch(2, timestamps=[ts_of(i)] * 2)
        log.append(one)
    return len(one)


def test_retention_by_time(open_log, clock):
    log = open_log(segment_bytes=400, retention_ms=10_000)
    now = clock.now
    # Batch i has timestamp now - 60_000 + 1000 * i.
    fill(log, 60, lambda i: now - 60_000 + 1000 * i)
    segs = log.segments
    assert len(segs) > 5
    # Reference: a segment goes when now - its largest timestamp > retention.ms, oldest first, stopping at the
    # first that stays; the active segment (non-empty) goes too only if everything goes.
    expect_deleted = 0
    for seg in segs:
        if now - seg.max_timestamp_so_far > 10_000:
            expect_deleted += 1
        else:
            break
    assert 0 < expect_deleted < len(segs)
    first_kept = segs[expect_deleted].base_offset
    assert run_retention(log) == expect_deleted
    assert log.segments[0].base_offset == first_kept == log.log_start_offset
    for seg in segs[:expect_deleted]:
        assert not seg.log_path.exists()
    # Later, everything is old: all segments go, the log rolls so an empty active segment remains.
    clock.advance(1_000_000)
    end = log.log_end_offset
    run_retention(log)
    assert [s.base_offset for s in log.segments] == [end]
    assert log.log_start_offset == end == log.log_end_offset
    assert log.append(make_batch(1)).first_offset == end


def test_retention_by_size(open_log, clock):
    log = open_log(segment_bytes=500, retention_bytes=1200, retention_ms=-1)
    fill(log, 40, lambda i: clock.now)
    sizes = [s.size for s in log.segments]
    total = sum(sizes)
    # Reference: drop oldest while (total - its size) >= retention.bytes.
    excess, expect = total - 1200, 0
    for size in sizes:
        if excess - size >= 0:
            excess -= size
            expect += 1
        else:
            break
    assert run_retention(log) == expect
    assert log.size_bytes == total - sum(sizes[:expect])
    assert log.size_bytes >= 1200


def test_retention_never_passes_the_high_watermark(open_log, clock):
    log = open_log(segment_bytes=300, retention_ms=1)
    log.hw_follows_leo = False
    fill(log, 20, lambda i: 0)
    log.high_watermark = 0
    clock.advance(10)
    assert run_retention(log) == 0
    second = log.segments[1].base_offset
    log.high_watermark = second
    assert run_retention(log) == 1
    assert log.log_start_offset == second


def test_log_start_offset_breach_deletes_segments(open_log):
    log = open_log(segment_bytes=300, retention_ms=-1)
    fill(log, 20, lambda i: 0)
    bases = [s.base_offset for s in log.segments]
    log.delete_records_before(bases[3] + 1)
    assert [s.base_offset for s in log.segments][0] == bases[3]


def test_a_compact_only_log_is_not_deleted_by_time_or_size(open_log, clock):
    # Kafka's UnifiedLog.deleteOldSegments: retention.ms / retention.bytes apply only under cleanup.policy=delete.
    log = open_log(segment_bytes=400, retention_ms=1, retention_bytes=0, cleanup_policy="compact")
    fill(log, 30, lambda i: clock.now - 60_000)
    segs = [s.base_offset for s in log.segments]
    size, end = log.size_bytes, log.log_end_offset
    assert len(segs) > 3
    clock.advance(1_000_000)
    assert run_retention(log) == 0
    assert [s.base_offset for s in log.segments] == segs
    assert (log.log_start_offset, log.size_bytes, log.log_end_offset) == (0, size, end)
    # The log start offset still removes the segments wholly below it (DeleteRecords, as Kafka).
    log.delete_records_before(segs[2])
    run_retention(log)
    assert log.segments[0].base_offset == segs[2]


def test_compact_and_delete_keeps_time_and_size_retention(open_log, clock):
    log = open_log(segment_bytes=400, retention_ms=10_000, cleanup_policy="compact,delete")
    fill(log, 30, lambda i: clock.now - 60_000)
    clock.advance(1_000)
    end = log.log_end_offset
    assert run_retention(log) > 0
    assert log.log_start_offset == end
