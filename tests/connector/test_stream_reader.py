"""spark.readStream.format("pylog") end to end: a real broker, real producers writing while real Spark streams.

Each query collects its micro-batches through ``foreachBatch`` (rows of ``partition, offset, value`` per batch
id), so the tests can check the union of the batches against what was produced: no gap, no duplicate, per-partition
order, and the per-batch limits. One broker for the module (3 partitions per topic, small segments), plus one
with size-based retention for the data-loss tests.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from broker_runtime.client import KafkaClient
from broker_runtime.launch import broker_process, create_topic

pytestmark = [pytest.mark.timeout(300)]

PARTITIONS = 3
Row = tuple[int, int, bytes]


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(host:port, log dir) of the module's broker."""
    data_dir = tmp_path_factory.mktemp("stream-broker")
    logs = data_dir / "logs"
    overrides = {
        "num.partitions": str(PARTITIONS),
        "log.dirs": str(logs),
        "log.segment.bytes": "65536",
        "log.retention.ms": "-1",
    }
    with broker_process(data_dir, overrides=overrides) as address:
        yield address, str(logs)


class Batches:
    """What a foreachBatch sink saw: batch id -> rows ``(partition, offset, value)`` (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_id: dict[int, list[Row]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [
            (r.partition, r.offset, bytes(r.value))
            for r in df.select("partition", "offset", "value").collect()
        ]
        with self.lock:
            self.by_id[batch_id] = rows

    def rows(self) -> list[Row]:
        with self.lock:
            return [r for rows in self.by_id.values() for r in rows]

    def count(self) -> int:
        return len(self.rows())


def _stream(spark: Any, address: str, logs: str, **options: str) -> Any:
    r = (
        spark.readStream.format("pylog")
        .option("kafka.bootstrap.servers", address)
        .option("pylog.logDirs", logs)
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


class _Delivered:
    """A producer's delivery reports: ``flush()`` returning 0 does not mean every record was accepted."""

    def __init__(self) -> None:
        self.errors: list[Any] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)


class _Producer(Producer):
    """confluent-kafka's producer plus its delivery reports (``delivered``)."""

    delivered: _Delivered


def _producer(address: str, **extra: Any) -> _Producer:
    delivered = _Delivered()
    producer = _Producer(
        {
            "bootstrap.servers": address,
            "linger.ms": 5,
            "enable.idempotence": True,
            "log_level": 0,
            "on_delivery": delivered,
            **extra,
        }
    )
    producer.delivered = delivered
    return producer


def _flush(producer: _Producer) -> None:
    assert producer.flush(30) == 0
    errors = producer.delivered.errors
    assert not errors, f"records were not delivered: {errors[:3]}"


def _produce(
    address: str, topic: str, values: list[bytes], pause_every: int = 0, pause_s: float = 0.0
) -> None:
    """Send ``values`` round-robin over the partitions (value i to partition i % 3), pausing now and then."""
    producer = _producer(address)
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % PARTITIONS)
        if pause_every and i % pause_every == pause_every - 1:
            _flush(producer)
            time.sleep(pause_s)
    _flush(producer)


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _assert_exact(rows: list[Row], expected_values: set[bytes]) -> None:
    """Every value once, offsets per partition contiguous from 0 (no gap, no duplicate)."""
    assert len(rows) == len(set(rows)), "a record was delivered twice"
    assert {v for _, _, v in rows} == expected_values
    assert len(rows) == len(expected_values)
    by_partition: dict[int, list[int]] = {}
    for p, o, _ in rows:
        by_partition.setdefault(p, []).append(o)
    for p, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {p}: offsets are not 0..n-1"


def _latest(address: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=address)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: o for tp, o in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def _per_batch_order(batches: Batches) -> None:
    """Batch n+1 starts in every partition where batch n ended (per-partition order across batches)."""
    ends: dict[int, int] = {}
    for batch_id in sorted(batches.by_id):
        starts: dict[int, int] = {}
        for p, o, _ in batches.by_id[batch_id]:
            starts[p] = min(o, starts.get(p, o))
        for p, s in starts.items():
            assert s == ends.get(p, 0), (
                f"batch {batch_id} starts partition {p} at {s}, expected {ends.get(p, 0)}"
            )
        for p, o, _ in batches.by_id[batch_id]:
            ends[p] = max(o + 1, ends.get(p, 0))


# --------------------------------------------------------------------------------------------- micro-batches


def test_concurrent_producers_every_record_once_in_order_and_rate_limited(
    spark: Any, sbroker: tuple[str, str], tmp_path: Path
) -> None:
    address, logs = sbroker
    topic = f"s-{uuid.uuid4().hex[:6]}"
    create_topic(address, topic, partitions=PARTITIONS)
    limit = 400
    confluent_values = [f"c-{i:05d}".encode() for i in range(3000)]
    pylog_values = [f"w-{i:05d}".encode() for i in range(1500)]
    batches = Batches()
    query = (
        _stream(
            spark, address, logs, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=str(limit)
        )
        .writeStream.foreachBatch(batches)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        producer = threading.Thread(target=_produce, args=(address, topic, confluent_values, 100, 0.05))
        producer.start()
        # The pylog writer too, at the same time (a Spark job of its own beside the stream's).
        df = spark.createDataFrame([(v,) for v in pylog_values], "value binary")
        df.write.format("pylog").option("kafka.bootstrap.servers", address).option("topic", topic).mode(
            "append"
        ).save()
        producer.join()
        total = len(confluent_values) + len(pylog_values)
        _wait_for(lambda: batches.count() >= total, 120, f"{total} rows")
        time.sleep(0.5)  # a batch past the end would show up as duplicates
    finally:
        query.stop()
    _assert_exact(batches.rows(), set(confluent_values) | set(pylog_values))
    _per_batch_order(batches)
    sizes = [len(rows) for rows in batches.by_id.values()]
    assert max(sizes) <= limit, f"a micro-batch exceeded maxOffsetsPerTrigger={limit}: {sizes}"
    assert len([s for s in sizes if s]) >= -(-(len(confluent_values) + len(pylog_values)) // limit)
    # Spark's Kafka source offsets in the checkpoint: {"topic": {"partition": next offset}}.
    offsets_dir = tmp_path / "cp" / "offsets"
    last = max((p for p in offsets_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert json.loads(last.read_text().strip().splitlines()[-1]) == {
        topic: {str(p): n for p, n in _latest(address, topic).items()}
    }


def _run_available_now(spark: Any, df: Any, checkpoint: Path, batches: Batches, timeout: float = 120) -> None:
    query = df.writeStream.foreachBatch(batches).option("checkpointLocation", str(checkpoint))
    query = query.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(timeout), "the AvailableNow query did not stop"
    finally:
        query.stop()  # a query that did not stop must not keep running in the shared session
    if query.exception() is not None:
        raise query.exception()


def test_available_now_stops_at_the_offsets_latest_at_start_while_data_arrives(
    spark: Any, sbroker: tuple[str, str], tmp_path: Path
) -> None:
    address, logs = sbroker
    topic = f"an-{uuid.uuid4().hex[:6]}"
    create_topic(address, topic, partitions=PARTITIONS)
    first = [f"a-{i:05d}".encode() for i in range(1200)]
    _produce(address, topic, first)
    at_start = _latest(address, topic)
    stop = threading.Event()
    more: list[bytes] = []

    def keep_producing() -> None:
        producer = _producer(address)
        i = 0
        while not stop.is_set():
            value = f"b-{i:05d}".encode()
            producer.produce(topic, value=value, partition=i % PARTITIONS)
            more.append(value)
            i += 1
            if i % 30 == 0:
                producer.flush(30)
                time.sleep(0.02)
        producer.flush(30)

    producing = threading.Thread(target=keep_producing)
    producing.start()
    try:
        time.sleep(0.3)
        batches = Batches()
        df = _stream(
            spark, address, logs, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="250"
        )
        _run_available_now(spark, df, tmp_path / "cp", batches)
        after_query = _latest(address, topic)
    finally:
        stop.set()
        producing.join()
    rows = batches.rows()
    assert len(rows) == len(set(rows))
    _per_batch_order(batches)
    ends: dict[int, int] = {}
    for p, o, _ in rows:
        ends[p] = max(ends.get(p, 0), o + 1)
    for p in range(PARTITIONS):
        # Everything there at query start was read, nothing written after the query ended ...
        assert at_start[p] <= ends[p] <= after_query[p]
        assert sorted(o for q, o, _ in rows if q == p) == list(range(ends[p]))
    # ... and the stop was the target fixed at start, not "whatever was there at the end" (data kept arriving).
    assert sum(after_query.values()) > sum(ends.values())
    assert max(len(b) for b in batches.by_id.values()) <= 250
    assert len(batches.by_id) >= 1200 // 250


def test_restart_from_checkpoint_continues_exactly_and_trigger_once(
    spark: Any, sbroker: tuple[str, str], tmp_path: Path
) -> None:
    """A new query on the same checkpoint starts where the last committed batch ended (Trigger.Once reads all).
    It opts in to committing its progress to a consumer group: each run, planning its batch, commits where the
    previous run's committed batch ended (what lag tools read; a Trigger.Once run's own batch reaches the group
    with the next run)."""
    address, logs = sbroker
    group = {"kafka.group.id": f"lag-{uuid.uuid4().hex[:6]}", "commitOffsetsToGroup": "true"}
    topic = f"rs-{uuid.uuid4().hex[:6]}"
    create_topic(address, topic, partitions=PARTITIONS)
    checkpoint = tmp_path / "cp"
    seen: list[Row] = []
    produced: list[bytes] = []
    previous_end: dict[int, int] = {}
    for run in range(3):
        if run == 2:
            previous_end = _latest(address, topic)  # run 1's batch ends here
        values = [f"r{run}-{i:04d}".encode() for i in range(300 + 50 * run)]
        _produce(address, topic, values)
        produced += values
        batches = Batches()
        df = _stream(
            spark, address, logs, subscribe=topic, startingOffsets="earliest", includeHeaders="true", **group
        )
        query = df.writeStream.foreachBatch(batches).option("checkpointLocation", str(checkpoint))
        query = query.trigger(once=True).start()
        try:
            assert query.awaitTermination(120)
        finally:
            query.stop()
        assert len(batches.by_id) == 1, "Trigger.Once reads everything in one batch"
        assert {v for _, _, v in batches.rows()} == set(values)
        seen += batches.rows()
    _assert_exact(seen, set(produced))
    with KafkaClient(address) as client:
        committed = client.groups.committed_offsets(group["kafka.group.id"])
    assert committed == {(topic, p): n for p, n in previous_end.items()}


def test_starting_offsets_latest_default_json_and_timestamp(
    spark: Any, sbroker: tuple[str, str], tmp_path: Path
) -> None:
    address, logs = sbroker
    topic = f"st-{uuid.uuid4().hex[:6]}"
    create_topic(address, topic, partitions=PARTITIONS)
    old = [f"old-{i:04d}".encode() for i in range(90)]
    _produce(address, topic, old)
    # Default startingOffsets=latest: a running query sees only what comes after it started.
    batches = Batches()
    query = (
        _stream(spark, address, logs, subscribe=topic)
        .writeStream.foreachBatch(batches)
        .option("checkpointLocation", str(tmp_path / "latest"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        _wait_for(lambda: query.lastProgress is not None, 60, "the first trigger")
        new = [f"new-{i:04d}".encode() for i in range(60)]
        _produce(address, topic, new)
        _wait_for(lambda: batches.count() >= 60, 60, "the new rows")
        time.sleep(0.3)
    finally:
        query.stop()
    assert sorted(v for _, _, v in batches.rows()) == sorted(new)

    # JSON with -2 (earliest) and an explicit offset; -1 (latest) is allowed for streams.
    start = json.dumps({topic: {"0": -2, "1": 10, "2": -1}})
    got = Batches()
    _run_available_now(
        spark, _stream(spark, address, logs, subscribe=topic, startingOffsets=start), tmp_path / "j", got
    )
    counts = {p: len([1 for q, _, _ in got.rows() if q == p]) for p in range(PARTITIONS)}
    assert counts == {0: 50, 1: 40, 2: 0}

    # startingTimestamp: every record of this topic is newer than a minute ago, none newer than the future.
    got = Batches()
    ts = str(int(time.time() * 1000) - 60_000)
    _run_available_now(
        spark, _stream(spark, address, logs, subscribe=topic, startingTimestamp=ts), tmp_path / "t", got
    )
    assert got.count() == 150
    future = json.dumps({topic: {str(p): int(time.time() * 1000) + 3_600_000 for p in range(PARTITIONS)}})
    df = _stream(
        spark,
        address,
        logs,
        subscribe=topic,
        startingOffsetsByTimestamp=future,
        startingOffsetsByTimestampStrategy="latest",
    )
    got = Batches()
    _run_available_now(spark, df, tmp_path / "f", got)
    assert got.count() == 0


def test_subscribe_pattern_discovers_new_topics_from_earliest(
    spark: Any, sbroker: tuple[str, str], tmp_path: Path
) -> None:
    address, logs = sbroker
    prefix = f"dyn{uuid.uuid4().hex[:5]}"
    create_topic(address, f"{prefix}-a", partitions=PARTITIONS)
    first = [f"a-{i:04d}".encode() for i in range(120)]
    _produce(address, f"{prefix}-a", first)
    batches = Batches()
    # find() semantics: the pattern matches inside "<prefix>-a" / "x-<prefix>-b".
    query = (
        _stream(spark, address, logs, subscribePattern=prefix, startingOffsets="earliest")
        .writeStream.foreachBatch(batches)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        _wait_for(lambda: batches.count() >= 120, 60, "the first topic")
        create_topic(address, f"x-{prefix}-b", partitions=2)
        producer = _producer(address)
        second = [f"b-{i:04d}".encode() for i in range(80)]
        for i, v in enumerate(second):
            producer.produce(f"x-{prefix}-b", value=v, partition=i % 2)
        _flush(producer)
        _wait_for(lambda: batches.count() >= 200, 60, "the new topic's rows")
        time.sleep(0.3)
    finally:
        query.stop()
    rows = batches.rows()
    assert sorted(v for _, _, v in rows) == sorted(first + second)
    assert len(rows) == 200


# --------------------------------------------------------------------------------------------- driver crash


@pytest.mark.slow
def test_restart_after_sigkill_of_the_driver_reads_every_record_once(
    spark: Any, sbroker: tuple[str, str], tmp_path: Path
) -> None:
    """A driver killed mid-stream (SIGKILL to its process group: Python and the JVM), then a new query on the same
    checkpoint: with a sink that writes each batch id once (replays overwrite), every record lands exactly once."""
    address, logs = sbroker
    topic = f"kill-{uuid.uuid4().hex[:6]}"
    create_topic(address, topic, partitions=PARTITIONS)
    values = [f"k-{i:05d}".encode() for i in range(1500)]
    _produce(address, topic, values)
    out = tmp_path / "out"
    out.mkdir()
    # Killed at a seeded step: in micro-batch `pause_batch` (of 15), before or after its file is written, with
    # the batch's offsets logged and its commit not: the restart must replay it. Early in the stream: the
    # killed driver paces its micro-batches (200 ms trigger), the restart runs the rest back to back.
    seed = int(os.environ.get("PYLOG_TEST_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    pause_batch, where = rng.randint(1, 4), rng.choice(["before", "after"])
    paused = tmp_path / "paused"
    script = str(Path(__file__).with_name("stream_in_own_spark_app.py"))
    args = [sys.executable, script, address, topic, str(tmp_path / "cp"), str(out)]
    args += [str(pause_batch), where, str(paused)]
    root = Path(__file__).resolve().parents[2]
    running_app = subprocess.Popen(
        args, cwd=root, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for(paused.exists, 150, f"the driver to stop in micro-batch {pause_batch} (seed {seed})")
    finally:
        os.killpg(running_app.pid, signal.SIGKILL)
        running_app.wait(30)
    written_before = sorted(int(f.stem.removeprefix("batch-")) for f in out.glob("batch-*.json"))
    assert written_before == list(range(pause_batch + (where == "after"))), (seed, where, written_before)
    print(f"seed {seed}: the first driver was killed in micro-batch {pause_batch}, {where} writing it")

    # The restart: a new query on the same checkpoint (in this test's Spark: one Spark start fewer), writing its
    # batches the same way; it replays the batch the dead driver had planned but not committed, then drains.
    def write_batch(df: Any, batch_id: int) -> None:
        rows = [
            [r.partition, r.offset, r.value.decode()]
            for r in df.select("partition", "offset", "value").collect()
        ]
        (out / f"batch-{batch_id}.json").write_text(json.dumps(rows))

    df = _stream(spark, address, logs, subscribe=topic, startingOffsets="earliest")
    query = df.writeStream.foreachBatch(write_batch).option("checkpointLocation", str(tmp_path / "cp"))
    query = query.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(120), "the restarted query did not stop"
    finally:
        query.stop()
    rows = [(p, o, v.encode()) for f in out.glob("batch-*.json") for p, o, v in json.loads(f.read_text())]
    _assert_exact(rows, set(values))


# --------------------------------------------------------------------------------------------- data loss


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    data_dir = tmp_path_factory.mktemp("stream-retention-broker")
    logs = data_dir / "logs"
    overrides = {
        "num.partitions": "1",
        "log.dirs": str(logs),
        "log.segment.bytes": "16384",
        "log.retention.bytes": "65536",
        "log.retention.check.interval.ms": "100",
    }
    with broker_process(data_dir, overrides=overrides) as address:
        yield address, str(logs)


class Retention:
    """How the retention test makes the broker delete records the stream has not read: here by size (the
    ``retention_broker`` keeps ~64 KiB of 16 KiB segments), with the records' own write times. A broker that
    cannot have segments that small (Apache Kafka: 1 MiB at least) gives the test another way."""

    def timestamp(self, i: int) -> int:
        """The CreateTime of record ``i`` (0: the time it is written)."""
        return 0

    def start(self, address: str, topic: str) -> None:
        """Called once records 200..3199 are written: start deleting (here retention runs all along)."""


@pytest.fixture(scope="module")
def retention() -> Retention:
    return Retention()


def test_retention_between_batches_with_fail_on_data_loss_both_ways(
    spark: Any, retention_broker: tuple[str, str], retention: Retention, tmp_path: Path
) -> None:
    """Batch 0 reads 200 records; retention then deletes records the stream has not read. failOnDataLoss=true
    fails naming the lost range; false (a new query run on the same checkpoint) skips it and reads the rest."""
    address, logs = retention_broker
    topic = f"sret-{uuid.uuid4().hex[:6]}"
    create_topic(address, topic, partitions=1)
    producer = _producer(address, **{"batch.num.messages": 50})  # batches well under the 16 KiB segments
    for i in range(200):
        producer.produce(
            topic, value=f"v{i:05d}".encode() * 10, partition=0, timestamp=retention.timestamp(i)
        )
    _flush(producer)
    checkpoint = tmp_path / "cp"
    first = Batches()
    _run_available_now(
        spark, _stream(spark, address, logs, subscribe=topic, startingOffsets="earliest"), checkpoint, first
    )
    assert first.count() == 200
    for i in range(200, 3200):
        producer.produce(
            topic, value=f"v{i:05d}".encode() * 10, partition=0, timestamp=retention.timestamp(i)
        )
    _flush(producer)
    retention.start(address, topic)
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=address)
    tp = TopicPartition(topic, 0)
    _wait_for(lambda: consumer.beginning_offsets([tp])[tp] > 200, 30, "retention to delete unread records")
    time.sleep(0.5)  # let the retention pass finish (it keeps the newest ~64 KiB)
    earliest = consumer.beginning_offsets([tp])[tp]
    consumer.close()

    with pytest.raises(
        Exception, match=rf"topic '{topic}' partition 0.*offsets \[200, {earliest}\) are no longer"
    ):
        _run_available_now(spark, _stream(spark, address, logs, subscribe=topic), checkpoint, Batches())
    rest = Batches()
    df = _stream(spark, address, logs, subscribe=topic, failOnDataLoss="false")
    _run_available_now(spark, df, checkpoint, rest)
    offsets = sorted(o for _, o, _ in rest.rows())
    assert offsets == list(range(earliest, 3200))


# --------------------------------------------------------------------------------------------- read_committed


def _txn_producer(address: str, txn_id: str) -> _Producer:
    delivered = _Delivered()
    producer = _Producer(
        {
            "bootstrap.servers": address,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 300000,  # longer than the test: only the test ends its transactions
            "log_level": 0,
            "on_delivery": delivered,
        }
    )
    producer.delivered = delivered
    producer.init_transactions(30)
    return producer


def test_read_committed_stream_stops_at_an_open_transaction_and_drops_aborted_ones(
    spark: Any, sbroker: tuple[str, str], tmp_path: Path
) -> None:
    address, logs = sbroker
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    create_topic(address, topic, partitions=PARTITIONS)
    a, b = _txn_producer(address, f"{topic}-a"), _txn_producer(address, f"{topic}-b")
    plain = _producer(address)

    def send(producer: _Producer, prefix: str, n: int = 30) -> list[bytes]:
        values = [f"{prefix}-{i:03d}".encode() for i in range(n)]
        for i, v in enumerate(values):
            producer.produce(topic, value=v, partition=i % PARTITIONS)
        _flush(producer)
        return values

    a.begin_transaction()
    a1 = send(a, "a1-committed")
    a.commit_transaction(30)
    b.begin_transaction()
    send(b, "b1-aborted")
    b.abort_transaction(30)
    p1 = send(plain, "p1")
    a.begin_transaction()
    a2 = send(a, "a2-open")
    p2 = send(plain, "p2-after-open")
    checkpoint = tmp_path / "cp"
    opts = {"subscribe": topic, "startingOffsets": "earliest", "kafka.isolation.level": "read_committed"}
    first = Batches()
    _run_available_now(spark, _stream(spark, address, logs, **opts), checkpoint, first)
    assert sorted(v for _, _, v in first.rows()) == sorted(a1 + p1), (
        "read_committed must stop at the open one"
    )
    a.commit_transaction(30)
    second = Batches()
    _run_available_now(spark, _stream(spark, address, logs, **opts), checkpoint, second)
    assert sorted(v for _, _, v in second.rows()) == sorted(a2 + p2)
    rows = first.rows() + second.rows()
    assert len({(p, o) for p, o, _ in rows}) == len(rows) == len(a1 + p1 + a2 + p2)


def test_min_offsets_per_trigger_waits_for_enough_data_or_max_trigger_delay(
    spark: Any, sbroker: tuple[str, str], tmp_path: Path
) -> None:
    """minOffsetsPerTrigger=200: 60 records wait (no batch) until 300 more arrive; with maxTriggerDelay=2s a few
    records go after the delay."""
    address, logs = sbroker
    for delay, expect_release in (("1h", False), ("2s", True)):
        topic = f"min-{uuid.uuid4().hex[:6]}"
        create_topic(address, topic, partitions=PARTITIONS)
        batches = Batches()
        df = _stream(spark, address, logs, subscribe=topic, minOffsetsPerTrigger="200", maxTriggerDelay=delay)
        query = (
            df.writeStream.foreachBatch(batches)
            .option("checkpointLocation", str(tmp_path / f"cp-{delay}"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            _wait_for(lambda: query.lastProgress is not None, 60, "the first trigger")  # noqa: B023
            few = [f"few-{i}".encode() for i in range(60)]
            _produce(address, topic, few)
            if expect_release:
                _wait_for(lambda: batches.count() >= 60, 30, "the few records after maxTriggerDelay")  # noqa: B023
                assert sorted(v for _, _, v in batches.rows()) == sorted(few)
                continue
            time.sleep(2.0)
            assert batches.count() == 0, "fewer than minOffsetsPerTrigger records made a batch"
            many = [f"many-{i}".encode() for i in range(300)]
            _produce(address, topic, many)
            _wait_for(lambda: batches.count() >= 200, 60, "a batch once 200 records are there")  # noqa: B023
            sizes = [len(rows) for rows in batches.by_id.values() if rows]
            assert min(sizes) >= 200, sizes
            assert set(few) <= {v for _, _, v in batches.rows()}, "the records that waited are in the batch"
        finally:
            query.stop()
