"""PartitionLog: offsets, LogAppendTime, rolls at each boundary, reads, timestamp lookups, truncation."""

from __future__ import annotations

import random

import pytest
from kafka.record.memory_records import MemoryRecords

from broker_runtime.errors import OffsetOutOfRangeError, StorageError
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from tests.support.storage import decode_all, make_batch


def read_everything(log, start=None, max_bytes=1 << 20):
    """Read the whole log with successive fetches; returns the concatenated bytes."""
    offset = log.log_start_offset if start is None else start
    chunks = []
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes)
        assert data.records, f"no progress at {offset}"
        chunks.append(data.records)
        offset = data.next_offset
    return b"".join(chunks)


def test_append_assigns_offsets_and_files_decode_with_kafka_python(open_log, tmp_path):
    log = open_log(segment_bytes=1500)
    counts = [1, 5, 3, 10, 2, 7, 4, 1, 8, 6] * 4
    expected = []
    offset = 0
    for i, count in enumerate(counts):
        info = log.append(make_batch(count, ts=10_000 + 100 * i), leader_epoch=7)
        assert (info.first_offset, info.last_offset) == (offset, offset + count - 1)
        assert info.log_append_time_ms == -1
        assert info.max_timestamp == 10_000 + 100 * i + count - 1
        assert info.num_batches == 1
        expected += [(offset, offset + k, 10_000 + 100 * i + k) for k in range(count)]
        offset += count
    assert log.log_end_offset == log.high_watermark == offset
    assert len(log.segments) > 2
    # Every .log file on disk decodes with kafka-python's reader, offsets continuing across segments.
    decoded = []
    for seg in log.segments:
        decoded += decode_all(seg.log_path.read_bytes())
    assert decoded == expected
    # The partition leader epoch (bytes 12..16, outside the CRC) was written into every batch.
    for seg in log.segments:
        data = seg.log_path.read_bytes()
        pos = 0
        while pos < len(data):
            assert int.from_bytes(data[pos + 12 : pos + 16], "big") == 7
            pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
    assert decode_all(read_everything(log)) == expected


def test_multiple_batches_in_one_append(open_log):
    log = open_log()
    data = make_batch(3) + make_batch(2, ts=5_000) + make_batch(4, ts=3_000)
    info = log.append(data)
    assert (info.first_offset, info.last_offset, info.num_batches, info.size_bytes) == (0, 8, 3, len(data))
    assert info.max_timestamp == 5_001 and info.offset_of_max_timestamp == 4
    assert [r[1] for r in decode_all(log.read(0, 1 << 20).records)] == list(range(9))
    with pytest.raises(StorageError, match="not a whole batch"):
        log.append(make_batch(2)[:-3])


def test_log_append_time_rewrites_timestamp_and_crc(open_log, clock):
    log = open_log(message_timestamp_type="LogAppendTime")
    info = log.append(make_batch(4, ts=5))
    assert info.log_append_time_ms == clock.now == info.max_timestamp
    records = MemoryRecords(log.read(0, 1 << 20).records)
    batch = records.next_batch()
    assert batch.validate_crc()
    assert batch.timestamp_type == 1 and batch.max_timestamp == clock.now
    assert [r.timestamp for r in batch] == [clock.now] * 4


def test_roll_on_segment_bytes(open_log):
    one = make_batch(5)
    log = open_log(segment_bytes=len(one) * 3)
    for _ in range(7):
        log.append(one)
    # 3 batches fit per segment exactly; the 4th would exceed.
    assert [s.base_offset for s in log.segments] == [0, 15, 30]
    assert [s.size for s in log.segments] == [3 * len(one), 3 * len(one), len(one)]
    with pytest.raises(StorageError, match="exceeds segment.bytes"):
        log.append(one * 4)


def test_roll_on_segment_ms_uses_first_batch_timestamp(open_log, clock):
    log = open_log(segment_ms=1000)
    log.append(make_batch(1, ts=10_000))
    log.append(make_batch(1, ts=11_000))  # 1000 after the first: not more than segment.ms
    assert len(log.segments) == 1
    log.append(make_batch(1, ts=11_001))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_on_segment_ms_without_timestamps_uses_creation_time(open_log, clock):
    log = open_log(segment_ms=1000)
    log.append(make_batch(1, timestamps=[-1]))
    clock.advance(1000)
    log.append(make_batch(1, timestamps=[-1]))
    assert len(log.segments) == 1
    clock.advance(1)
    log.append(make_batch(1, timestamps=[-1]))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_on_full_offset_index(open_log):
    # 3 offset-index entries (24 bytes); index.interval.bytes=0 -> an entry per append after the first.
    log = open_log(segment_index_bytes=24 + 0, index_interval_bytes=0)
    for _ in range(10):
        log.append(make_batch(2))
    # time index: 24 bytes = 2 slots, one reserved -> full after 1 entry; it decides first.
    sizes = [s.offset_index.entries for s in log.segments]
    assert all(n <= 3 for n in sizes)
    assert len(log.segments) > 1
    # Equal timestamps give one time entry, so the offset index (4 slots of 8 in 36 bytes) is the limit.
    log2 = open_log(name="t-1", segment_index_bytes=36, index_interval_bytes=0)
    for _ in range(12):
        log2.append(make_batch(1))
    assert [s.base_offset for s in log2.segments][:3] == [0, 5, 10]  # first append adds no entry
    assert all(s.offset_index.entries == 4 for s in log2.segments[:-1])


def test_roll_on_relative_offset_overflow(open_log):
    log = open_log()
    log.append_as_follower(make_batch(3, base_offset=0))
    far = 2**31 + 10
    info = log.append_as_follower(make_batch(2, base_offset=far))
    assert info.first_offset == far
    assert [s.base_offset for s in log.segments] == [0, far]
    assert log.log_end_offset == far + 2
    assert [r[1] for r in decode_all(log.read(far, 1 << 20).records)] == [far, far + 1]
    with pytest.raises(StorageError, match="below the expected offset"):
        log.append_as_follower(make_batch(1, base_offset=far))


def test_reads_across_segments_and_inside_batches(open_log):
    log = open_log(segment_bytes=2000, index_interval_bytes=100)
    rng = random.Random(5)
    batches = []
    for _ in range(60):
        n = rng.randint(1, 6)
        info = log.append(make_batch(n, value_size=rng.randint(1, 40)))
        batches.append((info.first_offset, info.last_offset))
    assert len(log.segments) >= 3
    for _ in range(150):
        start = rng.randrange(0, log.log_end_offset)
        budget = rng.randint(1, 1500)
        data = log.read(start, budget)
        containing = next(b for b in batches if b[0] <= start <= b[1])
        assert data.first_offset == containing[0]
        decoded = decode_all(data.records)
        assert decoded, "min_one_batch returns the first batch even over budget"
        assert decoded[0][1] == containing[0]
        assert len(data.records) <= max(budget, len(log.read(start, 0).records))
        offsets = [r[1] for r in decoded]
        assert offsets == list(range(containing[0], offsets[-1] + 1))
        assert data.next_offset == offsets[-1] + 1
        # Same segment only, whole batches only.
        path, a, b = data.file_range
        assert path.read_bytes()[a:b] == data.records
    # Without min_one_batch, a too-small budget returns nothing.
    assert log.read(0, 10, min_one_batch=False).records == b""
    # At the LEO: empty; outside the range: error.
    assert log.read(log.log_end_offset, 100).records == b""
    with pytest.raises(OffsetOutOfRangeError, match=r"outside \[0, "):
        log.read(log.log_end_offset + 1, 100)


def test_read_stops_at_max_offset(open_log):
    log = open_log()
    for _ in range(5):
        log.append(make_batch(4))
    data = log.read(0, 1 << 20, max_offset=12)
    assert [r[1] for r in decode_all(data.records)] == list(range(12))
    # A max offset inside a batch excludes that batch (as Kafka's high watermark does).
    data = log.read(0, 1 << 20, max_offset=10)
    assert [r[1] for r in decode_all(data.records)] == list(range(8))
    assert log.read(9, 1 << 20, max_offset=10).records == b""
    log.hw_follows_leo = False
    log.high_watermark = 8
    assert log.high_watermark == 8
    log.high_watermark = 10**9
    assert log.high_watermark == log.log_end_offset


def test_offset_for_timestamp_against_reference(open_log):
    log = open_log(segment_bytes=2500, index_interval_bytes=80)
    rng = random.Random(11)
    records = []  # (offset, timestamp)
    for _ in range(80):
        n = rng.randint(1, 5)
        stamps = [rng.randint(0, 5000) for _ in range(n)]
        info = log.append(make_batch(n, timestamps=stamps))
        records += [(info.first_offset + k, t) for k, t in enumerate(stamps)]
    assert len(log.segments) > 2
    for target in [0, 1, 17, 2500, 4999, 5000, 5001, *[rng.randint(0, 5001) for _ in range(60)]]:
        # Kafka's rule: segments in order, the first whose largest timestamp >= target; within it, the first
        # record with timestamp >= target.
        expected = None
        for seg in log.segments:
            seg_records = [r for r in records if seg.base_offset <= r[0] < seg.base_offset + 10**9]
            seg_records = [
                r
                for r in seg_records
                if r[0]
                < (
                    log.segments[log.segments.index(seg) + 1].base_offset
                    if seg is not log.segments[-1]
                    else 10**9
                )
            ]
            if max(t for _, t in seg_records) >= target:
                expected = next(r for r in seg_records if r[1] >= target)
                break
        assert log.offset_for_timestamp(target) == expected, target
    best = max(t for _, t in records)
    assert log.max_timestamp_offset() == next(r for r in records if r[1] == best)


def test_delete_records_before_and_truncate_to(open_log):
    log = open_log(segment_bytes=600)
    for _ in range(20):
        log.append(make_batch(3))
    n_segments = len(log.segments)
    assert log.delete_records_before(31) == 31
    assert log.log_start_offset == 31
    assert log.segments[0].base_offset <= 31 < log.segments[0].base_offset + 600
    assert len(log.segments) < n_segments
    with pytest.raises(OffsetOutOfRangeError):
        log.read(30, 100)
    assert decode_all(log.read(31, 1).records)[0][1] == 30  # whole batch holding 31
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        log.delete_records_before(61)
    log.truncate_to(45)
    assert log.log_end_offset == 45 == log.high_watermark
    assert decode_all(read_everything(log))[-1][1] == 44
    info = log.append(make_batch(2))
    assert info.first_offset == 45
    log.truncate_to(10)  # below the log start: start over at 10
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (10, 10, 1)
    assert log.append(make_batch(1)).first_offset == 10


def test_flush_messages_policy_moves_recovery_point(open_log):
    log = open_log(flush_messages=5)
    log.append(make_batch(3))
    assert log.recovery_point == 0
    log.append(make_batch(3))
    assert log.recovery_point == 6


def test_flush_ms_policy(open_log, clock):
    log = open_log(flush_ms=1000)
    log.append(make_batch(1))
    assert log.recovery_point == 0
    clock.advance(1000)
    assert log.flush_if_due()
    assert log.recovery_point == 1


def test_load_keeps_the_checkpointed_high_watermark_unless_it_follows_the_leo(open_log, tmp_path, clock):
    log = open_log()
    for _ in range(4):
        log.append(make_batch(5))  # offsets 0..19
    log.close()
    directory = tmp_path / "t-0"
    # A replicated partition restarted with HW 7 checkpointed: 7, not the LEO of 20.
    replicated = PartitionLog.load(
        directory, "t", 0, LogConfig(), clock, high_watermark=7, hw_follows_leo=False, needs_recovery=False
    )
    assert (replicated.log_end_offset, replicated.high_watermark, replicated.hw_follows_leo) == (20, 7, False)
    replicated.append(make_batch(1))  # appends do not move it either: replication does
    assert (replicated.log_end_offset, replicated.high_watermark) == (21, 7)
    replicated.close()
    # No checkpoint entry: Kafka starts such a partition at HW 0 (clamped to the log start).
    unknown = PartitionLog.load(
        directory, "t", 0, LogConfig(), clock, hw_follows_leo=False, needs_recovery=False
    )
    assert unknown.high_watermark == 0
    unknown.close()
    # A checkpoint beyond the log (data lost in a crash) is clamped to the LEO.
    beyond = PartitionLog.load(
        directory, "t", 0, LogConfig(), clock, high_watermark=500, hw_follows_leo=False, needs_recovery=False
    )
    assert beyond.high_watermark == 21
    beyond.close()
    # A single replica ignores the checkpoint: HW = LEO.
    single = PartitionLog.load(directory, "t", 0, LogConfig(), clock, high_watermark=7, needs_recovery=False)
    assert (single.high_watermark, single.hw_follows_leo) == (21, True)
    single.close()


def test_truncate_fully_and_start_at(open_log, tmp_path):
    log = open_log(segment_bytes=600, index_interval_bytes=64)
    for i in range(20):
        log.append(make_batch(3, ts=1_000 + i))  # offsets 0..59 over several segments
    log.hw_follows_leo = False
    log.high_watermark = 40
    assert len(log.segments) > 2
    directory = tmp_path / "t-0"

    log.truncate_fully_and_start_at(1000)

    files = sorted(p.name for p in directory.iterdir() if p.suffix in (".log", ".index", ".timeindex"))
    assert files == [
        "00000000000000001000.index",
        "00000000000000001000.log",
        "00000000000000001000.timeindex",
    ]
    assert (directory / "00000000000000001000.log").stat().st_size == 0
    assert not [p for p in directory.iterdir() if p.name.endswith(".deleted")]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.recovery_point) == (
        1000,
        1000,
        1000,
        1000,
    )
    assert [s.base_offset for s in log.segments] == [1000]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(999, 100)
    assert log.read(1000, 100).records == b""

    # Appends continue at the new base, in the new segment file, readable by kafka-python.
    assert log.append(make_batch(2)).first_offset == 1000
    assert log.append(make_batch(3)).first_offset == 1002
    on_disk = decode_all((directory / "00000000000000001000.log").read_bytes())
    assert [r[1] for r in on_disk] == list(range(1000, 1005))
    assert decode_all(read_everything(log)) == on_disk
    log.close()

    # The new layout survives a restart with recovery (no checkpoints at all: the files say it all).
    reopened = PartitionLog.load(directory, "t", 0, LogConfig(segment_bytes=600), needs_recovery=True)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1005)
    reopened.close()


def test_truncate_fully_and_start_at_may_go_below_the_log_start(open_log):
    log = open_log()
    log.append(make_batch(5))
    log.truncate_fully_and_start_at(50)
    log.truncate_fully_and_start_at(8)  # follows a leader whose log restarted lower
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (8, 8, 8)
    assert log.append(make_batch(1)).first_offset == 8
    with pytest.raises(StorageError, match="negative"):
        log.truncate_fully_and_start_at(-1)
