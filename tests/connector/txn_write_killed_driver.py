"""Run as a script: two transactional batch writes in one Spark driver, killed with their commits interrupted
between the commit intent and the first EndTxn. Started in a new session by the test.

1. The first write (in a thread) stops for good right after writing its commit intent
   (``pylog.test.stallCommitAfterPrepared=0``: ``stalled-<write id>.test`` appears next to the intent).
2. Then the second write's commit SIGKILLs, right after ITS commit intent, this script's process group (this
   Python driver and its Spark JVM) and the committing worker (``pylog.test.killDriverAfterCommitIntent``).

So one driver start leaves two interrupted commits, each with its own intent and open transactions (the test
commits one and aborts the other). The first write's stalled worker may survive in a process group of its own:
the test kills what is left of the session.

Usage: ``python txn_write_killed_driver.py BOOTSTRAP STALLED_TOPIC STALLED_ROWS STALLED_STATE_DIR KILLED_TOPIC
KILLED_ROWS KILLED_STATE_DIR``. Exits 0 only if a commit was NOT interrupted (which the test treats as a failure).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any


def _write(
    spark: Any, bootstrap: str, topic: str, rows: int, state_dir: str, name: str, **faults: str
) -> None:
    # A thread of our own maps to a JVM thread without an active session, where Spark does not look up
    # Python data sources: make the session active there.
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    df = spark.range(0, rows, 1, 2).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    writer = (
        df.write.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.transactional.id", name)
        .option("pylog.transactionStateDir", state_dir)
        # The first write's transactions stay open while the second write runs (a minute or more on a busy
        # machine) and until the test resolves them: the broker must not abort them at the 60 s default.
        .option("kafka.transaction.timeout.ms", "600000")
    )
    for key, value in faults.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def main() -> None:
    bootstrap = sys.argv[1]
    stalled_topic, stalled_rows, stalled_dir = sys.argv[2], int(sys.argv[3]), sys.argv[4]
    killed_topic, killed_rows, killed_dir = sys.argv[5], int(sys.argv[6]), sys.argv[7]
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
    stall = {"pylog.test.stallCommitAfterPrepared": "0"}
    first = threading.Thread(
        target=_write,
        args=(spark, bootstrap, stalled_topic, stalled_rows, stalled_dir, "stalled"),
        kwargs=stall,
        daemon=True,
    )
    first.start()
    deadline = time.monotonic() + 180
    while not list(Path(stalled_dir).glob("stalled-*.test")):
        if not first.is_alive() or time.monotonic() > deadline:
            print("the first write's commit did not stall")
            sys.exit(1)
        time.sleep(0.05)
    kill = {"pylog.test.killDriverAfterCommitIntent": str(os.getpid())}
    _write(spark, bootstrap, killed_topic, killed_rows, killed_dir, "killed", **kill)
    print("commit was not interrupted")


if __name__ == "__main__":
    main()
