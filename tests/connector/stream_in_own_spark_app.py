"""Run as a script: a streaming query reading a pylog topic in a Spark application of its own (a driver the crash
test can SIGKILL). Each micro-batch is written to ``OUT_DIR/batch-<id>.json`` (``[[partition, offset, value], ...]``,
replaced atomically, so a batch Spark replays after a crash overwrites its own file: an idempotent sink).

``MODE``: ``run`` -- ``maxOffsetsPerTrigger=100``, a 200 ms processing-time trigger, runs until killed;
``drain`` -- Trigger.AvailableNow on the same checkpoint, then prints ``done`` and exits.

Usage: ``python stream_in_own_spark_app.py BOOTSTRAP TOPIC CHECKPOINT OUT_DIR MODE``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def main() -> None:
    bootstrap, topic, checkpoint, out_dir, mode = sys.argv[1:6]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("pylog-own-spark-app-stream")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import spark_kafka_log

    spark_kafka_log.register(spark)

    def write_batch(df: Any, batch_id: int) -> None:
        rows = [
            [r.partition, r.offset, r.value.decode()]
            for r in df.select("partition", "offset", "value").collect()
        ]
        path = os.path.join(out_dir, f"batch-{batch_id}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(rows, f)
        os.replace(path + ".tmp", path)

    reader = (
        spark.readStream.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if mode == "run":
        reader = reader.option("maxOffsetsPerTrigger", "100")
    writer = reader.load().writeStream.foreachBatch(write_batch).option("checkpointLocation", checkpoint)
    if mode == "run":
        writer.trigger(processingTime="200 milliseconds").start().awaitTermination()
    else:
        writer.trigger(availableNow=True).start().awaitTermination()
        print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
