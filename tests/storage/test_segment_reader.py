"""The read-only segment/index reader against the writer: what a reader in another process sees while the
partition log keeps appending, and proof that it never touches the files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker_runtime.errors import SegmentGoneError, StorageError
from broker_runtime.protocol.batch_header import iter_batch_spans
from broker_runtime.storage.offset_index import OffsetIndex
from broker_runtime.storage.segment import INDEX_SUFFIX, list_segment_bases, segment_path
from broker_runtime.storage.segment_reader import SegmentReader
from broker_runtime.storage.time_index import TimeIndex
from tests.support.storage import make_batch


def _disk_state(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    """name -> (size, mtime ns, bytes) of every file."""
    out = {}
    for path in sorted(directory.iterdir()):
        st = path.stat()
        out[path.name] = (st.st_size, st.st_mtime_ns, path.read_bytes())
    return out


def _offsets_via_reader(directory: Path, offset: int) -> tuple[int, int] | None:
    """(base offset, last offset) of the batch holding ``offset``, found through read-only readers only."""
    bases = list_segment_bases(directory)
    base = max(b for b in bases if b <= offset)
    reader = SegmentReader(directory, base)
    position = reader.start_position(offset)
    data = reader.pread(position, reader.size - position)
    for _, header in iter_batch_spans(data):
        if header.last_offset >= offset:
            return header.base_offset, header.last_offset
    return None


def test_reader_finds_every_offset_while_appends_continue_and_modifies_nothing(open_log) -> None:
    log = open_log(segment_bytes=6_000, index_interval_bytes=300, segment_index_bytes=8 * 100)
    for _ in range(75):
        log.append(make_batch(3, value_size=40))
    directory = log.dir
    assert len(log.segments) >= 3, "the test needs closed segments and an active one"
    active = log.active_segment
    assert active.offset_index.max_entries > active.offset_index.entries > 0, "active index is preallocated"

    before = _disk_state(directory)
    leo = log.log_end_offset
    for offset in range(leo):
        found = _offsets_via_reader(directory, offset)
        assert found is not None and found[0] <= offset <= found[1], offset
    # The active index read-only holds exactly the writer's entries (the zero tail is not trusted).
    read_only = OffsetIndex.open_read_only(active.offset_index.path, active.base_offset, active.size)
    writer = active.offset_index
    assert [read_only.entry(i) for i in range(read_only.entries)] == [
        writer.entry(i) for i in range(writer.entries)
    ]
    time_ro = TimeIndex.open_read_only(active.time_index.path, active.base_offset, active.size)
    assert [time_ro.entry(i) for i in range(time_ro.entries)] == [
        active.time_index.entry(i) for i in range(active.time_index.entries)
    ]
    del read_only, time_ro
    assert _disk_state(directory) == before, "a read-only reader changed a file"

    # A reader opened now keeps working while the writer appends, rolls and its size snapshot stays put.
    reader = SegmentReader(directory, active.base_offset)
    size_at_open = reader.size
    for _ in range(40):
        log.append(make_batch(3, value_size=40))
    assert reader.size == size_at_open
    assert len(reader.pread(0, 1 << 20)) >= size_at_open
    for offset in range(leo, log.log_end_offset):
        found = _offsets_via_reader(directory, offset)
        assert found is not None and found[0] <= offset <= found[1], offset


def test_untrusted_index_entries_are_ignored(open_log) -> None:
    log = open_log(index_interval_bytes=1, segment_index_bytes=8 * 64)
    for _ in range(10):
        log.append(make_batch(2))
    seg = log.active_segment
    entries = seg.offset_index.entries
    assert entries >= 5
    # Entries pointing at or past the .log size the reader saw are not trusted (written after it looked).
    cut = seg.offset_index.entry(3).position
    index = OffsetIndex.open_read_only(seg.offset_index.path, seg.base_offset, cut)
    assert index.entries == 3
    # A half-written entry (here: a position going backwards) ends the trusted prefix.
    raw = bytearray(seg.offset_index.path.read_bytes())
    raw[8 * 4 + 4 : 8 * 4 + 8] = (1).to_bytes(4, "big")
    broken = seg.dir / "broken.index"
    broken.write_bytes(raw)
    assert OffsetIndex.open_read_only(broken, seg.base_offset, seg.size).entries == 4


def test_read_only_objects_refuse_every_mutation(open_log) -> None:
    log = open_log(index_interval_bytes=1)
    for _ in range(4):
        log.append(make_batch(2))
    seg = log.active_segment
    before = _disk_state(log.dir)
    index = OffsetIndex.open_read_only(seg.offset_index.path, seg.base_offset, seg.size)
    for mutate in (
        lambda: index.append(100, 10_000),
        lambda: index.truncate_to(0),
        lambda: index.resize(0),
        index.trim,
        index.reset,
    ):
        with pytest.raises(StorageError, match="read-only"):
            mutate()
    index.flush()
    index.close()
    assert _disk_state(log.dir) == before


def test_a_deleted_segment_is_segment_gone_and_an_open_one_stays_readable(open_log) -> None:
    log = open_log(segment_bytes=2_000)
    for _ in range(30):
        log.append(make_batch(2, value_size=40))
    first = log.segments[0]
    reader = SegmentReader(log.dir, first.base_offset)
    expected = first.pread(0, first.size)
    log.truncate_fully_and_start_at(log.log_end_offset)  # deletes every segment file
    assert not segment_path(log.dir, first.base_offset, INDEX_SUFFIX).exists()
    assert reader.pread(0, reader.size) == expected  # the descriptor outlives the unlink
    with pytest.raises(SegmentGoneError, match="deleted"):
        SegmentReader(log.dir, first.base_offset)


def test_missing_index_means_start_at_zero(open_log) -> None:
    log = open_log(index_interval_bytes=1)
    for _ in range(4):
        log.append(make_batch(2))
    log.roll()
    seg = log.segments[0]
    os.unlink(seg.offset_index.path)
    assert SegmentReader(log.dir, seg.base_offset).start_position(5) == 0
