"""Offset and time indexes against naive reference models, and index bytes against the spec's rule."""

from __future__ import annotations

import gc
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_runtime.errors import CorruptIndexError, StorageError
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.offset_index import OffsetIndex
from broker_runtime.storage.segment import LogSegment
from broker_runtime.storage.time_index import TimeIndex
from tests.support.storage import make_batch

BASE = 1000


@st.composite
def offset_entries(draw):
    n = draw(st.integers(0, 60))
    rels = sorted(draw(st.sets(st.integers(0, 10_000), min_size=n, max_size=n)))
    positions = sorted(draw(st.sets(st.integers(0, 1 << 20), min_size=n, max_size=n)))
    return [(BASE + r, p) for r, p in zip(rels, positions, strict=True)]


@settings(max_examples=40, deadline=None)
@given(entries=offset_entries(), targets=st.lists(st.integers(BASE - 5, BASE + 10_010), max_size=30))
def test_offset_index_matches_reference_model(tmp_path_factory, entries, targets):
    path = tmp_path_factory.mktemp("oi") / "00000000000000001000.index"
    index = OffsetIndex(path, BASE, 8 * 100)
    for offset, position in entries:
        index.append(offset, position)
    for target in targets:
        below = [e for e in entries if e[0] <= target]
        expected = below[-1] if below else (BASE, 0)
        assert tuple(index.lookup(target)) == expected
        by_pos = [e for e in entries if e[1] <= target - BASE]
        got = index.lookup_by_position(target - BASE)
        assert (tuple(got) if got else None) == (by_pos[-1] if by_pos else None)
    # Trim, reopen: same entries, file exactly entries * 8 bytes.
    index.close()
    assert path.stat().st_size == 8 * len(entries)
    reopened = OffsetIndex(path, BASE, 8 * 100)
    assert [tuple(reopened.entry(i)) for i in range(reopened.entries)] == entries
    if targets:
        cut = targets[0]
        reopened.truncate_to(cut)
        assert [tuple(reopened.entry(i)) for i in range(reopened.entries)] == [
            e for e in entries if e[0] < cut
        ]


@settings(max_examples=40, deadline=None)
@given(
    stamps=st.lists(st.integers(-1, 500), max_size=60),
    targets=st.lists(st.integers(-5, 520), max_size=30),
)
def test_time_index_matches_reference_model(tmp_path_factory, stamps, targets):
    path = tmp_path_factory.mktemp("ti") / "00000000000000001000.timeindex"
    index = TimeIndex(path, BASE, 12 * 200)
    model: list[tuple[int, int]] = []
    running = -1
    for i, ts in enumerate(stamps):
        running = max(running, ts)  # callers pass the max timestamp so far
        offset = BASE + i
        written = index.maybe_append(running, offset)
        if running > (model[-1][0] if model else -1):
            model.append((running, offset))
            assert written
        else:
            assert not written
    assert [tuple(index.entry(i)) for i in range(index.entries)] == model
    for target in targets:
        below = [e for e in model if e[0] <= target]
        assert tuple(index.lookup(target)) == (below[-1] if below else (-1, BASE))


@pytest.mark.parametrize("kind", ["offset", "time"])
def test_truncate_to_drops_the_entries_at_and_above_the_offset(tmp_path, kind):
    """Both indexes truncate through ``IndexFile.truncate_to``: an entry exactly at the offset goes, one below it
    stays (at, between, below and above the entries)."""
    offsets = [BASE, BASE + 10, BASE + 20, BASE + 30]
    for cut in (BASE - 1, BASE, BASE + 10, BASE + 15, BASE + 30, BASE + 99):
        if kind == "offset":
            index = OffsetIndex(tmp_path / f"{cut}.index", BASE, 8 * 10)
            for i, offset in enumerate(offsets):
                index.append(offset, 100 * i)
            kept = [index.entry(i).offset for i in range(index.entries)]
        else:
            index = TimeIndex(tmp_path / f"{cut}.timeindex", BASE, 12 * 10)
            for i, offset in enumerate(offsets):
                index.maybe_append(5000 + i, offset)
            kept = [index.entry(i).offset for i in range(index.entries)]
        assert kept == offsets
        index.truncate_to(cut)
        assert [index.entry(i).offset for i in range(index.entries)] == [o for o in offsets if o < cut], cut


def test_offset_index_rejects_non_increasing_offset_and_names_state(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000123.index", 123, 80)
    index.append(143, 100)
    with pytest.raises(
        CorruptIndexError, match=r"offset 140 is not larger than the last offset 143 in .*123\.index"
    ):
        index.append(140, 200)
    with pytest.raises(CorruptIndexError, match="does not fit a relative offset"):
        index.append(123 + 2**31, 300)


def test_index_preallocation_full_and_trim(tmp_path):
    # 100 bytes -> rounded down to 96 (12 entries of 8; 8 entries of 12).
    oi = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 100)
    ti = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0, 100)
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 96
    assert (tmp_path / "00000000000000000000.timeindex").stat().st_size == 96
    for i in range(12):
        assert not oi.is_full
        oi.append(i + 1, i * 10)
    assert oi.is_full
    with pytest.raises(StorageError, match="full index"):
        oi.append(100, 1000)
    for i in range(7):  # the time index keeps its last slot for the roll entry
        assert not ti.is_full
        ti.maybe_append(10 + i, i)
    assert ti.is_full
    assert ti.maybe_append(99, 50, skip_full_check=True)
    assert ti.entries == 8
    oi.trim()
    ti.trim()
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 96
    assert (tmp_path / "00000000000000000000.timeindex").stat().st_size == 96


def test_untrimmed_zero_index_fails_sanity_check(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"\0" * 800)
    with pytest.raises(CorruptIndexError, match="not after the first"):
        OffsetIndex(path, 0, 800).sanity_check(log_size=10_000)
    tpath = tmp_path / "00000000000000000000.timeindex"
    tpath.write_bytes(b"\0" * 120)
    with pytest.raises(CorruptIndexError):
        TimeIndex(tpath, 0, 120).sanity_check()


def expected_index_entries(sets, interval):
    """Kafka's LogSegment.append rule, written out independently: sets = [(size, last_offset, max_ts, off_of_max)]."""
    offset_entries, time_entries = [], []
    since = 0
    position = 0
    max_ts, max_off = -1, None
    for size, last_offset, ts, ts_offset in sets:
        if ts > max_ts:
            max_ts, max_off = ts, ts_offset
        if since > interval:
            offset_entries.append((last_offset, position))
            if not time_entries or max_ts > time_entries[-1][0]:
                time_entries.append((max_ts, max_off))
            since = 0
        since += size
        position += size
    return offset_entries, time_entries, (max_ts, max_off)


def test_index_file_bytes_follow_the_rule(open_log):
    interval = 150
    log = open_log(index_interval_bytes=interval)
    # Timestamps go up and down so maxTimestampSoFar matters.
    plan = [
        (3, 500),
        (1, 700),
        (4, 600),
        (2, 900),
        (5, 100),
        (1, 1000),
        (2, 950),
        (3, 1200),
        (1, 1100),
        (2, 1300),
    ]
    sets = []
    offset = 0
    for count, ts in plan:
        data = make_batch(count, timestamps=[ts - count + 1 + i for i in range(count)])
        info = log.append(data)
        assert info.first_offset == offset
        offset += count
        sets.append((len(data), offset - 1, ts, offset - 1))
    seg = log.active_segment
    log.close()
    offsets, times, final = expected_index_entries(sets, interval)
    assert offsets, "the plan must create index entries"
    times_with_final = times + ([final] if not times or final[0] > times[-1][0] else [])
    want_index = b"".join(struct.pack(">ii", o - 0, p) for o, p in offsets)
    want_time = b"".join(struct.pack(">qi", t, o - 0) for t, o in times_with_final)
    assert seg.offset_index.path.read_bytes() == want_index
    assert seg.time_index.path.read_bytes() == want_time


@pytest.mark.parametrize("kind", ["offset index", "time index", "segment"])
def test_files_vanished_before_first_use_raise_once_and_leave_no_broken_finalizer(tmp_path, kind):
    """Files opened lazily whose directory vanished (a failed disk): an OSError for the caller, and no error
    in a finalizer later."""
    config = LogConfig(index_interval_bytes=1)
    seg = LogSegment.create(tmp_path, 0, config, 0)
    seg.append(bytearray(make_batch(2)), 1, 1_001, 1)
    seg.append(bytearray(make_batch(2, ts=2_000, base_offset=2)), 3, 2_001, 3)  # indexed: both hold entries
    seg.close()
    reopened = LogSegment.open(tmp_path, 0, config, 0)  # nothing opened yet
    assert reopened.offset_index.entries == reopened.time_index.entries == 1
    for path in tmp_path.iterdir():
        path.unlink()
    seen: list[object] = []
    previous = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        with pytest.raises(FileNotFoundError):
            if kind == "segment":
                reopened.pread(0, 10)
            elif kind == "offset index":
                reopened.offset_index.resize(80)
            else:
                reopened.time_index.resize(120)
        del reopened
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert seen == []
