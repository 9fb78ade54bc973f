"""Benchmark section "compaction": log-cleaner throughput and what a compacted topic keeps.

Figures: a partition of N records over K keys (100-byte values, 1 MiB segments, batches of 100 records) is
cleaned once from scratch (``clean_log`` with the ratio forced), each round on a fresh copy of the same files:
  * cleaning throughput in MB/s of the cleaned section read (offset map + rewrite + swaps);
  * bytes the compacted log keeps below its active segment vs the live key set's bytes (K records): the ratio
    shows what batch headers (and emptied batches kept for producer state) cost over the records themselves;
  * segments below the active one before and after the pass (grouping merges the ones cleaning empties).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from broker_runtime.protocol.records import RecordBatchBuilder
from broker_runtime.storage.cleaner import clean_log
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from jobs.bench.common import Result, Timing

__all__ = ["run"]

SECTION = "compaction"
_MIB = 1024 * 1024
_TS = 1_700_000_000_000


def _config() -> LogConfig:
    return LogConfig(
        segment_bytes=_MIB, cleanup_policy="compact", retention_ms=-1, min_cleanable_dirty_ratio=0.0
    )


def _build(path: Path, records: int, keys: int) -> int:
    """The partition at ``path``; returns the bytes of one live record's batch share (key + value)."""
    log = PartitionLog.load(path, "t", 0, _config(), lambda: _TS, needs_recovery=False)
    value = b"v" * 100
    for start in range(0, records, 100):
        builder = RecordBatchBuilder()
        for i in range(start, min(start + 100, records)):
            builder.append(_TS, b"key-%08d" % (i % keys), value)
        log.append(builder.build())
    log.roll()
    log.close()
    return len(b"key-00000000") + len(value)


def run(quick: bool) -> list[Result]:
    records, keys = (20_000, 1_000) if quick else (500_000, 10_000)
    rounds = 1 if quick else 3
    root = Path(tempfile.mkdtemp(prefix="pylog-bench-compaction-"))
    try:
        live_record = _build(root / "source-0", records, keys)
        times: list[float] = []
        read_mb = kept = 0.0
        segments = (0, 0)
        for r in range(rounds):
            work = root / f"work{r}-0"
            shutil.copytree(root / "source-0", work)
            log = PartitionLog.load(work, "t", 0, _config(), lambda: _TS, needs_recovery=False)
            t0 = time.perf_counter()
            result = clean_log(log, 0, _TS, force=True)
            times.append(time.perf_counter() - t0)
            assert result is not None
            read_mb = result.bytes_read / _MIB
            kept = sum(s.size for s in log.segments[:-1])
            segments = (result.segments_before, result.segments_after)
            log.close()
            shutil.rmtree(work, ignore_errors=True)
        timing = Timing(tuple(times))
        live = keys * live_record
        return [
            Result.measured(
                SECTION,
                f"clean {records:,} records over {keys:,} keys ({read_mb:,.0f} MB)",
                timing.rate(read_mb),
                "MB/s",
            ),
            Result(SECTION, f"bytes kept after compaction ({keys:,} live keys)", kept / _MIB, "MB"),
            Result(SECTION, "bytes kept / live key set (keys + values)", kept / live, "x"),
            Result(SECTION, f"segments after one pass (of {segments[0]})", segments[1], "segments"),
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)
