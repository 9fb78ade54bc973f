"""Benchmark section "reader": ``spark.read.format("pylog")`` throughput and seek cost, side by side in one run.

Figures (medians of repeated runs, one local Spark session: the active one, else ``local[4]``):
  * pylog read of N rows (16-byte key, 100-byte value, 4 partitions) into Spark's ``noop`` sink, with the
    direct segment scan and with Fetch over TCP;
  * the framework ceiling: a no-op Python data source yielding PREBUILT Arrow batches of the same schema and
    shape through the same 4 tasks; targets pylog / ceiling >= 0.85 with the direct scan, >= 0.7 with Fetch.
    The three run in turn (ceiling, direct, Fetch, ceiling, ...), so a drift of a loaded machine affects each
    alike;
  * Parquet read of the same rows into ``noop`` (reference only);
  * reading 1,000 records at a random offset of a BIG-record partition vs a SMALL one (10M vs 100k records;
    quick mode 200k vs 20k): target big / small <= 1.2 (the offset index makes a seek O(log n)).

Data is produced with the vectorized batch builder and raw Produce requests to an embedded broker in a
temporary directory (no client library in the measured path).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from broker_runtime.client import KafkaClient
from broker_runtime.launch import broker_process, create_topic
from broker_runtime.protocol.record_codec.encode import build_batches
from jobs.bench.common import Result, Timing, spark_session, timed, timed_interleaved

__all__ = ["SECTION", "run"]

SECTION = "reader"
TARGET_CEILING_RATIO = 0.85
TARGET_FETCH_CEILING_RATIO = 0.7
TARGET_SEEK_RATIO = 1.2
_PARTITIONS = 4
#: Batch size of the produced data (one batch per Produce request).
_BATCH_BYTES = 256 * 1024


def _random_binary(rng: np.random.Generator, n: int, width: int) -> pa.Array:
    data = rng.integers(0, 256, size=n * width, dtype=np.uint8)
    offsets = np.arange(n + 1, dtype=np.int32) * width
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _produce(bootstrap: str, topic: str, partition: int, n: int, key_bytes: int, value_bytes: int) -> None:
    """Append n records to one partition with Produce requests of one 256 KiB batch each (acks=1)."""
    with KafkaClient(bootstrap, client_id="pylog-bench") as client:
        leader = client.leader_for(topic, partition)
        for records in _batches(partition, n, key_bytes, value_bytes):
            results = client.produce(leader, {(topic, partition): records}, acks=1, timeout_ms=30000)
            code = (results or {})[(topic, partition)].error
            if code:
                raise RuntimeError(f"produce to {topic}-{partition} failed with error code {code}")


def _batches(partition: int, n: int, key_bytes: int, value_bytes: int) -> Iterator[bytes]:
    rng = np.random.default_rng(partition)
    now = int(time.time() * 1000) - n
    step = 200_000
    for s in range(0, n, step):
        m = min(step, n - s)
        batches = build_batches(
            _random_binary(rng, m, value_bytes),
            _random_binary(rng, m, key_bytes),
            timestamps=np.arange(s, s + m, dtype=np.int64) + now,  # in the past: brokers refuse > 1 h ahead
            max_batch_bytes=_BATCH_BYTES,
        )
        for b in batches:  # Produce v3+ takes exactly one batch per partition and request
            yield bytes(b.data)


# ---------------------------------------------------------------------- the ceiling: prebuilt batches

_PREBUILT: dict[tuple[int, int], list[pa.RecordBatch]] = {}


class _CeilingReader(DataSourceReader):
    def __init__(self, rows: int) -> None:
        self.rows = rows

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(_PARTITIONS)]

    def read(self, partition: InputPartition) -> Any:
        from spark_kafka_log.read.reader import arrow_schema, reader_schema

        key = (self.rows, partition.value)
        if key not in _PREBUILT:
            schema = arrow_schema(reader_schema(False))
            n = self.rows // _PARTITIONS
            rng = np.random.default_rng(partition.value)
            out = []
            for s in range(0, n, 60_000):
                m = min(60_000, n - s)
                out.append(
                    pa.RecordBatch.from_arrays(
                        [
                            _random_binary(rng, m, 16),
                            _random_binary(rng, m, 100),
                            pa.repeat(pa.scalar("bench", pa.string()), m),
                            pa.repeat(pa.scalar(partition.value, pa.int32()), m),
                            pa.array(np.arange(s, s + m, dtype=np.int64)),
                            pa.array(np.full(m, 1_700_000_000_000_000, dtype=np.int64)).cast(
                                schema.field(5).type
                            ),
                            pa.repeat(pa.scalar(0, pa.int32()), m),
                        ],
                        schema=schema,
                    )
                )
            _PREBUILT[key] = out
        yield from _PREBUILT[key]


class CeilingDataSource(DataSource):
    """A no-op source: the same schema and batch shape as pylog, from memory (the framework ceiling)."""

    @classmethod
    def name(cls) -> str:
        return "pylog_bench_ceiling"

    def schema(self) -> Any:
        from spark_kafka_log.read.reader import reader_schema

        return reader_schema(False)

    def reader(self, schema: Any) -> DataSourceReader:
        return _CeilingReader(int(self.options.get("rows", "0")))


# ---------------------------------------------------------------------- the run


def _spark() -> Any:
    spark = spark_session(
        "pylog-bench-reader",
        f"local[{min(_PARTITIONS, os.cpu_count() or 1)}]",
        **{"spark.sql.session.timeZone": "UTC"},
    )
    import spark_kafka_log

    spark_kafka_log.register(spark)
    spark.dataSource.register(CeilingDataSource)
    return spark


def run(quick: bool) -> list[Result]:
    rows = 50_000 if quick else 2_000_000
    big, small = (200_000, 20_000) if quick else (10_000_000, 100_000)
    # Quick mode (the test suite's smoke run): every measured function runs once, without a warm-up.
    repeat, warmup = (1, 0) if quick else (5, 1)
    spark = _spark()
    tmp = tempfile.mkdtemp(prefix="pylog-bench-reader-")
    results: list[Result] = []
    try:
        logs = os.path.join(tmp, "logs")
        overrides = {"num.partitions": str(_PARTITIONS), "log.dirs": logs, "log.retention.ms": "-1"}
        with broker_process(tmp, overrides=overrides) as bootstrap:
            create_topic(bootstrap, "bench", partitions=_PARTITIONS)
            for p in range(_PARTITIONS):
                _produce(bootstrap, "bench", p, rows // _PARTITIONS, 16, 100)

            def pylog(transport: str) -> Any:
                return (
                    spark.read.format("pylog")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("pylog.logDirs", logs)
                    .option("pylog.transport", transport)
                    .option("subscribe", "bench")
                    .load()
                )

            def noop(df: Any) -> None:
                df.write.format("noop").mode("overwrite").save()

            ceiling_s, local_s, fetch_s = timed_interleaved(
                [
                    lambda: noop(spark.read.format("pylog_bench_ceiling").option("rows", str(rows)).load()),
                    lambda: noop(pylog("local")),
                    lambda: noop(pylog("fetch")),
                ],
                repeat=repeat,
                warmup=warmup,
            )
            parquet_dir = os.path.join(tmp, "parquet")
            pylog("local").write.parquet(parquet_dir)
            parquet_s = timed(lambda: noop(spark.read.parquet(parquet_dir)), repeat=repeat, warmup=warmup)
            label = f"{rows / 1e6:g}M rows" if rows >= 1e6 else f"{rows // 1000}k rows"
            ratio = ceiling_s.median / local_s.median
            fetch_ratio = ceiling_s.median / fetch_s.median
            results += [
                Result.measured(
                    SECTION, f"pylog read, direct scan -> noop ({label})", local_s.rate(rows), "rows/s"
                ),
                Result.measured(
                    SECTION, f"pylog read, Fetch over TCP -> noop ({label})", fetch_s.rate(rows), "rows/s"
                ),
                Result.measured(
                    SECTION,
                    f"ceiling: prebuilt Arrow source -> noop ({label})",
                    ceiling_s.rate(rows),
                    "rows/s",
                ),
                Result.measured(
                    SECTION, f"parquet read -> noop ({label}, reference)", parquet_s.rate(rows), "rows/s"
                ),
                Result(
                    SECTION,
                    "pylog direct scan / ceiling",
                    ratio,
                    "x",
                    f">= {TARGET_CEILING_RATIO}",
                    ratio >= TARGET_CEILING_RATIO,
                ),
                Result(
                    SECTION,
                    "pylog Fetch / ceiling",
                    fetch_ratio,
                    "x",
                    f">= {TARGET_FETCH_CEILING_RATIO}",
                    fetch_ratio >= TARGET_FETCH_CEILING_RATIO,
                ),
            ]

            create_topic(bootstrap, "seek-big", partitions=1)
            create_topic(bootstrap, "seek-small", partitions=1)
            _produce(bootstrap, "seek-big", 0, big, 8, 16)
            _produce(bootstrap, "seek-small", 0, small, 8, 16)
            rnd = random.Random(7)

            def seek(topic: str, size: int) -> Timing:
                def once() -> None:
                    start = rnd.randrange(0, size - 1000)
                    df = (
                        spark.read.format("pylog")
                        .option("kafka.bootstrap.servers", bootstrap)
                        .option("pylog.logDirs", logs)
                        .option("assign", f'{{"{topic}": [0]}}')
                        .option("startingOffsets", f'{{"{topic}": {{"0": {start}}}}}')
                        .option("endingOffsets", f'{{"{topic}": {{"0": {start + 1000}}}}}')
                        .load()
                    )
                    assert df.count() == 1000

                return timed(once, repeat=repeat, warmup=warmup)

            big_s = seek("seek-big", big)
            small_s = seek("seek-small", small)
            seek_ratio = big_s.median / small_s.median
            results += [
                Result.measured(
                    SECTION, f"1,000 records at a random offset of {big:,} (count)", big_s.scaled(1000), "ms"
                ),
                Result.measured(
                    SECTION,
                    f"1,000 records at a random offset of {small:,} (count)",
                    small_s.scaled(1000),
                    "ms",
                ),
                Result(
                    SECTION,
                    "random-offset read: big / small partition",
                    seek_ratio,
                    "x",
                    f"<= {TARGET_SEEK_RATIO}",
                    seek_ratio <= TARGET_SEEK_RATIO,
                ),
            ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results
