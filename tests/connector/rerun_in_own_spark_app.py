"""Run as a script: pylog writes whose write stage Spark re-attempts after a FetchFailed, in a Spark application
of its own (its ``spark.local.dir`` must be a private folder: the fault deletes the shuffle files there).

Plan of each write: ``range`` (8 map tasks) -> shuffle into 2 partitions -> a pass-through ``mapInArrow`` that
routes Spark partition ``p`` to Kafka partition ``p`` -> ``write.format("pylog")``. The fault, once per write
(a marker file): the first attempt of Spark partition 0 passes rows on until the broker holds at least 500 of
them (Kafka partition 0's high watermark, which counts records of open transactions too), then deletes every
shuffle file under ``spark.local.dir`` and fails. Spark retries the task (attempt 1), whose shuffle read finds the map outputs
gone: FetchFailed. The map stage runs again and the write stage is re-attempted; its tasks' attempt numbers
start at 0 again, and partition 1's attempt of the old stage attempt may still be running meanwhile (a zombie
whose copy runs in the new stage attempt).

Usage: ``python rerun_in_own_spark_app.py BOOTSTRAP ROWS WORKDIR MODE=TOPIC ...`` with MODE ``transactional``
or ``idempotent``. Prints one JSON line: per mode the fault's record (rows the failed attempt passed on,
shuffle files deleted) and the write's seconds; a write that fails is reported by its error lines.
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
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import spark_kafka_log

    spark_kafka_log.register(spark)
    out: dict[str, object] = {}
    for mode, topic in writes:
        marker = os.path.join(workdir, f"fault-{mode}.json")

        def lose_shuffle(batches, topic=topic, marker=marker):  # type: ignore[no-untyped-def]
            import pyarrow as pa
            from confluent_kafka import Consumer, TopicPartition
            from pyspark import TaskContext

            part = TaskContext.get().partitionId()
            faulty = part == 0 and not os.path.exists(marker)
            peek = Consumer({"bootstrap.servers": bootstrap, "group.id": "peek"}) if faulty else None
            passed = 0
            for batch in batches:
                yield batch.append_column("partition", pa.array([part] * batch.num_rows, pa.int32()))
                passed += batch.num_rows
                # The writer sends as more rows come: keep passing them on until the broker holds 500.
                if peek is None or peek.get_watermark_offsets(TopicPartition(topic, 0), 10)[1] < 500:
                    continue
                peek.close()
                files = glob.glob(os.path.join(local_dir, "**", "shuffle_*"), recursive=True)
                for name in files:
                    os.unlink(name)
                with open(marker, "w") as f:
                    json.dump({"passed": passed, "deleted": len(files)}, f)
                raise RuntimeError("injected: the shuffle files were deleted")
            if peek is not None:
                peek.close()

        df = (
            spark.range(0, rows, 1, 8)
            .repartition(2, "id")
            # 1 KB values: the output of the UDF below exceeds the socket buffers, so it advances only as
            # fast as the writer takes rows (with tiny rows it could finish before the writer sent any).
            .selectExpr("cast(id as string) as key", "concat(cast(id as string), repeat('.', 1000)) as value")
        )
        schema = "key string, value string, partition int"
        writer = (
            df.mapInArrow(lose_shuffle, schema)
            .write.format("pylog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("kafka.batch.size", "16384")  # many small requests: the broker holds rows early
            .option("kafka.linger.ms", "0")
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
        fault = None
        if os.path.exists(marker):
            with open(marker) as f:
                fault = json.load(f)
        out[mode] = {"fault": fault, "seconds": time.monotonic() - started, "error": error}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
