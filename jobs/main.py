"""The main job: a keyed DataFrame written to the embedded pylog broker with Spark, read back, checked.

Runs on the driver with a ``local[2]`` Spark session:

1. finds or starts the shared embedded broker of ``$PYLOG_DATA_DIR`` (default ``./pylog-data``), which keeps
   running after the job (``pylog-broker stop --data-dir DIR`` stops it), and creates a fresh topic;
2. generates a keyed DataFrame and writes it with ``df.write.format("pylog")`` (found by discovery, no
   ``register()``) and no broker address (the zero-configuration default: idempotent producer, acks=all);
3. reads the topic back with ``spark.read.format("pylog")`` and prints records per partition;
4. checks the round trip: the same multiset of (key, value) rows, and every key in the partition Kafka's Java
   client would choose (murmur2).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_kafka_log
from broker_runtime.launch import create_topic
from broker_runtime.protocol.murmur2 import partitions_for_keys
from spark_kafka_log.common.spark_compat import check_worker_python


def _spark(app: str) -> SparkSession:
    # Python workers must run this interpreter: it has pylog and pyarrow installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Everything here runs on loopback; this also keeps Spark from warning about the host name.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.main", description=__doc__)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compression", default="lz4", help="none, gzip, snappy, lz4 or zstd")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_kafka_log").setLevel(logging.INFO)  # the writer's one-line commit summary

    data_dir = Path(os.environ.get("PYLOG_DATA_DIR", "pylog-data")).resolve()
    bootstrap = spark_kafka_log.ensure_embedded_broker(data_dir)
    topic = f"main-job-{int(time.time() * 1000)}"
    create_topic(bootstrap, topic, args.partitions)
    print(
        f"embedded broker {bootstrap} (data in {data_dir}); topic {topic} with {args.partitions} partitions"
    )

    spark = _spark("pylog-main-job")
    # No register(): format("pylog") is discovered (pyspark_pylog), and registering it again would make Spark warn
    # that it replaces a statically registered data source. What register() also did, checking that the Python
    # workers can import pylog, stays: a wrong PYSPARK_PYTHON fails here in one line, not in the first task.
    check_worker_python(spark)
    df = (
        spark.range(args.rows)
        .select(
            F.concat(F.lit("user-"), (F.col("id") % 10_000).cast("string")).alias("key"),
            F.sha2(F.col("id").cast("string"), 256).alias("value"),
        )
        .cache()
    )
    df.count()

    started = time.perf_counter()
    (
        df.write.format("pylog")
        .option("topic", topic)
        .option("pylog.dataDir", str(data_dir))
        .option("kafka.compression.type", args.compression)
        .mode("append")
        .save()
    )
    wrote = time.perf_counter() - started

    started = time.perf_counter()
    back = (
        spark.read.format("pylog")
        .option("subscribe", topic)
        .option("pylog.dataDir", str(data_dir))
        .load()
        .select(
            F.col("key").cast("string").alias("key"),
            F.col("value").cast("string").alias("value"),
            "partition",
            "offset",
        )
        .cache()
    )
    total = back.count()
    read = time.perf_counter() - started

    per_partition = {r["partition"]: r["count"] for r in back.groupBy("partition").count().collect()}
    missing = df.exceptAll(back.select("key", "value")).count()
    extra = back.select("key", "value").exceptAll(df).count()
    placement = back.select("key", "partition").distinct().toArrow()
    expected = partitions_for_keys(placement.column("key").combine_chunks(), args.partitions)
    misplaced = int(np.count_nonzero(expected != placement.column("partition").to_numpy()))
    spark.stop()

    print(f"{'partition':>9} {'records':>9}")
    for partition in range(args.partitions):
        print(f"{partition:>9} {per_partition.get(partition, 0):>9}")
    ok = total == args.rows and missing == 0 and extra == 0 and misplaced == 0
    print(
        f"wrote {args.rows:,} rows in {wrote:.2f} s ({args.compression}, acks=all, idempotent), "
        f"read {total:,} back in {read:.2f} s; missing {missing}, extra {extra}, "
        f"keys in the wrong partition {misplaced}: round trip {'OK' if ok else 'FAILED'}"
    )
    print(f"the embedded broker keeps running; stop it with: pylog-broker stop --data-dir {data_dir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
