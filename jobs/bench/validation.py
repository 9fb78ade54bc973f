"""Benchmark section "validation": the cost of Kafka's record validation on produce, and the long fuzzer run.

* validation cost: the broker's produce path for one partition -- :func:`validate_produce_records` then
  ``PartitionLog.append`` of the validated batch -- with full record validation (every record walked) and with
  the header-only baseline (``BatchPolicy.header_only``, the broker key ``pylog.test.validation.header.only``),
  run interleaved in the same process on the same batches: 1 MiB batches (the producer's batch.size) of
  100-byte values with 8-byte keys, uncompressed and lz4, and small lz4 batches of 100 such records (what
  librdkafka sends at low linger). Figure: the full path's throughput as a share of the baseline's (target
  >= 0.8), and the full path's records per second; and the full path with the compiled record walk over
  the same path with the numpy walk (``record_codec.walks.numpy_walk``), interleaved with the other two;
* fuzz: ``jobs/fuzz.py`` at a broker child process, 100,000 mutated frames (quick: 100), frames per second;
  then the broker must still answer and every stored batch must decode (as in the suite's test).

Profile of ``validate_produce_records`` (cProfile, tottime, share of the profiled validation time; 2026-11-23, the
2-core machine shared with other jobs, load average 2-5), before and after the record-start search became
numpy-verified speculation, offsetDelta a byte comparison with the cached encodings of the indexes, and varints
of one or two bytes whole-array operations:

    batch                          before (per batch)                        after (per batch)
    uncompressed 1 MiB, 8,880 rec  11.5 ms: Python length walk 54%, field    3.5 ms: scan_records' own numpy steps
                                   varints 22%, list appends 6%, takes 4%    24%, record-start search 25%, field
                                                                             varints 34%, takes 11%
    lz4 1 MiB, 8,880 rec           9.6 ms: walk 71%, varints 14%, lz4        3.8 ms: varints 28%, lz4 decompression
                                   decompression 4%                          20%, record starts 18%, scan steps 16%
    lz4 100 rec (11 KB)            0.67 ms: varints 46%, scan steps 15%,     unchanged but for the load of the moment
                                   walk 14%, numpy reductions 10%            (1.07 ms): varints 29%, walk 18% (still
                                                                             used below 256 records), scan steps 17%

Small batches are bound by the count of numpy calls (about 60 per batch), not by the records.

With the compiled record walk (CPU time per batch measured alone, time.process_time, medians of 7; 2026-11-23,
load average above 20): uncompressed 1 MiB 0.31 ms, of which the walk 0.23 ms and the CRC 0.05 ms; lz4 1 MiB
0.92 ms: lz4 decompression 0.44 ms, the walk 0.32 ms; lz4 100 records 26 us: the C walk 3.4 us, scan_records'
Python around it 4.4 us, decompression 5.5 us, the rest the produce path's own Python per batch. The header-only
baseline costs a CRC and the append (~0.5 ms per MiB here, mostly the copy and the write), so the full path's
ratio is bounded by what decompression alone costs with lz4 (~0.35-0.4 ms per MiB).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from jobs.bench.common import Result, timed_interleaved

__all__ = ["run"]

SECTION = "validation"
TARGET = 0.8


def _batches(codec: int, count: int, n: int = 10_000) -> list[bytes]:
    from broker_runtime.protocol.record_codec.encode import build_batches

    rng = np.random.default_rng(7)
    values = pa.array([bytes(row) for row in rng.integers(0, 26, size=(n, 100), dtype=np.uint8) + 65])
    keys = pa.array([b"key-%04d" % (i % 10_000) for i in range(n)])
    built = build_batches(values, keys, compression=codec, max_batch_bytes=1 << 20)
    return [bytes(b.data) for b in built][:count]


def _path_cost(
    codec: int, rounds: int, repeat: int, per_batch: int = 10_000
) -> tuple[float, float, int, float | None]:
    """(full / header-only throughput ratio, full records per second, records per round, and the full path's
    throughput with the compiled record walk over that with the numpy walk, None without the compiled walk)."""
    from broker_runtime.protocol.record_codec.walks import numpy_walk, record_walk
    from broker_runtime.server.validation import BatchPolicy, Rejection, validate_produce_records
    from broker_runtime.storage.config import LogConfig
    from broker_runtime.storage.partition_log import PartitionLog

    batches = _batches(codec, 1, per_batch)
    records = sum(int.from_bytes(b[57:61], "big") for b in batches)
    full = BatchPolicy()
    header_only = BatchPolicy(header_only=True)
    with tempfile.TemporaryDirectory(prefix="pylog-bench-") as tmp:
        logs = {
            name: PartitionLog.load(Path(tmp) / f"{name}-0", name, 0, LogConfig(), needs_recovery=False)
            for name in ("full", "numpy", "header")
        }

        def produce(name: str, policy: BatchPolicy) -> None:
            now = int(time.time() * 1000)
            for _ in range(rounds):
                for batch in batches:
                    checked = validate_produce_records(
                        batch, partition_name=name, api_version=9, policy=policy, now_ms=now
                    )
                    if isinstance(checked, Rejection):
                        raise AssertionError(f"the benchmark's batch was refused: {checked.message}")
                    logs[name].append(checked.records)

        def produce_numpy() -> None:
            with numpy_walk():
                produce("numpy", full)

        compiled = record_walk()[0] == "compiled"
        runs: list[Callable[[], object]] = [
            lambda: produce("full", full),
            lambda: produce("header", header_only),
        ]
        timings = timed_interleaved(runs + [produce_numpy] if compiled else runs, repeat=repeat)
        for log in logs.values():
            log.close()
    full_t, header_t = timings[:2]
    walk_ratio = timings[2].median / full_t.median if compiled else None
    return header_t.median / full_t.median, records * rounds / full_t.median, records, walk_ratio


def _fuzz(frames: int) -> tuple[float, int]:
    from broker_runtime.launch import broker_process, create_topic
    from broker_runtime.launch.layout import broker_log_dir
    from broker_runtime.protocol.record_codec.decode import decode_batches
    from jobs.fuzz import fuzz

    with tempfile.TemporaryDirectory(prefix="pylog-bench-") as data:
        overrides = {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0"}
        with broker_process(data, overrides=overrides) as address:
            create_topic(address, "fuzz", 1)
            started = time.perf_counter()
            stats = fuzz(address, frames, seed=11)
            rate = stats.sent / (time.perf_counter() - started)
        for segment in sorted(broker_log_dir(data).glob("*/*.log")):
            decode_batches(segment.read_bytes(), include_control=True, allow_partial_tail=False)
    return rate, stats.consumed


def run(quick: bool) -> list[Result]:
    rounds = 1 if quick else 20
    results = []
    cases = ((0, "uncompressed", "1 MiB", 10_000), (3, "lz4", "1 MiB", 10_000), (3, "lz4", "small", 100))
    for codec, name, size, per_batch in cases:
        scale = 10_000 // per_batch
        ratio, rate, records, walk_ratio = _path_cost(codec, rounds * scale, 1 if quick else 5, per_batch)
        results.append(
            Result(
                SECTION,
                f"produce path, full validation vs header only, {name} {size} batches ({records:,} records)",
                ratio,
                "x",
                f">= {TARGET}x",
                ratio >= TARGET,
            )
        )
        results.append(
            Result(SECTION, f"produce path with full validation, {name} {size} batches", rate, "records/s")
        )
        if walk_ratio is not None:
            results.append(
                Result(
                    SECTION,
                    f"full validation path, compiled record walk / numpy walk, {name} {size} batches",
                    walk_ratio,
                    "x",
                )
            )
    fuzz_rate, consumed = _fuzz(100 if quick else 100_000)
    results.append(
        Result(SECTION, f"fuzzer, mutated frames at a broker ({consumed:,} consumed)", fuzz_rate, "frames/s")
    )
    return results
