"""Benchmark section "storage": partition-log append throughput, offset lookup latency, recovery speed.

Figures, measured side by side in one run:
  * append throughput of 1 MiB batches through ``PartitionLog.append`` vs a plain ``file.write`` loop of the same
    bytes (ratio log / plain; target >= 0.8);
  * latency of ``PartitionLog.position_for`` (segment search, offset index, header walk) for random offsets in a
    big partition vs a small one (ratio big / small; target <= 1.2). Full run: 10M vs 100k records;
  * recovery speed (every batch CRC-checked, indexes rebuilt) in MB/s.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from broker_runtime.protocol.records import RecordBatchBuilder
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from jobs.bench.common import Result, Timing, timed

__all__ = ["run"]

SECTION = "storage"
_MIB = 1024 * 1024


def _batch(records: int, value_size: int) -> bytes:
    builder = RecordBatchBuilder()
    value = b"v" * value_size
    ts = 1_700_000_000_000
    for i in range(records):
        builder.append(ts + i, None, value)
    return builder.build()


def _append_figures(root: Path, quick: bool) -> list[Result]:
    """Only the appends are timed: opening, closing (fsync) and cleanup happen outside the clock for both."""
    count = 16 if quick else 128
    template = _batch(1024, 1000)  # ~1 MiB
    batches = [bytearray(template) for _ in range(count)]
    total_mb = len(template) * count / _MIB
    repeat = 4 if quick else 9
    t_log_runs, t_plain_runs = [], []

    def through_log(d: Path) -> float:
        log = PartitionLog.load(d / "t-0", "t", 0, LogConfig(), needs_recovery=False)
        t0 = time.perf_counter()
        for b in batches:
            log.append(b)
        elapsed = time.perf_counter() - t0
        log.close()  # fsync, outside the clock
        return elapsed

    def plain(d: Path) -> float:
        (d / "plain").mkdir(parents=True)
        with open(d / "plain" / "00000000000000000000.log", "ab", buffering=0) as f:
            t0 = time.perf_counter()
            for b in batches:
                f.write(b)
            elapsed = time.perf_counter() - t0
            os.fsync(f.fileno())  # same as the log's close, outside the clock
        return elapsed

    for run_no in range(repeat + 1):  # round 0 is a warm-up; the order alternates between rounds
        d = root / f"append-{run_no}"
        if run_no % 2:
            t_log, t_plain = through_log(d), plain(d)
        else:
            t_plain, t_log = plain(d), through_log(d)
        shutil.rmtree(d)
        if run_no:
            t_log_runs.append(t_log)
            t_plain_runs.append(t_plain)
    log_timing = Timing(tuple(t_log_runs))
    plain_timing = Timing(tuple(t_plain_runs))
    ratio = plain_timing.median / log_timing.median
    return [
        Result.measured(SECTION, "append 1 MiB batches: PartitionLog", log_timing.rate(total_mb), "MB/s"),
        Result.measured(
            SECTION, "append 1 MiB batches: plain file.write loop", plain_timing.rate(total_mb), "MB/s"
        ),
        Result(SECTION, "append throughput ratio log/plain", ratio, "x", ">= 0.8", ratio >= 0.8),
    ]


def _build_partition(path: Path, records: int, per_batch: int) -> PartitionLog:
    template = bytearray(_batch(per_batch, 1))
    log = PartitionLog.load(path, "t", 0, LogConfig(), needs_recovery=False)
    for _ in range(records // per_batch):
        log.append(template)
    return log


def _lookup_rounds(logs: list[PartitionLog], samples: int, rounds: int) -> list[Timing]:
    """Seconds per lookup for each log, one figure per round; rounds interleave logs so drift hits both alike."""
    rng = random.Random(7)
    offsets = [[rng.randrange(log.log_end_offset) for _ in range(samples)] for log in logs]
    times: list[list[float]] = [[] for _ in logs]
    for _ in range(rounds):
        for k, log in enumerate(logs):
            position_for = log.position_for

            def lookups(offs: list[int] = offsets[k], position_for=position_for) -> None:
                for o in offs:
                    position_for(o)

            times[k].append(timed(lookups, repeat=1, warmup=0).median / samples)
    return [Timing(tuple(t)) for t in times]


def run(quick: bool) -> list[Result]:
    results: list[Result] = []
    root = Path(tempfile.mkdtemp(prefix="pylog-bench-storage-"))
    try:
        results += _append_figures(root, quick)

        big_n, small_n = (1_000_000, 10_000) if quick else (10_000_000, 100_000)
        per_batch = 1000
        t0 = time.perf_counter()
        big = _build_partition(root / "big-0", big_n, per_batch)
        build_s = time.perf_counter() - t0
        small = _build_partition(root / "small-0", small_n, per_batch)
        samples = 500 if quick else 3000
        t_small, t_big = _lookup_rounds([small, big], samples, rounds=9 if quick else 15)
        ratio = t_big.median / t_small.median
        results += [
            Result(SECTION, f"build partition of {big_n:,} records", big_n / build_s, "records/s"),
            Result.measured(
                SECTION, f"offset lookup, {small_n:,}-record partition", t_small.scaled(1e6), "us"
            ),
            Result.measured(SECTION, f"offset lookup, {big_n:,}-record partition", t_big.scaled(1e6), "us"),
            Result(SECTION, "offset lookup ratio big/small", ratio, "x", "<= 1.2", ratio <= 1.2),
        ]

        big.close()
        small.close()
        size_mb = sum(p.stat().st_size for p in (root / "big-0").glob("*.log")) / _MIB

        def recover() -> None:
            PartitionLog.load(
                root / "big-0", "t", 0, LogConfig(), recovery_point=0, needs_recovery=True
            ).close()

        t_rec = timed(recover, repeat=3, warmup=1)
        results.append(
            Result.measured(
                SECTION,
                f"recovery from offset 0 ({size_mb:,.0f} MB, CRC + index rebuild)",
                t_rec.rate(size_mb),
                "MB/s",
            )
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results
