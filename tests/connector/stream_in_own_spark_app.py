"""Run as a script: a streaming query reading a pylog topic in a Spark application of its own (a driver the crash
test can SIGKILL). Each micro-batch is written to ``OUT_DIR/batch-<id>.json`` (``[[partition, offset, value], ...]``,
replaced atomically, so a batch Spark replays after a crash overwrites its own file: an idempotent sink).

It reads from the earliest offsets with ``maxOffsetsPerTrigger=100`` and a 200 ms processing-time trigger, and
runs until killed (the test then restarts the query on the same checkpoint in its own Spark session).

Where it is killed is a step, not a moment: in micro-batch PAUSE_BATCH it stops for good ``before`` or ``after``
writing the batch's file (Spark has logged the batch's offsets, not yet its commit), after creating the file
PAUSED, so the test kills it exactly there and a restart must replay that micro-batch.

Usage: ``python stream_in_own_spark_app.py BOOTSTRAP TOPIC CHECKPOINT OUT_DIR PAUSE_BATCH before|after PAUSED``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _pause(paused: str) -> None:
    """Tell the test we stopped (the file ``paused``) and wait to be killed."""
    Path(paused).touch()
    while True:
        time.sleep(3600)


def main() -> None:
    bootstrap, topic, checkpoint, out_dir, pause_batch, where, paused = sys.argv[1:8]
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
        if batch_id == int(pause_batch) and where == "before":
            _pause(paused)
        rows = [
            [r.partition, r.offset, r.value.decode()]
            for r in df.select("partition", "offset", "value").collect()
        ]
        path = os.path.join(out_dir, f"batch-{batch_id}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(rows, f)
        os.replace(path + ".tmp", path)
        if batch_id == int(pause_batch) and where == "after":
            _pause(paused)

    (
        spark.readStream.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
        .awaitTermination()
    )


if __name__ == "__main__":
    main()
