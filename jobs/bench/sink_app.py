"""Run as a script: one or more streaming queries in a Spark application of their own (their own driver JVM), so
a test can SIGKILL the whole driver mid-query and start it again from the same checkpoint.

Each query reads JSON files (``seq long, key string, value string``) from a folder, one file per micro-batch
(``maxFilesPerTrigger=1``: a replayable source, a re-run of a micro-batch reads the same rows), spreads the rows
over two Spark partitions by key (a file is one input split, and the shuffle keeps each map output's order, so
each key's rows stay in ``seq`` order; streaming queries refuse ``sortWithinPartitions``), and writes them with
``writeStream.format("pylog")`` until every file is processed (``trigger(availableNow=True)``). The same query
runs in any Spark session through :func:`start_query` (a test restarts a killed driver's query in its own
session that way).

Usage: ``python sink_app.py CONFIG_JSON`` with ``{"bootstrap", "topic", "source", "checkpoint", "options":
{...}}``, or a JSON list of such configs: the queries then run side by side in the one driver, started in list
order; a config's optional ``"startAfter": [PATH, ...]`` starts its query only once those files exist (written by
the queries before it, e.g. a test's stall). Prints
``started`` once every query runs and ``done`` when all ended; a query that failed prints ``failed: <its
message on one line>`` and exits 3.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def start_query(spark: Any, config: dict[str, Any]) -> Any:
    """Start the query of ``config`` in ``spark`` (pylog registered there); the StreamingQuery."""
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
    return writer.trigger(availableNow=True).start()


def main() -> None:
    loaded = json.loads(sys.argv[1])
    configs = loaded if isinstance(loaded, list) else [loaded]
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
    queries: list[Any] = []
    for config in configs:
        for path in config.get("startAfter", []):
            while not os.path.exists(path):
                failed = next((q for q in queries if q.exception() is not None), None)
                if failed is not None:  # it will never write the file awaited
                    print("failed: " + " ".join(str(failed.exception()).split()), flush=True)
                    spark.stop()
                    sys.exit(3)
                time.sleep(0.1)
        queries.append(start_query(spark, config))
    print("started", flush=True)
    try:
        for query in queries:
            query.awaitTermination()
    except Exception as e:  # the query's failure, as the user would see it
        print("failed: " + " ".join(str(e).split()), flush=True)
        spark.stop()
        sys.exit(3)
    spark.stop()
    print("done", flush=True)


if __name__ == "__main__":
    main()
