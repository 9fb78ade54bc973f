"""The streaming example job: one pylog topic -> transform -> another pylog topic, with Structured Streaming.

Runs on the driver with a ``local[2]`` Spark session (or the active one), against the shared embedded broker of
``$PYLOG_DATA_DIR`` (default ``./pylog-data``) or ``--bootstrap``:

1. creates the topics ``<prefix>-orders`` (4 partitions) and ``<prefix>-enriched`` and writes ``--rows`` orders
   (JSON values ``{"id", "customer", "amount"}``) with the batch writer;
2. runs the pipeline: ``readStream.format("pylog")`` (``maxOffsetsPerTrigger`` as the rate limit) -> parse the
   JSON, add the amount with tax and a ``big`` flag -> ``writeStream.format("pylog")`` keyed by customer, with
   ``Trigger.AvailableNow`` (the orders there now, then stop) or, with ``--seconds S``, a processing-time trigger
   for S seconds while more orders are written;
3. checks the output: every order id exactly once (the sink is idempotent; a restarted query may rewrite its last
   micro-batch, see the README), and prints the micro-batches and rows per second.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

import spark_kafka_log
from broker_runtime.launch import create_topic


def _write_orders(spark: Any, options: dict[str, str], topic: str, first: int, n: int) -> None:
    orders = spark.range(first, first + n).select(
        F.col("id").cast("string").alias("key"),
        F.to_json(
            F.struct(
                "id",
                F.concat(F.lit("customer-"), (F.col("id") % 97).cast("string")).alias("customer"),
                ((F.col("id") * 7919) % 100_000 / 100).alias("amount"),
            )
        ).alias("value"),
    )
    orders.write.format("pylog").options(**options).option("topic", topic).mode("append").save()


def run(
    spark: Any,
    options: dict[str, str],
    prefix: str,
    rows: int,
    seconds: float = 0.0,
    max_offsets_per_trigger: int = 50_000,
) -> dict[str, Any]:
    """The pipeline on ``spark`` (not stopped here); ``options`` locate the broker. Returns what it saw."""
    source, sink = f"{prefix}-orders", f"{prefix}-enriched"
    bootstrap = options.get("kafka.bootstrap.servers") or spark_kafka_log.ensure_embedded_broker(
        options["pylog.dataDir"]
    )
    create_topic(bootstrap, source, partitions=4)
    create_topic(bootstrap, sink, partitions=4)
    _write_orders(spark, options, source, 0, rows)

    schema = "id long, customer string, amount double"
    enriched = (
        spark.readStream.format("pylog")
        .options(**options)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("o"), "timestamp")
        .select(
            F.col("o.customer").alias("key"),
            F.to_json(
                F.struct(
                    "o.id",
                    "o.customer",
                    "o.amount",
                    F.round(F.col("o.amount") * 1.2, 2).alias("with_tax"),
                    (F.col("o.amount") > 900).alias("big"),
                    F.col("timestamp").alias("ordered_at"),
                )
            ).alias("value"),
        )
    )
    writer = (
        enriched.writeStream.format("pylog")
        .options(**options)
        .option("topic", sink)
        .option("checkpointLocation", tempfile.mkdtemp(prefix=f"{prefix}-checkpoint-"))
    )
    written = rows
    started = time.perf_counter()
    if seconds > 0:
        query = writer.trigger(processingTime="1 second").start()
        # More orders while the stream runs, from this thread: PySpark finds a registered Python data source only
        # from the threads it knows, not from a thread started here.
        while time.perf_counter() - started < seconds:
            time.sleep(0.5)
            _write_orders(spark, options, source, written, 1000)
            written += 1000
        query.processAllAvailable()
        query.stop()
    else:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    elapsed = time.perf_counter() - started
    batches = [p for p in query.recentProgress if p["numInputRows"]]

    out = spark.read.format("pylog").options(**options).option("subscribe", sink).load()
    ids = out.select(F.get_json_object(F.col("value").cast("string"), "$.id").cast("long").alias("id"))
    stats = ids.agg(
        F.count("id").alias("n"), F.countDistinct("id").alias("distinct"), F.max("id").alias("top")
    )
    n, distinct, top = stats.first()
    return {
        "source": source,
        "sink": sink,
        "written": written,
        "output_rows": n,
        "distinct_ids": distinct,
        "max_id": top,
        "batches": len(batches),
        "batch_rows": [p["numInputRows"] for p in batches],
        "seconds": elapsed,
        "ok": n == distinct == written and top == written - 1,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.stream_job", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument(
        "--seconds", type=float, default=0.0, help="run with a 1 s trigger this long (0: AvailableNow)"
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, default=50_000)
    parser.add_argument("--bootstrap", help="kafka.bootstrap.servers (default: the embedded broker)")
    args = parser.parse_args(argv)

    from jobs.main import _spark

    spark = _spark("pylog-stream-job")
    spark_kafka_log.register(spark)
    if args.bootstrap:
        options = {"kafka.bootstrap.servers": args.bootstrap}
    else:
        options = {"pylog.dataDir": str(Path(os.environ.get("PYLOG_DATA_DIR", "pylog-data")).resolve())}
    result = run(
        spark,
        options,
        f"stream-job-{int(time.time() * 1000)}",
        args.rows,
        args.seconds,
        args.max_offsets_per_trigger,
    )
    spark.stop()
    print(
        f"{result['source']} -> {result['sink']}: {result['written']:,} orders in, {result['output_rows']:,} rows out "
        f"({result['distinct_ids']:,} distinct ids) in {result['batches']} micro-batches, "
        f"{result['written'] / result['seconds']:,.0f} rows/s: {'OK' if result['ok'] else 'FAILED'}"
    )
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
