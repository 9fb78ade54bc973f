"""The Spark side of the "anchors" section: one connector's write, batch read and AvailableNow stream read of the
same DataFrames, timed in one Spark session. Run as a child process by :mod:`jobs.bench.anchors`
(``python anchors_spark.py CONFIG_JSON``), or called in-process by its quick form (:func:`measure`).

Why a child process: Spark's ``format("kafka")`` needs its jars on the driver's classpath when the session
starts (``spark.jars``), and when Maven does not serve spark-sql-kafka for the installed PySpark's version it runs
under another PySpark (a separate virtualenv). So this file imports nothing of pylog unless the config asks for
``format("pylog")``, and prints ONE line of JSON on stdout (its last line): the config's ``targets`` with the run
times in seconds of each step.

Config (JSON): ``format`` (``kafka`` or ``pylog``), ``rows``, ``partitions`` (of the DataFrames and the
topics), ``kinds`` (``incompressible``/``compressible``), ``repeat`` and ``warmup`` (runs per step),
``jars`` (``spark.jars``, may be empty), ``targets``: a list of ``{"name", "options"}`` (the connector options of
a broker: ``kafka.bootstrap.servers``, or ``pylog.dataDir`` for pylog's embedded broker), ``topics``: per
target name and kind, the names of fresh topics to write (``warmup + repeat`` each, created by the caller), and
``work``: a directory for the stream checkpoints.

Steps, per target and kind, each run on its own topic written in that run:
  * write: ``df.write.format(F)`` with ``kafka.acks=all``, ``kafka.enable.idempotence=true`` and
    ``kafka.compression.type=lz4`` (everything else at the connector's default);
  * read: ``spark.read.format(F)`` of that topic from earliest to latest into Spark's ``noop`` sink (every
    column materialised, nothing kept);
  * stream: ``spark.readStream.format(F)`` from earliest with ``Trigger.AvailableNow`` into ``noop``, until it
    stops by itself; besides its run time (``stream``) two parts of it: ``stream_start``, from ``start()`` to the
    start of its first micro-batch (the query's start: for a Python source, Spark's fresh interpreter that
    serves the source's calls, then the starting offsets), and ``stream_batches``, the sum of its micro-batches'
    ``triggerExecution`` (Spark's progress).
The DataFrames are N rows of a 16-byte key and a 100-byte value in ``partitions`` partitions, cached and counted
before any timing; ``incompressible`` keys and values are cut from SHA-2 digests, ``compressible`` ones are the
same digests as hex text (as the "writer" section's).
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

KINDS = {
    "incompressible": (
        "substr(unhex(sha2(cast(id as string), 256)), 1, 16) as key",
        "substr(concat(unhex(sha2(cast(id as string), 512)), unhex(sha2(cast(-id as string), 512))), 1, 100) "
        "as value",
    ),
    "compressible": (
        "cast(substr(sha2(cast(id as string), 256), 1, 16) as binary) as key",
        "cast(substr(sha2(cast(id as string), 512), 1, 100) as binary) as value",
    ),
}
#: What :func:`measure` times per run (see the module docstring).
STEPS = ("write", "read", "stream", "stream_start", "stream_batches")
#: The producer settings both connectors get (Kafka's names, Spark's ``kafka.`` prefix).
WRITE_OPTIONS = {"kafka.acks": "all", "kafka.enable.idempotence": "true", "kafka.compression.type": "lz4"}
#: The session settings both connectors run under.
SESSION = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "2g",
}


def session(jars: str) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("pylog-bench-anchors")
    for key, value in {**SESSION, **({"spark.jars": jars} if jars else {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def measure(spark: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Run times (s) per target, kind and step: ``{target: {kind: {"write": [...], "read": [...], "stream":
    [...], "stream_start": [...], "stream_batches": [...]}}}`` (warm-up runs left out)."""
    fmt = config["format"]
    rows, parts = int(config["rows"]), int(config["partitions"])
    runs = int(config["warmup"]) + int(config["repeat"])
    frames = {k: spark.range(0, rows, 1, parts).selectExpr(*KINDS[k]).cache() for k in config["kinds"]}
    out: dict[str, Any] = {}
    try:
        for df in frames.values():
            if df.count() != rows:
                raise RuntimeError("the benchmark DataFrame lost rows")
        for target in config["targets"]:
            name, options = target["name"], target["options"]
            per_kind: dict[str, Any] = {}
            for kind, df in frames.items():
                times: dict[str, list[float]] = {step: [] for step in STEPS}
                topics = config["topics"][name][kind]
                if len(topics) < runs:
                    raise ValueError(f"{name}/{kind}: {len(topics)} topics for {runs} runs")
                for i in range(runs):
                    topic = topics[i]
                    t = _write(df, fmt, options, topic)
                    r = _read(spark, fmt, options, topic)
                    s, start, batches = _stream(
                        spark, fmt, options, topic, os.path.join(config["work"], f"cp-{name}-{topic}")
                    )
                    if i >= int(config["warmup"]):
                        for step, value in zip(STEPS, (t, r, s, start, batches), strict=True):
                            times[step].append(value)
                per_kind[kind] = times
            out[name] = per_kind
    finally:
        for df in frames.values():
            df.unpersist()
    return out


def _with(io: Any, options: dict[str, str]) -> Any:
    for key, value in options.items():
        io = io.option(key, value)
    return io


def _write(df: Any, fmt: str, options: dict[str, str], topic: str) -> float:
    t0 = time.perf_counter()
    _with(df.write.format(fmt), {**options, **WRITE_OPTIONS, "topic": topic}).mode("append").save()
    return time.perf_counter() - t0


def _read(spark: Any, fmt: str, options: dict[str, str], topic: str) -> float:
    t0 = time.perf_counter()
    reader = _with(spark.read.format(fmt), {**options, "subscribe": topic, "startingOffsets": "earliest"})
    reader.option("endingOffsets", "latest").load().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def _stream(
    spark: Any, fmt: str, options: dict[str, str], topic: str, checkpoint: str
) -> tuple[float, float, float]:
    """(run time, start() to the first micro-batch's start, time in micro-batches), in seconds."""
    started_at = time.time()
    t0 = time.perf_counter()
    source = _with(
        spark.readStream.format(fmt), {**options, "subscribe": topic, "startingOffsets": "earliest"}
    )
    query = (
        source.load()
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the AvailableNow stream read of {topic} failed: {query.exception()}")
    elapsed = time.perf_counter() - t0
    progress = query.recentProgress
    if not progress:
        raise RuntimeError(f"the AvailableNow stream read of {topic} reported no micro-batch")
    # The progress timestamp is when the trigger began (UTC, milliseconds).
    first = datetime.strptime(progress[0]["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    in_batches = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    return elapsed, first.timestamp() - started_at, in_batches


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = session(config.get("jars", ""))
    if config["format"] == "pylog":
        import spark_kafka_log

        spark_kafka_log.register(spark)
    import pyspark

    result = {"spark": pyspark.__version__, "times": measure(spark, config)}
    spark.stop()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
