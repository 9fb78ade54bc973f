"""Benchmark section "writer": ``df.write.format("pylog")`` against Parquet and a hand-written producer loop.

Figures (medians of repeated runs after one warm-up, one local Spark session: the active one, else
``local[2]``). Two cached DataFrames of N rows each (16-byte key, 100-byte value, 2 Spark partitions;
N = 2,000,000, quick mode 20,000): **incompressible** rows (keys and values cut from SHA-2 digests) and
**compressible** rows (the same digests as hex text: 16 symbols, about half the bytes compress away).

  * per kind of rows, interleaved (parquet, pylog to 1 partition, pylog to 4 partitions, parquet, ...):
    ``df.write.parquet`` (snappy, Spark's default) against the pylog write with acks=1, no compression, to the
    embedded broker (zero configuration apart from a temporary ``pylog.dataDir``), as parquet time / pylog
    time; targets: >= 1.0 on incompressible rows to 4 partitions, >= 0.7 on compressible rows to 4 partitions;
  * on compressible rows to 4 partitions, pylog with lz4 against parquet;
  * pylog write with acks=all (idempotent, the default);
  * pylog write in transactional mode (``kafka.transactional.id``: one transaction per task, committed by the
    driver), runs interleaved with the idempotent ones on the same DataFrame; target: idempotent time /
    transactional time >= 0.9 (transactions cost at most about a tenth);
  * what a user would write by hand: a confluent-kafka ``Producer`` loop (``produce`` per row,
    ``linger.ms=5``, acks=1) inside ``foreachPartition`` to the same broker;
  * the broker's CPU per MB while the writer writes: one more pylog write of the incompressible rows, acks=1,
    to 4 partitions, with the embedded broker process's CPU (``/proc/<pid>/stat``) read just before and after
    it, per MB of key + value bytes (116 B a row, 10^6 bytes per MB: the unit of the "broker" section's
    two-producer librdkafka ingest figure, which it is to stay within 2x of; not judged here, the two figures
    come from different sections).

Each pylog run writes to a fresh topic (created before the timing with 1 or 4 partitions) and each Parquet run
to a fresh directory; nothing is deleted before the end, so both pay for new page-cache pages.
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

from jobs.bench.common import Result, process_cpu_s, spark_session, timed, timed_interleaved

__all__ = ["SECTION", "run"]

SECTION = "writer"
#: parquet time / pylog time, per (rows, topic partitions, codec).
TARGETS = {("incompressible", 4, "none"): 1.0, ("compressible", 4, "none"): 0.7}
TARGET_TRANSACTIONAL_RATIO = 0.9
#: Key + value bytes of a row (16 + 100), for the broker's CPU per MB.
ROW_BYTES = 116


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


INCOMPRESSIBLE = (
    "substr(unhex(sha2(cast(id as string), 256)), 1, 16) as key",  # 16 random bytes
    "substr(concat(unhex(sha2(cast(id as string), 512)), unhex(sha2(cast(-id as string), 512))), 1, 100) "
    "as value",  # 100 random bytes
)
COMPRESSIBLE = (
    "cast(substr(sha2(cast(id as string), 256), 1, 16) as binary) as key",  # 16 hex digits
    "cast(substr(sha2(cast(id as string), 512), 1, 100) as binary) as value",  # 100 hex digits
)


class _Topics:
    """Fresh topics of a given partition count, created before the timing starts (one per timed run)."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._ready: dict[int, list[str]] = {}

    def prepare(self, partitions: int, count: int) -> None:
        from broker_runtime.client import KafkaClient

        names = [f"bench-{partitions}p-{uuid.uuid4().hex[:8]}" for _ in range(count)]
        client = KafkaClient(self._bootstrap)
        try:
            errors = client.admin.create_topics({name: (partitions, 1) for name in names})
        finally:
            client.close()
        failed = {n: e for n, e in errors.items() if e}
        if failed:
            raise RuntimeError(f"creating the benchmark topics failed: {failed}")
        self._ready.setdefault(partitions, []).extend(names)

    def take(self, partitions: int) -> str:
        return self._ready[partitions].pop()


def run(quick: bool) -> list[Result]:
    import spark_kafka_log
    from broker_runtime.launch import embedded_broker_status, ensure_embedded_broker, stop_embedded_broker

    rows = 20_000 if quick else 2_000_000
    repeat = 1 if quick else 3
    warmup = 0 if quick else 1
    spark = spark_session(
        "pylog-bench-writer",
        "local[2]",
        **{"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
    )
    spark_kafka_log.register(spark)
    work = tempfile.mkdtemp(prefix="pylog-bench-writer-")
    data_dir = os.path.join(work, "pylog-data")
    frames: list[Any] = []
    try:
        incompressible = spark.range(0, rows, 1, 2).selectExpr(*INCOMPRESSIBLE).cache()
        compressible = spark.range(0, rows, 1, 2).selectExpr(*COMPRESSIBLE).cache()
        frames = [incompressible, compressible]
        for df in frames:
            assert df.count() == rows
        bootstrap = ensure_embedded_broker(data_dir)
        topics = _Topics(bootstrap)

        def pylog(df: Any, partitions: int = 1, options: dict[str, str] | None = None) -> Callable[[], None]:
            topics.prepare(partitions, repeat + warmup)

            def go() -> None:
                w = df.write.format("pylog").option("pylog.dataDir", data_dir)
                w = w.option("topic", topics.take(partitions))
                for k, v in (options or {}).items():
                    w = w.option(k, v)
                w.mode("append").save()

            return go

        def parquet(df: Any) -> Callable[[], None]:
            def go() -> None:
                # A fresh directory each run, kept until the end, as each pylog run keeps its fresh topic: on a
                # VM whose memory is backed lazily, overwriting would let Parquet reuse page-cache pages that
                # pylog has to fault in.
                df.write.mode("append").parquet(os.path.join(work, f"parquet-{uuid.uuid4().hex[:8]}"))

            return go

        acks1 = {"kafka.acks": "1"}
        millions = rows / 1e6
        results: list[Result] = []
        for kind, df in (("incompressible", incompressible), ("compressible", compressible)):
            fns: list[Callable[[], object]] = [parquet(df), pylog(df, 1, acks1), pylog(df, 4, acks1)]
            if kind == "compressible":
                fns.append(pylog(df, 4, {**acks1, "kafka.compression.type": "lz4"}))
            timings = timed_interleaved(fns, repeat=repeat, warmup=warmup)
            t_parquet = timings[0]
            results.append(
                Result.measured(
                    SECTION,
                    f"parquet write, {rows:,} {kind} rows (reference)",
                    t_parquet.rate(millions),
                    "M rows/s",
                )
            )
            shown = [(1, "none", timings[1]), (4, "none", timings[2])]
            if kind == "compressible":
                shown.append((4, "lz4", timings[3]))
            for partitions, codec, t in shown:
                results.append(
                    Result.measured(
                        SECTION,
                        f"pylog acks=1 {codec}, {kind}, {partitions} partition(s)",
                        t.rate(millions),
                        "M rows/s",
                    )
                )
                ratio = t_parquet.median / t.median
                target = TARGETS.get((kind, partitions, codec))
                results.append(
                    Result(
                        SECTION,
                        f"  pylog {codec}, {kind}, {partitions}p vs parquet (parquet time / pylog time)",
                        ratio,
                        "x",
                        "" if target is None else f">= {target}",
                        None if target is None else ratio >= target,
                    )
                )

        df = compressible
        t_all, t_txn = timed_interleaved(
            [pylog(df), pylog(df, 1, {"kafka.transactional.id": "bench"})], repeat=repeat, warmup=warmup
        )
        t_hand = timed(
            lambda: df.foreachPartition(_confluent_loop(bootstrap, f"bench-{uuid.uuid4().hex[:8]}")),
            repeat=1,
            warmup=warmup,
        )
        t_ack = timed(pylog(df, 1, acks1), repeat=1, warmup=0)
        status = embedded_broker_status(data_dir)
        assert status is not None
        broker = int(status["pid"])
        measured = pylog(incompressible, 4, acks1)
        cpu0 = process_cpu_s(broker)
        measured()
        broker_ms_per_mb = (process_cpu_s(broker) - cpu0) * 1000 / (rows * ROW_BYTES / 1e6)
        results += [
            Result.measured(
                SECTION, "pylog write acks=all (idempotent), compressible", t_all.rate(millions), "M rows/s"
            ),
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
            Result.measured(
                SECTION, "confluent-kafka loop in foreachPartition, acks=1", t_hand.rate(millions), "M rows/s"
            ),
            Result(SECTION, "pylog acks=1 vs confluent-kafka loop", t_hand.median / t_ack.median, "x"),
            Result(
                SECTION,
                "broker CPU per MB of a pylog write (acks=1, 4 partitions)",
                broker_ms_per_mb,
                "ms/MB",
            ),
        ]
        return results
    finally:
        stop_embedded_broker(data_dir)
        for df in frames:
            df.unpersist()  # the session may be shared: drop only this section's cache
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for r in run(quick):
        print(r.line(quick), flush=True)
