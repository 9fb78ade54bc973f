"""Run as a script: the checks that need a Spark application of their own but kill nothing, in ONE driver process
(one JVM: a start costs 15-25 s on a busy 2-core machine), each in a SparkContext of its own settings.

What a check needs from its own application is fixed when a SparkContext starts (``spark.python.use.daemon``,
``PYSPARK_PYTHON``, the master), or is a driver that never imported pylog. PySpark keeps the JVM gateway when a
context stops, so each check stops the previous context and starts its own (``getOrCreate`` with its settings)
in the same JVM: a few seconds instead of a JVM start.

The checks, in this order (the order is part of what they check):

1. ``autoregister``: a session that never calls ``register()`` writes rows through ``format("pylog")`` and reads
   them back, relying only on PySpark's discovery of the installed ``pyspark_pylog`` module; result: the values
   read back and whether ``spark_kafka_log`` was imported in this process before the first ``format("pylog")``
   (it must not be: discovery happens in Spark's own Python worker). FIRST: nothing has imported pylog yet, and
   Spark looks the Python data sources up once per JVM, on the first use.
2. ``daemon_off``: reads with filter pushdown off and on with the Python worker daemon off
   (:func:`read_off_and_on`; the daemon-on case runs it in the suite's session); result: per pushdown setting the
   rows of ``partition = 0 AND offset >= 2`` and the ranges the read tasks read, and the context's daemon setting.
3. ``stage_retry``: writes whose write stage Spark re-attempts after a FetchFailed (:func:`stage_retry_writes`).
4. ``bare_python``: ``register()`` with a worker interpreter that cannot import pylog (``PYSPARK_PYTHON`` a bare
   venv); result: the one line it failed with (``ERROR <type>: <message>``) or ``REGISTERED``. LAST: its workers
   cannot run pylog.

Every context uses one private ``spark.local.dir`` (``WORKDIR/spark-local``): the stage-retry fault deletes the
shuffle files there, and Spark may keep the first context's local root directories for the JVM's life.

Usage: ``python checks_in_own_spark_app.py CONFIG_JSON`` with ``{"bootstrap", "workdir", "autoregister":
{"topic"}, "daemon_off": {"topic"}, "stage_retry": {"rows", "topics": {MODE: TOPIC}}, "bare_python":
{"python"}}`` (a check whose key is absent is not run). Prints one JSON line: per check its result, or
``{"error": "<type>: <message>"}`` when the check raised (the next checks still run); the seconds of each check
go to stderr.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ORDER = ("autoregister", "daemon_off", "stage_retry", "bare_python")


def read_off_and_on(spark: Any, bootstrap: str, topic: str, metrics: str) -> dict[str, Any]:
    """Per pushdown setting ("off", "on"): rows of ``partition = 0 AND offset >= 2`` and the ranges read
    (``[partition, start, end]``, from ``pylog.metricsDir``), which shows whether the filters were pushed."""
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


def check_off_and_on(result: dict[str, Any], placed: dict[bytes, int], in_p0: int) -> None:
    """Assert what :func:`read_off_and_on` must find in a topic whose keys went to ``placed`` (key -> partition)
    with ``in_p0`` records in partition 0."""
    assert result["off"]["rows"] == result["on"]["rows"] == in_p0 - 2
    # Off: every partition is read whole; on: only partition 0 from offset 2 (the filters were pushed).
    assert sorted(p for p, _, _ in result["off"]["ranges"]) == sorted(set(placed.values()))
    assert result["on"]["ranges"] == [[0, 2, in_p0]]


def stage_retry_writes(
    spark: Any, bootstrap: str, rows: int, workdir: str, topics: dict[str, str]
) -> dict[str, Any]:
    """Per mode (``transactional``, ``idempotent``) a write of ``rows`` rows to its topic whose write stage Spark
    re-attempts; per mode whether the fault ran (its marker files), the write's seconds and, for a write that
    failed, its error lines.

    Plan of each write: ``range`` (8 map tasks) -> shuffle into 2 partitions -> ``write.format("pylog")`` with the
    test-only ``pylog.test.loseShuffleAfterRequests=3``: the first attempt of Spark partition 0, after 3 of its
    requests were acknowledged, deletes every shuffle file and its Python worker exits at once, as a crash would
    (once per write): its transaction stays open, its requests may be in flight. Spark retries the task
    (attempt 1), whose shuffle read finds the map output gone: FetchFailed. The map stage runs again and the write
    stage is re-attempted; its tasks' attempt numbers start at 0 again, and partition 1's attempt of the old stage
    attempt may still be running meanwhile (a zombie whose copy runs in the new stage attempt). The session's
    master allows 4 attempts per task."""
    local_dir = spark.sparkContext.getConf().get("spark.local.dir")
    out: dict[str, Any] = {}
    for mode, topic in topics.items():
        marker = os.path.join(local_dir, "**", "pylog-test-lost-shuffle-*")
        before = set(glob.glob(marker, recursive=True))
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
        after = set(glob.glob(marker, recursive=True))
        out[mode] = {"faulted": len(after - before), "seconds": time.monotonic() - started, "error": error}
    return out


def _session(workdir: str, master: str, name: str, **conf: str) -> Any:
    """Stop the active context, if any, and start one with these settings (in the same JVM)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    builder = (
        SparkSession.builder.master(master)
        .appName(f"pylog-own-spark-app-{name}")
        .config("spark.ui.enabled", "false")
        .config("spark.local.dir", os.path.join(workdir, "spark-local"))
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def autoregister(config: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    spark = _session(config["workdir"], "local[1]", "autoregister")
    imported_before = "spark_kafka_log" in sys.modules
    bootstrap, topic = config["bootstrap"], check["topic"]
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
    return {"values": sorted(r.v for r in back), "imported_before": imported_before}


def daemon_off(config: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    spark = _session(config["workdir"], "local[1]", "daemon-off", **{"spark.python.use.daemon": "false"})
    import spark_kafka_log

    spark_kafka_log.register(spark)
    metrics = os.path.join(config["workdir"], "daemon-off-metrics")
    out = read_off_and_on(spark, config["bootstrap"], check["topic"], metrics)
    out["daemon"] = spark.sparkContext.getConf().get("spark.python.use.daemon")
    return out


def stage_retry(config: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    spark = _session(
        config["workdir"],
        "local[2,4]",  # 4 attempts per task
        "stage-retry",
        **{"spark.sql.shuffle.partitions": "2", "spark.sql.adaptive.enabled": "false"},
    )
    import spark_kafka_log

    spark_kafka_log.register(spark)
    workdir = os.path.join(config["workdir"], "stage-retry")
    return stage_retry_writes(spark, config["bootstrap"], int(check["rows"]), workdir, check["topics"])


def bare_python(config: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    os.environ["PYSPARK_PYTHON"] = check["python"]
    try:
        spark = _session(config["workdir"], "local[1]", "bare-python")
    finally:
        os.environ["PYSPARK_PYTHON"] = sys.executable
    import spark_kafka_log

    try:
        spark_kafka_log.register(spark)
    except Exception as exc:
        return {"line": f"ERROR {type(exc).__name__}: {exc}"}
    return {"line": "REGISTERED"}


CHECKS = {
    "autoregister": autoregister,
    "daemon_off": daemon_off,
    "stage_retry": stage_retry,
    "bare_python": bare_python,
}


def main() -> None:
    config = json.loads(sys.argv[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    results: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    for name in ORDER:
        if name not in config:
            continue
        started = time.monotonic()
        try:
            results[name] = CHECKS[name](config, config[name])
        except Exception as exc:  # reported, judged by the test; the next checks still run
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:2000]}"}
        seconds[name] = round(time.monotonic() - started, 1)
    # What each check took (its context's start included), on stderr: the first one also starts the JVM.
    print(f"seconds per check: {seconds}", file=sys.stderr, flush=True)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
