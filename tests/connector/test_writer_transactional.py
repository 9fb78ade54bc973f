"""Transactional batch writes (``kafka.transactional.id``) end to end: real Spark (the shared ``local[2,2]``
session), a real pylog broker process, confluent-kafka read_committed consumers and the pylog reader with
``kafka.isolation.level=read_committed`` as the judges; the driver SIGKILL test runs a Spark driver program of its
own as a subprocess (one start for two interrupted writes) and finishes their commits with the documented CLI.

The module's broker checks for timed-out transactions every 100 ms (Kafka's default is 10 s), so the timeout
test does not wait long.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.launch import broker_process
from broker_runtime.protocol.messages import LATEST_TIMESTAMP, IsolationLevel
from jobs.bench.sink_chaos import kill_session
from spark_kafka_log.transactions import pending_intents
from tests.connector.kafka_peer import consume_to_end

pytestmark = [pytest.mark.timeout(300)]

PARTITIONS = 3


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("txn-broker")
    overrides = {
        "num.partitions": str(PARTITIONS),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
    }
    with broker_process(data_dir, overrides=overrides) as address:
        yield address


def _topic() -> str:
    return f"tx-{uuid.uuid4().hex[:10]}"


def _write(df: Any, bootstrap: str, topic: str, tmp_path: Path, **options: str) -> None:
    w = (
        df.write.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.transactional.id", "pylog-test")
        .option("pylog.transactionStateDir", str(tmp_path / "txn-state"))
    )
    for k, v in options.items():
        w = w.option(k, v)
    w.mode("append").save()


def _committed(bootstrap: str, topic: str) -> list[bytes]:
    """What a confluent-kafka read_committed consumer returns, up to the last stable offsets."""
    return [m.value or b"" for m in consume_to_end(bootstrap, topic, PARTITIONS, "read_committed")]


@pytest.fixture(scope="module")
def read_committed() -> Callable[[str, str], list[bytes]]:
    """The judge of the tests a peer module runs too: what a read_committed consumer returns (here
    confluent-kafka's; against Apache Kafka's broker, Kafka's own Java consumer)."""
    return _committed


def _pylog_committed(spark: Any, bootstrap: str, topic: str) -> list[bytes]:
    df = (
        spark.read.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    return [bytes(r.value) for r in df.select("value").collect()]


def _stable_and_high(bootstrap: str, topic: str) -> tuple[list[int], list[int]]:
    """Per partition: the last stable offset (read_committed latest) and the high watermark."""
    latest = {(topic, p): LATEST_TIMESTAMP for p in range(PARTITIONS)}
    with KafkaClient(bootstrap) as client:
        stable = client.list_offsets(latest, isolation_level=IsolationLevel.READ_COMMITTED)
        high = client.list_offsets(latest)
    return [stable[(topic, p)][0] for p in range(PARTITIONS)], [
        high[(topic, p)][0] for p in range(PARTITIONS)
    ]


def _assert_no_open_transaction(bootstrap: str, topic: str) -> None:
    stable, high = _stable_and_high(bootstrap, topic)
    assert stable == high and sum(high) > 0, (stable, high)


def _ids(n: int) -> list[bytes]:
    return sorted(str(i).encode() for i in range(n))


def test_a_job_whose_last_task_fails_for_good_leaves_nothing_visible(
    spark: Any, txn_broker: str, read_committed: Callable[[str, str], list[bytes]], tmp_path: Path
) -> None:
    topic = _topic()
    df = spark.range(0, 6000, 1, 3).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    with pytest.raises(Exception, match="alwaysFailPartition"):
        _write(
            df,
            txn_broker,
            topic,
            tmp_path,
            **{"kafka.batch.size": "2048", "pylog.test.alwaysFailPartition": "2"},
        )
    # Tasks 0 and 1 finished (flushed, not committed), task 2 wrote part of its rows twice and failed: the
    # driver's abort() and the failing attempts' own aborts leave nothing visible, and no open transaction
    # holds the last stable offset (it is the high watermark of every partition).
    assert read_committed(txn_broker, topic) == []
    _assert_no_open_transaction(txn_broker, topic)
    assert _pylog_committed(spark, txn_broker, topic) == []
    assert pending_intents(tmp_path / "txn-state") == []


def test_task_retries_write_every_row_exactly_once_for_read_committed(
    spark: Any, txn_broker: str, read_committed: Callable[[str, str], list[bytes]], tmp_path: Path
) -> None:
    """Every task's first attempt fails mid-write (after 3 acknowledged requests); the retries fence them."""
    topic = _topic()
    df = spark.range(0, 20000, 1, 2).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    _write(
        df, txn_broker, topic, tmp_path, **{"kafka.batch.size": "2048", "pylog.test.failAfterRequests": "3"}
    )
    assert sorted(read_committed(txn_broker, topic)) == _ids(20000)
    assert sorted(_pylog_committed(spark, txn_broker, topic)) == _ids(20000)
    # The aborted first attempts are in the log: a read_uncommitted reader sees them (the control).
    uncommitted = consume_to_end(txn_broker, topic, PARTITIONS, "read_uncommitted")
    assert len(uncommitted) > 20000


def test_a_commit_after_the_transaction_timed_out_fails_naming_the_setting(
    spark: Any, txn_broker: str, tmp_path: Path
) -> None:
    """Three tasks on two cores: tasks 0 and 1 write at once, task 2 computes its rows for 4 s first, so the
    earlier tasks' transactions (timeout 1 s) are aborted by the broker before the driver commits: the job fails
    with the reason and the option to raise, and nothing is visible."""
    from pyspark.sql import functions as F

    @F.udf("string")
    def slow(i):  # type: ignore[no-untyped-def]  # no hints: PySpark would try to infer a pandas UDF
        if i == 2000:  # the first row of the third partition
            import time

            time.sleep(4)
        return str(i)

    topic = _topic()
    df = spark.range(0, 3000, 1, 3).select(slow("id").alias("key"), F.col("id").cast("string").alias("value"))
    with pytest.raises(Exception) as raised:
        _write(df, txn_broker, topic, tmp_path, **{"kafka.transaction.timeout.ms": "1000"})
    text = str(raised.value)
    assert "nothing was committed" in text and "kafka.transaction.timeout.ms=1000" in text, text
    assert "broker aborted it" in text, text
    assert _committed(txn_broker, topic) == []


def _killed_driver(txn_broker: str, tmp_path: Path, *writes: tuple[str, int, Path]) -> list[Path]:
    """Run the driver program whose two transactional writes ``(topic, rows, state dir)`` are interrupted between
    their commit intents and their commits (the first stalled there, the second SIGKILLs the driver); each
    write's intent file."""
    script = Path(__file__).with_name("txn_write_killed_driver.py")
    args = [str(a) for write in writes for a in write]
    out, err = tmp_path / "driver.out", tmp_path / "driver.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(script), txn_broker, *args],
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    try:
        returncode = proc.wait(400)
    finally:
        kill_session(proc.pid)  # the stalled write's worker, and the driver itself should it still run
    assert returncode == -9, (returncode, out.read_text()[-2000:], err.read_text()[-2000:])
    intents = []
    for _, _, state_dir in writes:
        (intent,) = pending_intents(state_dir)
        doc = json.loads(intent.read_text())
        assert len(doc["transactions"]) == 2 and doc["bootstrapServers"] == txn_broker
        intents.append(intent)
    return intents


def _resolve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_kafka_log.transactions", "resolve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_driver_killed_between_intent_and_commit_is_finished_by_resolve(
    txn_broker: str, tmp_path: Path
) -> None:
    """One driver of its own, SIGKILLed with two writes' commits interrupted after their intents: one is finished
    with ``resolve --commit DIR``, the other rolled back with ``resolve --abort FILE``."""
    committed_topic, aborted_topic = _topic(), _topic()
    state, other_state = tmp_path / "txn-state", tmp_path / "other-txn-state"
    intent, other = _killed_driver(
        txn_broker, tmp_path, (committed_topic, 5000, state), (aborted_topic, 3000, other_state)
    )
    for topic in (committed_topic, aborted_topic):
        assert _committed(txn_broker, topic) == []  # nothing committed before the kill
        stable, high = _stable_and_high(txn_broker, topic)
        assert stable == [0] * PARTITIONS and sum(high) > 0  # the open transactions hold the LSO
    done = _resolve("--commit", str(state))
    assert done.returncode == 0, done.stderr
    assert "committed 1 write(s)" in done.stdout and not intent.exists()
    assert sorted(_committed(txn_broker, committed_topic)) == _ids(5000)
    again = _resolve("--commit", str(state))  # nothing left: a no-op
    assert again.returncode == 0 and "committed 0 write(s)" in again.stdout
    assert other.exists() and _committed(txn_broker, aborted_topic) == []  # the other write untouched

    done = _resolve("--abort", str(other))
    assert done.returncode == 0, done.stderr
    assert "aborted 1 write(s)" in done.stdout and not other.exists()
    assert _committed(txn_broker, aborted_topic) == []
    _assert_no_open_transaction(txn_broker, aborted_topic)
    assert len(consume_to_end(txn_broker, aborted_topic, PARTITIONS, "read_uncommitted")) == 3000
