"""Run as a script: a new Spark application that never calls ``register()`` writes rows through
``format("pylog")`` and reads them back, relying only on PySpark's discovery of the installed ``pyspark_pylog``
module. Prints one JSON line: the values read back and whether ``spark_kafka_log`` was imported in this driver
process before the first ``format("pylog")`` call (it must not be: discovery happens in Spark's own Python
worker).

Usage: ``python autoregister_in_own_spark_app.py BOOTSTRAP TOPIC``.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    bootstrap, topic = sys.argv[1], sys.argv[2]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("pylog-own-spark-app-autoregister")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    imported_before = "spark_kafka_log" in sys.modules
    rows = spark.createDataFrame([("a",), ("b",), ("c",)], "value string")
    rows.write.format("pylog").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode(
        "append"
    ).save()
    back = (
        spark.read.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .selectExpr("cast(value as string) AS v")
        .collect()
    )
    spark.stop()
    print(json.dumps({"values": sorted(r.v for r in back), "imported_before": imported_before}))


if __name__ == "__main__":
    main()
