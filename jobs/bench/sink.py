"""Benchmark section "sink": the exactly-once streaming sink (``writeStream.format("pylog")``).

Figures:

  * commit-protocol overhead per micro-batch: from the end of the micro-batch's last task to its ``committed``
    sink-log entry, read from the sink log (``tasksEndedAtMs``, ``committedAtMs``); median over the
    micro-batches after the first, target <= 50 ms. Split at ``commitCalledAtMs``: Spark's part (ending the job,
    a driver Python worker, ``streamWriter()`` for the commit) and ``commit()``'s (the still-open check, the
    ``prepared`` entry, one EndTxn per task, the ``committed`` entry; two fsynced file replacements). A query over
    N one-file micro-batches (N = 30, quick 3) of 2,000 rows each in the active Spark session (else ``local[2]``),
    to the embedded broker of a temporary data directory;
  * (full runs only) the kill-and-restart check at full size: the query over 20 micro-batches in a driver of
    its own (:mod:`jobs.bench.sink_chaos`), SIGKILLed 6 times at seeded points and restarted from its
    checkpoint; the figure is the count of rows lost + rows duplicated + keys out of order that a
    read_committed consumer finds (target = 0). Takes a few minutes.

Run with ``python -m jobs.bench sink``.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

from jobs.bench.common import Figure, Result, spark_session
from jobs.bench.sink_chaos import judge, run_with_kills, sink_entries, write_input

__all__ = ["SECTION", "run"]

SECTION = "sink"
TARGET_OVERHEAD_MS = 50.0
CHAOS_FILES, CHAOS_ROWS, CHAOS_KILLS, CHAOS_PARTITIONS = 20, 500, 6, 3


def _figure(values: list[float]) -> Figure:
    return Figure(statistics.median(values), min(values), max(values))


def _overhead(quick: bool, work: str) -> list[Result]:
    import spark_kafka_log
    from broker_runtime.launch import ensure_embedded_broker, stop_embedded_broker

    batches = 3 if quick else 30
    spark = spark_session("pylog-bench-stream", "local[2]", **{"spark.sql.shuffle.partitions": "2"})
    spark_kafka_log.register(spark)
    data_dir = os.path.join(work, "pylog-data")
    source = os.path.join(work, "in")
    checkpoint = os.path.join(work, "checkpoint")
    os.makedirs(source)
    write_input(source, batches, 2000)
    try:
        ensure_embedded_broker(data_dir)
        query = (
            spark.readStream.schema("seq long, key string, value string")
            .option("maxFilesPerTrigger", 1)
            .json(source)
            .repartition(2, "key")
            .select("key", "value")
            .writeStream.format("pylog")
            .option("topic", f"bench-stream-{uuid.uuid4().hex[:8]}")
            .option("pylog.dataDir", data_dir)
            .option("checkpointLocation", checkpoint)
            # The commit's overhead is measured, not the timeout: a loaded machine can take over a minute
            # per micro-batch, and the default 60 s would abort its transactions (the sink then fails it).
            .option("kafka.transaction.timeout.ms", "600000")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"the benchmark's streaming query failed: {query.exception()}")
    finally:
        stop_embedded_broker(data_dir)
    entries = sink_entries(checkpoint)[1:] or sink_entries(checkpoint)  # the first pays for warm-up
    return _split(entries)


def _split(entries: list[dict[str, Any]]) -> list[Result]:
    """The figures of :func:`_overhead` from the sink-log entries (see ``spark_kafka_log.exactly_once.sink_log``'s stamps)."""

    def span(start: str, end: str) -> list[float]:
        return [float(e[end] - e[start]) for e in entries if e.get(start, -1) > 0 and e.get(end, -1) > 0]

    total = span("tasksEndedAtMs", "writtenAtMs")
    median = statistics.median(total)
    results = [
        Result.measured(
            SECTION,
            f"last task end -> micro-batch committed (recorded), {len(entries)} micro-batches",
            _figure(total),
            "ms",
            f"<= {TARGET_OVERHEAD_MS:.0f} ms",
            median <= TARGET_OVERHEAD_MS,
        ),
        Result.measured(
            SECTION,
            "last task end -> rows visible to read_committed (last EndTxn answered)",
            _figure(span("tasksEndedAtMs", "transactionsCommittedAtMs")),
            "ms",
        ),
    ]
    parts = [
        (
            "of it: Spark, last task end -> streamWriter() called for the commit",
            "tasksEndedAtMs",
            "writerCalledAtMs",
        ),
        (
            "of it: streamWriter() (options, topic check, sink-log read)",
            "writerCalledAtMs",
            "writerReadyAtMs",
        ),
        ("of it: writer built -> commit() called", "writerReadyAtMs", "commitCalledAtMs"),
        ("of it: commit() -> prepared (sink-log read, still-open check)", "commitCalledAtMs", "preparedAtMs"),
        ("of it: prepared written + EndTxn per task", "preparedAtMs", "transactionsCommittedAtMs"),
        ("of it: committed written", "transactionsCommittedAtMs", "writtenAtMs"),
    ]
    for label, start, end in parts:
        values = span(start, end)
        if values:
            results.append(Result.measured(SECTION, label, _figure(values), "ms"))
    started = [e for e in entries if e.get("workerStartedAtMs", -1) > 0]
    if started:  # a commit worker that started before the micro-batch's tasks ended was reused
        reused = sum(e["workerStartedAtMs"] < e["tasksEndedAtMs"] for e in started)
        label = "micro-batches whose commit ran in a reused driver Python worker"
        results.append(Result(SECTION, label, float(reused), f"of {len(started)}"))
    return results


def _chaos(work: str) -> Result:
    from broker_runtime.launch import broker_process, create_topic

    seed = random.randrange(2**31)
    with broker_process(os.path.join(work, "broker"), overrides={"num.partitions": "3"}) as bootstrap:
        topic = f"bench-chaos-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions=CHAOS_PARTITIONS)
        config: dict[str, Any] = {
            "bootstrap": bootstrap,
            "topic": topic,
            "source": os.path.join(work, "chaos-in"),
            "checkpoint": os.path.join(work, "chaos-checkpoint"),
            # A prepared micro-batch must outlive a driver restart (30-60 s on a busy machine).
            "options": {
                "pylog.dataDir": os.path.join(work, "chaos-data"),
                "kafka.transaction.timeout.ms": "600000",
            },
        }
        os.makedirs(config["source"])
        total = write_input(config["source"], CHAOS_FILES, CHAOS_ROWS)
        landed, final = run_with_kills(config, Path(work), CHAOS_KILLS, CHAOS_FILES, seed)
        if final.proc.returncode != 0:
            raise RuntimeError(f"the restarted query failed: {final.tail()}")
        outcome = judge(bootstrap, topic, CHAOS_PARTITIONS, total)
    print(f"{SECTION:<10} kill-and-restart run: seed {seed}, kills landed {landed}; {outcome}", flush=True)
    wrong = len(outcome.missing) + len(outcome.duplicated) + len(outcome.out_of_order)
    return Result(
        SECTION,
        f"{CHAOS_FILES} micro-batches, {CHAOS_KILLS} driver SIGKILLs: rows lost+duplicated, keys out of order",
        float(wrong),
        "rows/keys",
        "= 0",
        wrong == 0,
    )


def run(quick: bool) -> list[Result]:
    work = tempfile.mkdtemp(prefix="pylog-bench-stream-")
    try:
        results = _overhead(quick, work)
        if not quick:
            results.append(_chaos(work))
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    for result in run(quick=False):
        print(result.line())
