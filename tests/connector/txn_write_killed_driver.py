"""Run as a script: a transactional batch write whose driver is SIGKILLed between the commit intent and the
first EndTxn (the test-only ``pylog.test.killDriverAfterCommitIntent``). Started in a new session by the test:
the fault kills this script's process group (this Python driver and its Spark JVM) and the committing worker.

Usage: ``python txn_write_killed_driver.py BOOTSTRAP TOPIC ROWS TRANSACTION_STATE_DIR``. Exits 0 only if the
commit was NOT interrupted (which the test treats as a failure).
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    bootstrap, topic, rows, state_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pylog-txn-killed-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import spark_kafka_log

    spark_kafka_log.register(spark)
    df = spark.range(0, rows, 1, 2).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    (
        df.write.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.transactional.id", "killed")
        .option("pylog.transactionStateDir", state_dir)
        .option("pylog.test.killDriverAfterCommitIntent", str(os.getpid()))
        .mode("append")
        .save()
    )
    print("commit was not interrupted")


if __name__ == "__main__":
    main()
