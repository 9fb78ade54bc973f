"""Run as a script: a streaming query in a Spark application of its own (its own driver JVM), so a test can
SIGKILL the whole driver mid-query and start it again from the same checkpoint.

The query reads JSON files (``seq long, key string, value string``) from a folder, one file per micro-batch
(``maxFilesPerTrigger=1``: a replayable source, a re-run of a micro-batch reads the same rows), spreads the rows
over two Spark partitions by key (a file is one input split, and the shuffle keeps each map output's order, so
each key's rows stay in ``seq`` order; streaming queries refuse ``sortWithinPartitions``), and writes them with
``writeStream.format("pylog")`` until every file is processed (``trigger(availableNow=True)``).

Usage: ``python stream_in_own_spark_app.py CONFIG_JSON`` with ``{"bootstrap", "topic", "source",
"checkpoint", "options": {...}}``. Prints ``started`` once the query runs and ``done`` when it ended; a query
that failed prints ``failed: <its message on one line>`` and exits 3.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    config = json.loads(sys.argv[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pylog-own-spark-app-stream")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import spark_kafka_log

    spark_kafka_log.register(spark)
    writer = (
        spark.readStream.schema("seq long, key string, value string")
        .option("maxFilesPerTrigger", 1)
        .json(config["source"])
        .repartition(2, "key")
        .select("key", "value")
        .writeStream.format("pylog")
        .option("kafka.bootstrap.servers", config["bootstrap"])
        .option("topic", config["topic"])
        .option("checkpointLocation", config["checkpoint"])
    )
    for key, value in config.get("options", {}).items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    print("started", flush=True)
    try:
        query.awaitTermination()
    except Exception as e:  # the query's failure, as the user would see it
        print("failed: " + " ".join(str(e).split()), flush=True)
        spark.stop()
        sys.exit(3)
    spark.stop()
    print("done", flush=True)


if __name__ == "__main__":
    main()
