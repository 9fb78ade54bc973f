"""The reader's direct segment scan (spark_kafka_log.read.local_scan) against logs written by the broker's storage.

No Spark here: these pin the scanner's contract -- whole batches covering [start, end), found through the
offset index, across segment boundaries, on an active segment whose index is preallocated and untrimmed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from broker_runtime.protocol.record_codec.decode import decode_batches
from broker_runtime.protocol.record_codec.encode import build_batches
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from broker_runtime.storage.retention import run_retention
from spark_kafka_log.read.local_scan import LocalPartitionScanner, SegmentGoneError, find_partition_dir

pytestmark = pytest.mark.timeout(60)


def _write_log(
    root: Path, n: int, *, segment_bytes: int, per_batch: int = 50, codec: int = 0
) -> PartitionLog:
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=512, segment_index_bytes=4096 * 8)
    log = PartitionLog.load(root / "events-0", "events", 0, config)
    values = pa.array([f"value-{i:06d}".encode() * 3 for i in range(n)], pa.binary())
    keys = pa.array([f"k{i}".encode() if i % 7 else None for i in range(n)], pa.binary())
    ts = np.arange(n, dtype=np.int64) + 1_700_000_000_000
    for s in range(0, n, per_batch):
        built = build_batches(
            values[s : s + per_batch],
            keys[s : s + per_batch],
            timestamps=ts[s : s + per_batch],
            compression=codec,
        )
        for b in built:
            log.append(b.data)
    return log


def _scan_offsets(scanner: LocalPartitionScanner, start: int, end: int) -> list[int]:
    out: list[int] = []
    frm = start
    for chunk in scanner.chunks(start, end):
        out.extend(decode_batches(chunk.data, start_offset=frm, end_offset=end).column("offset").to_pylist())
        frm = chunk.next_offset
    return out


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_scan_covers_exact_ranges_across_segments(tmp_path: Path, codec: int) -> None:
    log = _write_log(tmp_path, 3000, segment_bytes=4 * 1024, codec=codec)
    try:
        pdir = find_partition_dir([str(tmp_path / "missing"), str(tmp_path)], "events", 0)
        assert pdir == str(tmp_path / "events-0")
        scanner = LocalPartitionScanner(pdir, chunk_bytes=4096)
        assert len(scanner.segment_bases()) >= 3, "the test needs several segments"
        bases = scanner.segment_bases()
        for start, end in [
            (0, 3000),
            (0, 1),
            (1234, 1300),
            (bases[1] - 1, bases[2] + 1),
            (2999, 3000),
            (5, 5),
        ]:
            assert _scan_offsets(scanner, start, end) == list(range(start, end)), (start, end)
    finally:
        log.close()


def test_index_position_is_used_on_the_active_untrimmed_index(tmp_path: Path) -> None:
    log = _write_log(tmp_path, 2000, segment_bytes=1 << 30)  # one active segment
    try:
        scanner = LocalPartitionScanner(str(tmp_path / "events-0"))
        (base,) = scanner.segment_bases()
        index = tmp_path / "events-0" / f"{base:020d}.index"
        log_size = os.path.getsize(tmp_path / "events-0" / f"{base:020d}.log")
        assert os.path.getsize(index) > 64, "the active index should be preallocated"
        pos = scanner.start_position(base, 1500, log_size)
        assert 0 < pos < log_size
        # Whatever follows the valid entries (zeros) is ignored, never trusted.
        assert scanner.start_position(base, 10**9, log_size) < log_size
        assert _scan_offsets(scanner, 1500, 1510) == list(range(1500, 1510))
        # The first chunk starts at most one index interval (plus one batch) before the offset.
        first = next(iter(scanner.chunks(1500, 1510)))
        assert len(first.data) < 8 * 1024 and first.batches <= 3
    finally:
        log.close()


def test_scan_stops_at_the_end_of_the_files(tmp_path: Path) -> None:
    log = _write_log(tmp_path, 300, segment_bytes=1 << 30)
    try:
        scanner = LocalPartitionScanner(str(tmp_path / "events-0"))
        assert _scan_offsets(scanner, 250, 10_000) == list(range(250, 300))
    finally:
        log.close()


def test_deleted_segments_are_reported(tmp_path: Path) -> None:
    log = _write_log(tmp_path, 3000, segment_bytes=16 * 1024)
    try:
        assert log.delete_records_before(2000) > 0
        run_retention(log)
        scanner = LocalPartitionScanner(str(tmp_path / "events-0"))
        assert scanner.segment_bases()[0] > 0
        with pytest.raises(SegmentGoneError, match="before the first segment"):
            list(scanner.chunks(0, 10))
    finally:
        log.close()


def test_a_partial_batch_at_the_end_of_the_log_is_not_returned(tmp_path: Path) -> None:
    log = _write_log(tmp_path, 300, segment_bytes=1 << 30)
    try:
        (base,) = LocalPartitionScanner(str(tmp_path / "events-0")).segment_bases()
        whole = log.read(250, 1 << 20).records
        with open(tmp_path / "events-0" / f"{base:020d}.log", "ab") as f:
            f.write(whole[: len(whole) // 2])  # what a reader sees while the broker is mid-append
        scanner = LocalPartitionScanner(str(tmp_path / "events-0"), chunk_bytes=4096)
        assert _scan_offsets(scanner, 0, 10_000) == list(range(300))
    finally:
        log.close_without_flush()


def test_scans_while_the_broker_appends_and_rolls(tmp_path: Path) -> None:
    log = _write_log(tmp_path, 500, segment_bytes=8 * 1024)
    errors: list[BaseException] = []

    def keep_appending() -> None:
        try:
            values = pa.array([b"x" * 40] * 25, pa.binary())
            ts = np.arange(25, dtype=np.int64) + 1_700_000_000_000
            for _ in range(300):
                for b in build_batches(values, None, timestamps=ts):
                    log.append(b.data)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    writer = threading.Thread(target=keep_appending)
    writer.start()
    scans = 0
    try:
        scanner = LocalPartitionScanner(str(tmp_path / "events-0"), chunk_bytes=2048)
        while writer.is_alive() or scans == 0:
            leo = log.log_end_offset
            start = max(0, leo - 2000)
            assert _scan_offsets(scanner, start, leo) == list(range(start, leo))
            scans += 1
    finally:
        writer.join()
        log.close()
    assert not errors
    assert scans > 1 and len(scanner.segment_bases()) > 3


@pytest.mark.parametrize("chunk_bytes", [1, 700, 2000, 4096])
def test_chunks_hold_whole_batches_whatever_the_chunk_size(tmp_path: Path, chunk_bytes: int) -> None:
    """Batches cut by a chunk's end are read again with the next chunk; one larger than a chunk is read whole."""
    log = _write_log(tmp_path, 1000, segment_bytes=1 << 30)
    try:
        whole = log.read(0, 1 << 30).records
        scanner = LocalPartitionScanner(str(tmp_path / "events-0"), chunk_bytes=chunk_bytes)
        chunks = list(scanner.chunks(0, 1000))
        assert b"".join(bytes(c.data) for c in chunks) == bytes(whole)  # no batch lost, repeated or cut
        assert sum(c.batches for c in chunks) == 20  # 50 records a batch
        if chunk_bytes < 1500:  # smaller than one batch: each chunk is exactly one batch
            assert all(c.batches == 1 for c in chunks)
        assert _scan_offsets(scanner, 333, 777) == list(range(333, 777))
    finally:
        log.close()
