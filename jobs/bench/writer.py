"""Benchmark section "writer": ``df.write.format("pylog")`` against Parquet and a hand-written producer loop.

Figures (medians of repeated runs after one warm-up, one local Spark session: the active one, else
``local[2]``; ONE cached
DataFrame of N rows: 16-byte key, 100-byte value, 2 partitions; N = 2,000,000, quick mode 20,000):

  * ``df.write.parquet`` of the DataFrame (the reference);
  * pylog write, acks=1, no compression, to the embedded broker (zero configuration apart from a temporary
    ``pylog.dataDir``); target: parquet time / pylog time >= 1.0 (pylog at least as fast as Parquet);
  * pylog write with acks=all (idempotent, the default) and with lz4 compression;
  * pylog write in transactional mode (``kafka.transactional.id``: one transaction per task, committed by the
    driver), runs interleaved with the idempotent ones on the same DataFrame; target: idempotent time /
    transactional time >= 0.9 (transactions cost at most about a tenth);
  * what a user would write by hand: a confluent-kafka ``Producer`` loop (``produce`` per row,
    ``linger.ms=5``, acks=1) inside ``foreachPartition`` to the same broker.

Each pylog run writes to a fresh topic (auto-created with the embedded broker's default of 1 partition) and
each Parquet run to a fresh directory; nothing is deleted before the end, so both pay for new page-cache pages.
Run with ``python -m jobs.bench writer`` (or ``python -m jobs.bench.writer``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from jobs.bench.common import Result, spark_session, timed, timed_interleaved

__all__ = ["SECTION", "run"]

SECTION = "writer"
TARGET_PARQUET_RATIO = 1.0
TARGET_TRANSACTIONAL_RATIO = 0.9


def _confluent_loop(bootstrap: str, topic: str) -> Callable[[Iterator[Any]], None]:
    def send(rows: Iterator[Any]) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "partitioner": "murmur2_random"}
        )
        for row in rows:
            while True:
                try:
                    producer.produce(topic, value=row.value, key=row.key)
                    break
                except BufferError:  # local queue full: let it drain
                    producer.poll(0.05)
            producer.poll(0)
        if producer.flush(120) != 0:
            raise RuntimeError("confluent-kafka could not deliver every record")

    return send


def run(quick: bool) -> list[Result]:
    import spark_kafka_log
    from broker_runtime.launch import ensure_embedded_broker, stop_embedded_broker

    rows = 20_000 if quick else 2_000_000
    repeat = 1 if quick else 3
    spark = spark_session(
        "pylog-bench-writer",
        "local[2]",
        **{"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
    )
    spark_kafka_log.register(spark)
    work = tempfile.mkdtemp(prefix="pylog-bench-writer-")
    data_dir = os.path.join(work, "pylog-data")
    results: list[Result] = []
    df = None
    try:
        df = (
            spark.range(0, rows, 1, 2)
            .selectExpr(
                "cast(substr(sha2(cast(id as string), 256), 1, 16) as binary) as key",  # 16 bytes
                "cast(concat(substr(sha2(cast(id as string), 512), 1, 100)) as binary) as value",  # 100 bytes
            )
            .cache()
        )
        assert df.count() == rows
        bootstrap = ensure_embedded_broker(data_dir)

        def pylog(**options: str) -> Callable[[], None]:
            def go() -> None:
                w = df.write.format("pylog").option("pylog.dataDir", data_dir)
                w = w.option("topic", f"bench-{uuid.uuid4().hex[:8]}")
                for k, v in options.items():
                    w = w.option(k, v)
                w.mode("append").save()

            return go

        def parquet() -> None:
            # A fresh directory each run, kept until the end, as each pylog run keeps its fresh topic: on a
            # VM whose memory is backed lazily, overwriting would let Parquet reuse page-cache pages that
            # pylog has to fault in, which measured as most of the broker's CPU time.
            df.write.mode("append").parquet(os.path.join(work, f"parquet-{uuid.uuid4().hex[:8]}"))

        def by_hand() -> None:
            df.foreachPartition(_confluent_loop(bootstrap, f"bench-{uuid.uuid4().hex[:8]}"))

        t_parquet = timed(parquet, repeat=repeat)
        t_acks1 = timed(pylog(**{"kafka.acks": "1"}), repeat=repeat)
        t_all, t_txn = timed_interleaved(
            [pylog(), pylog(**{"kafka.transactional.id": "bench"})], repeat=repeat
        )
        t_lz4 = timed(pylog(**{"kafka.acks": "1", "kafka.compression.type": "lz4"}), repeat=repeat)
        t_hand = timed(by_hand, repeat=1, warmup=0 if quick else 1)
        millions = rows / 1e6

        ratio = t_parquet.median / t_acks1.median
        results = [
            Result.measured(
                SECTION, f"parquet write, {rows:,} rows (reference)", t_parquet.rate(millions), "M rows/s"
            ),
            Result.measured(
                SECTION, "pylog write acks=1 none, embedded broker", t_acks1.rate(millions), "M rows/s"
            ),
            Result(
                SECTION,
                "pylog acks=1 vs parquet (parquet time / pylog time)",
                ratio,
                "x",
                f">= {TARGET_PARQUET_RATIO}",
                ratio >= TARGET_PARQUET_RATIO,
            ),
            Result.measured(SECTION, "pylog write acks=all (idempotent)", t_all.rate(millions), "M rows/s"),
            Result.measured(
                SECTION,
                "pylog write transactional (kafka.transactional.id)",
                t_txn.rate(millions),
                "M rows/s",
            ),
            Result(
                SECTION,
                "pylog transactional vs idempotent (idempotent time / transactional time)",
                t_all.median / t_txn.median,
                "x",
                f">= {TARGET_TRANSACTIONAL_RATIO}",
                t_all.median / t_txn.median >= TARGET_TRANSACTIONAL_RATIO,
            ),
            Result.measured(SECTION, "pylog write acks=1 lz4", t_lz4.rate(millions), "M rows/s"),
            Result.measured(
                SECTION, "confluent-kafka loop in foreachPartition, acks=1", t_hand.rate(millions), "M rows/s"
            ),
            Result(SECTION, "pylog acks=1 vs confluent-kafka loop", t_hand.median / t_acks1.median, "x"),
        ]
        return results
    finally:
        stop_embedded_broker(data_dir)
        if df is not None:
            df.unpersist()  # the session may be shared: drop only this section's cache
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for r in run(quick):
        print(r.line(quick), flush=True)
