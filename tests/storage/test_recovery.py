"""Crash recovery: damaged tails, corrupt or missing indexes, interrupted rolls."""

from __future__ import annotations

import os

from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from tests.support.storage import decode_all, make_batch

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=100)


def build(tmp_path, clock, batches=40):
    """A log of ``batches`` 3-record batches across several segments; left open (as after a crash)."""
    log = PartitionLog.load(tmp_path / "t-0", "t", 0, CONFIG, clock, needs_recovery=False)
    spans = []  # (first offset, last offset, segment base, position, size)
    for i in range(batches):
        data = make_batch(3, ts=1000 + 10 * i, value_size=20)
        seg_before = log.active_segment
        pos_guess = seg_before.size
        info = log.append(data)
        seg = log.active_segment
        pos = pos_guess if seg is seg_before else 0
        spans.append((info.first_offset, info.last_offset, seg.base_offset, pos, len(data)))
    assert len(log.segments) >= 4
    return log, spans


def reload(tmp_path, clock, recovery_point=0, needs_recovery=True):
    return PartitionLog.load(
        tmp_path / "t-0", "t", 0, CONFIG, clock, recovery_point=recovery_point, needs_recovery=needs_recovery
    )


def all_records(log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        out += decode_all(data.records)
        offset = data.next_offset
    return [r[1] for r in out]


def seg_file(tmp_path, base, suffix):
    return tmp_path / "t-0" / f"{base:020d}{suffix}"


def test_tail_cut_mid_batch(tmp_path, clock):
    log, spans = build(tmp_path, clock)
    first, last, base, pos, size = spans[-1]
    os.truncate(seg_file(tmp_path, base, ".log"), pos + size // 2)
    rec = reload(tmp_path, clock)
    assert rec.log_end_offset == first
    assert all_records(rec) == list(range(first))
    assert seg_file(tmp_path, base, ".log").stat().st_size == pos
    assert rec.append(make_batch(2)).first_offset == first


def test_garbage_appended(tmp_path, clock):
    log, spans = build(tmp_path, clock)
    end = spans[-1][1] + 1
    with open(seg_file(tmp_path, spans[-1][2], ".log"), "ab") as f:
        f.write(os.urandom(300))
    rec = reload(tmp_path, clock)
    assert rec.log_end_offset == end
    assert all_records(rec) == list(range(end))


def test_bit_flip_in_middle_batch_truncates_and_drops_later_segments(tmp_path, clock):
    log, spans = build(tmp_path, clock)
    bases = sorted({s[2] for s in spans})
    victim = next(s for s in spans if s[2] == bases[1] and s[3] > 0)  # inside the 2nd segment, not its first
    first, _, base, pos, size = victim
    path = seg_file(tmp_path, base, ".log")
    data = bytearray(path.read_bytes())
    data[pos + size - 5] ^= 0x10  # a record byte: covered by the CRC
    path.write_bytes(bytes(data))
    rec = reload(tmp_path, clock)
    assert rec.log_end_offset == first
    assert all_records(rec) == list(range(first))
    assert [s.base_offset for s in rec.segments] == bases[:2]
    for later in bases[2:]:
        assert not seg_file(tmp_path, later, ".log").exists()
        assert not seg_file(tmp_path, later, ".index").exists()


def test_zero_filled_and_deleted_indexes_are_rebuilt(tmp_path, clock):
    log, spans = build(tmp_path, clock)
    end = log.log_end_offset
    log.close()
    bases = sorted({s[2] for s in spans})
    original = {b: seg_file(tmp_path, b, ".index").read_bytes() for b in bases}
    original_time = {b: seg_file(tmp_path, b, ".timeindex").read_bytes() for b in bases}
    assert len(original[bases[0]]) >= 16
    seg_file(tmp_path, bases[0], ".index").write_bytes(b"\0" * len(original[bases[0]]))
    seg_file(tmp_path, bases[1], ".index").unlink()
    seg_file(tmp_path, bases[1], ".timeindex").unlink()
    # A clean load (no recovery) still spots and rebuilds them.
    rec = reload(tmp_path, clock, recovery_point=end, needs_recovery=False)
    assert rec.log_end_offset == end
    assert all_records(rec) == list(range(end))
    rec.close()
    # One batch per append: the per-batch rebuild gives the same entries as the appends did.
    for b in bases:
        assert seg_file(tmp_path, b, ".index").read_bytes() == original[b]
        assert seg_file(tmp_path, b, ".timeindex").read_bytes() == original_time[b]


def test_unclean_stop_untrimmed_active_index(tmp_path, clock):
    log, spans = build(tmp_path, clock)
    end = log.log_end_offset
    active = log.active_segment.base_offset
    # Preallocated and untrimmed: looks full of zero entries.
    assert seg_file(tmp_path, active, ".index").stat().st_size == CONFIG.segment_index_bytes // 8 * 8
    rec = reload(tmp_path, clock, recovery_point=active)
    assert rec.log_end_offset == end
    assert all_records(rec) == list(range(end))
    assert rec.active_segment.offset_index.entries < 50
    for first, last, _base, _pos, _size in spans[::5]:
        data = rec.read(last, 1)
        assert decode_all(data.records)[0][1] == first


def test_crash_between_roll_steps(tmp_path, clock):
    log, spans = build(tmp_path, clock)
    end = log.log_end_offset
    # The new segment's files exist but it holds nothing; its index is preallocated zeros.
    seg_file(tmp_path, end, ".log").write_bytes(b"")
    seg_file(tmp_path, end, ".index").write_bytes(b"\0" * 800)
    rec = reload(tmp_path, clock)
    assert rec.log_end_offset == end
    assert rec.segments[-1].base_offset == end
    assert rec.append(make_batch(1)).first_offset == end
    assert all_records(rec) == list(range(end + 1))
    # Orphaned index files (no .log) are dropped.
    seg_file(tmp_path, 10**6, ".index").write_bytes(b"\0" * 8)
    rec.close()
    reload(tmp_path, clock).close()
    assert not seg_file(tmp_path, 10**6, ".index").exists()


def test_recovery_starts_at_the_recovery_point(tmp_path, clock):
    log, spans = build(tmp_path, clock)
    bases = sorted({s[2] for s in spans})
    # Damage a segment below the recovery point: it is trusted, not rescanned (cost follows unflushed data).
    first, _, base, pos, size = next(s for s in spans if s[2] == bases[0] and s[3] > 0)
    path = seg_file(tmp_path, base, ".log")
    data = bytearray(path.read_bytes())
    data[pos + size - 5] ^= 0x01
    path.write_bytes(bytes(data))
    rec = reload(tmp_path, clock, recovery_point=bases[2])
    assert rec.log_end_offset == log.log_end_offset
    rec.close()
    # With recovery point 0 the same damage is found.
    rec = reload(tmp_path, clock, recovery_point=0)
    assert rec.log_end_offset == first
