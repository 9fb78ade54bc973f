"""Benchmark section "stream": ``spark.readStream.format("pylog")`` throughput and end-to-end latency.

Figures (one local Spark session: the active one, else ``local[2]``):
  * throughput: a Trigger.AvailableNow query (fresh checkpoint, no rate limit: one micro-batch) over a pre-filled
    topic (N rows, 16-byte key, 100-byte value, 4 partitions) into Spark's streaming ``noop`` sink, vs the batch
    reader over the same data into ``noop``, same run, medians of repeated runs. Steady state (target stream /
    batch >= 0.8) is the time inside the query's micro-batches (Spark's ``triggerExecution``); query start to end
    is reported too: it adds PySpark's per-query start of the Python source process (a fresh interpreter that
    imports PySpark and pylog) and the checkpoint writes, a fixed cost per query run, not per batch;
  * latency: a confluent-kafka producer sends records stamped with their send time (CreateTime) at a steady rate
    while a query with a 100 ms processing-time trigger reads them; in ``foreachBatch`` each row's latency is the
    time the batch's rows reached the driver minus its timestamp. Median and p99 over all rows.

Data is produced with the vectorized batch builder and raw Produce requests (the reader section's producer).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from typing import Any

import numpy as np

from broker_runtime.launch import broker_process, create_topic
from jobs.bench.common import Result, Timing, spark_session, timed
from jobs.bench.reader import _produce

__all__ = ["SECTION", "run"]

SECTION = "stream"
TARGET_STREAM_BATCH_RATIO = 0.8
_PARTITIONS = 4


def _spark() -> Any:
    spark = spark_session("pylog-bench-stream", "local[2]", **{"spark.sql.session.timeZone": "UTC"})
    import spark_kafka_log

    spark_kafka_log.register(spark)
    return spark


def _latency(spark: Any, bootstrap: str, logs: str, tmp: str, seconds: float, rate: int) -> list[float]:
    """Per-row latency in ms: producer send (CreateTime) -> the row's batch collected in foreachBatch."""
    from confluent_kafka import Producer

    create_topic(bootstrap, "latency", partitions=_PARTITIONS)
    latencies: list[float] = []
    lock = threading.Lock()

    def collect(df: Any, batch_id: int) -> None:
        stamps = [r[0] for r in df.selectExpr("unix_millis(timestamp)").collect()]
        now = time.time() * 1000
        with lock:
            latencies.extend(now - s for s in stamps)

    query = (
        spark.readStream.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("pylog.logDirs", logs)
        .option("subscribe", "latency")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", os.path.join(tmp, "latency-checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        while query.lastProgress is None:  # the query runs and has its starting offsets (latest)
            time.sleep(0.05)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 0})
        sent = 0
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            due = int((time.monotonic() - start) * rate)
            for _ in range(due - sent):
                producer.produce("latency", value=b"x" * 100, partition=sent % _PARTITIONS)
                sent += 1
            producer.poll(0)
            time.sleep(0.002)
        if producer.flush(30):
            raise RuntimeError("the latency producer could not deliver everything within 30 s")
        deadline = time.monotonic() + 60  # a loaded machine may take seconds per micro-batch
        while time.monotonic() < deadline:
            with lock:
                if len(latencies) >= sent:
                    break
            time.sleep(0.05)
    finally:
        query.stop()
    if len(latencies) != sent:
        raise RuntimeError(f"the latency query saw {len(latencies)} rows of the {sent} sent")
    return latencies


def run(quick: bool) -> list[Result]:
    rows = 50_000 if quick else 2_000_000
    # Quick mode (the test suite's smoke run): each measured function runs once, without a warm-up.
    repeat, warmup = (1, 0) if quick else (5, 1)
    latency_seconds, latency_rate = (1.5, 200) if quick else (20.0, 500)
    spark = _spark()
    tmp = tempfile.mkdtemp(prefix="pylog-bench-stream-")
    results: list[Result] = []
    try:
        logs = os.path.join(tmp, "logs")
        overrides = {"num.partitions": str(_PARTITIONS), "log.dirs": logs, "log.retention.ms": "-1"}
        with broker_process(tmp, overrides=overrides) as bootstrap:
            create_topic(bootstrap, "bench", partitions=_PARTITIONS)
            for p in range(_PARTITIONS):
                _produce(bootstrap, "bench", p, rows // _PARTITIONS, 16, 100)
            runs = iter(range(1_000_000))
            #: Per stream run: seconds inside its micro-batches (Spark's triggerExecution), query start excluded.
            inside: list[float] = []

            def batch() -> None:
                df = (
                    spark.read.format("pylog")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("pylog.logDirs", logs)
                    .option("subscribe", "bench")
                    .load()
                )
                df.write.format("noop").mode("overwrite").save()

            def stream() -> None:
                query = (
                    spark.readStream.format("pylog")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("pylog.logDirs", logs)
                    .option("subscribe", "bench")
                    .option("startingOffsets", "earliest")
                    .load()
                    .writeStream.format("noop")
                    .option("checkpointLocation", os.path.join(tmp, f"checkpoint-{next(runs)}"))
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination()
                progress = query.recentProgress
                inside.append(sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000)
                read = sum(p["numInputRows"] for p in progress)
                if read != rows // _PARTITIONS * _PARTITIONS:
                    raise RuntimeError(f"the AvailableNow query read {read} rows, expected {rows}")

            batch_s = timed(batch, repeat=repeat, warmup=warmup)
            stream_s = timed(stream, repeat=repeat, warmup=warmup)
            label = f"{rows / 1e6:g}M rows" if rows >= 1e6 else f"{rows // 1000}k rows"
            steady = Timing(tuple(inside[-repeat:]))
            ratio = batch_s.median / steady.median
            results += [
                Result.measured(
                    SECTION,
                    f"AvailableNow stream -> noop, in its batches ({label})",
                    steady.rate(rows),
                    "rows/s",
                ),
                Result.measured(
                    SECTION,
                    f"AvailableNow stream -> noop, start to end ({label})",
                    stream_s.rate(rows),
                    "rows/s",
                ),
                Result.measured(
                    SECTION, f"batch read -> noop ({label}, same data)", batch_s.rate(rows), "rows/s"
                ),
                Result(
                    SECTION,
                    "AvailableNow stream (in its batches) / batch read",
                    ratio,
                    "x",
                    f">= {TARGET_STREAM_BATCH_RATIO}",
                    ratio >= TARGET_STREAM_BATCH_RATIO,
                ),
                Result(
                    SECTION,
                    "AvailableNow stream (start to end) / batch read",
                    batch_s.median / stream_s.median,
                    "x",
                ),
            ]
            latencies = np.array(_latency(spark, bootstrap, logs, tmp, latency_seconds, latency_rate))
            if latencies.size == 0:
                raise RuntimeError("the latency query saw no rows")
            p50, p99 = float(np.percentile(latencies, 50)), float(np.percentile(latencies, 99))
            label = f"{latency_rate} msg/s, 100 ms trigger, {latencies.size} rows"
            results += [
                Result(SECTION, f"send -> foreachBatch latency p50 ({label})", p50, "ms"),
                Result(SECTION, f"send -> foreachBatch latency p99 ({label})", p99, "ms"),
            ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results
