"""Run as a script: pylog writes whose write stage Spark re-attempts after a FetchFailed, in a Spark application
of its own (its ``spark.local.dir`` must be a private folder: the fault deletes the shuffle files there).

Plan of each write: ``range`` (8 map tasks) -> shuffle into 2 partitions -> ``write.format("pylog")`` with the
test-only ``pylog.test.loseShuffleAfterRequests=3``: the first attempt of Spark partition 0, after 3 of its
requests were acknowledged, deletes every shuffle file and its Python worker exits at once, as a crash would
(once per write): its transaction stays open, its requests may be in flight. Spark retries the task
(attempt 1), whose shuffle read finds the map output gone: FetchFailed. The map stage runs again and the write
stage is re-attempted; its tasks' attempt numbers start at 0 again, and partition 1's attempt of the old stage
attempt may still be running meanwhile (a zombie whose copy runs in the new stage attempt).

Usage: ``python rerun_in_own_spark_app.py BOOTSTRAP ROWS WORKDIR MODE=TOPIC ...`` with MODE ``transactional``
or ``idempotent``. Prints one JSON line: per mode whether the fault ran (its marker file), the write's seconds
and, for a write that failed, its error lines.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time


def main() -> None:
    bootstrap, rows, workdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    writes = [arg.split("=", 1) for arg in sys.argv[4:]]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    local_dir = os.path.join(workdir, "spark-local")
    os.makedirs(local_dir, exist_ok=True)
    spark = (
        SparkSession.builder.master("local[2,4]")  # 4 attempts per task
        .appName("pylog-rerun-in-own-spark-app")
        .config("spark.ui.enabled", "false")
        .config("spark.local.dir", local_dir)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import spark_kafka_log

    spark_kafka_log.register(spark)
    out: dict[str, object] = {}
    for mode, topic in writes:
        before = set(glob.glob(os.path.join(local_dir, "**", "pylog-test-lost-shuffle-*"), recursive=True))
        df = (
            spark.range(0, rows, 1, 8)
            .repartition(2, "id")
            .selectExpr("cast(id as string) as key", "concat(cast(id as string), repeat('.', 100)) as value")
        )
        writer = (
            df.write.format("pylog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("kafka.batch.size", "16384")  # many requests per task
            .option("pylog.test.loseShuffleAfterRequests", "3")
            .option("pylog.producerStateDir", os.path.join(workdir, "producer-state"))
            .option("pylog.transactionStateDir", os.path.join(workdir, "transactions"))
        )
        if mode == "transactional":
            writer = writer.option("kafka.transactional.id", "rerun")
        started = time.monotonic()
        try:
            writer.mode("append").save()
            error = None
        except Exception as exc:  # reported, judged by the test
            error = [line for line in str(exc).splitlines() if "Error" in line][-3:]
        after = set(glob.glob(os.path.join(local_dir, "**", "pylog-test-lost-shuffle-*"), recursive=True))
        out[mode] = {"faulted": len(after - before), "seconds": time.monotonic() - started, "error": error}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
