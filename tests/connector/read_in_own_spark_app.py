"""Run as a script: reads with filter pushdown off and on in a Spark application of its own, with the Python
worker daemon on or off (``spark.python.use.daemon`` is fixed when a SparkContext starts, so the suite's shared
SparkSession cannot flip it; the daemon-on case runs :func:`read_off_and_on` in the suite's session). Prints one
JSON line: per pushdown setting ("off", "on") the row count of ``partition = 0 AND offset >= 2`` and the ranges
the read tasks actually read (``[partition, start, end]``, from ``pylog.metricsDir``), which shows whether the
filters were pushed.

Usage: ``python read_in_own_spark_app.py BOOTSTRAP TOPIC DAEMON(true|false) METRICS_DIR``.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path
from typing import Any


def read_off_and_on(spark: Any, bootstrap: str, topic: str, metrics: str) -> dict[str, Any]:
    """Per pushdown setting ("off", "on"): rows of ``partition = 0 AND offset >= 2`` and the ranges read."""
    out = {}
    saved = spark.conf.get("spark.sql.python.filterPushdown.enabled", None)
    try:
        for enabled in ("false", "true"):
            spark.conf.set("spark.sql.python.filterPushdown.enabled", enabled)
            directory = os.path.join(metrics, enabled)
            df = (
                spark.read.format("pylog")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("pylog.metricsDir", directory)
            )
            rows = df.load().where("partition = 0 AND offset >= 2").count()
            ranges = sorted(
                [m["partition"], m["start"], m["end"]]
                for m in (
                    json.loads(Path(p).read_text()) for p in glob.glob(os.path.join(directory, "read-*.json"))
                )
            )
            out["on" if enabled == "true" else "off"] = {"rows": rows, "ranges": ranges}
    finally:
        if saved is None:
            spark.conf.unset("spark.sql.python.filterPushdown.enabled")
        else:
            spark.conf.set("spark.sql.python.filterPushdown.enabled", saved)
    return out


def main() -> None:
    bootstrap, topic, daemon, metrics = sys.argv[1:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("pylog-own-spark-app-read")
        .config("spark.ui.enabled", "false")
        .config("spark.python.use.daemon", daemon)
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import spark_kafka_log

    spark_kafka_log.register(spark)
    out = read_off_and_on(spark, bootstrap, topic, metrics)
    spark.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
