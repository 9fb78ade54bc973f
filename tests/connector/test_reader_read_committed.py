"""The reader's ``kafka.isolation.level`` against a real broker, real Spark and confluent-kafka as the reference.

A confluent-kafka transactional producer writes interleaved committed and aborted transactions plus
non-transactional records on several partitions (small segments, so an ABORT marker's ``.txnindex`` entry can
lie in a later segment than the transaction's records); the pylog reader over both transports must return
exactly what a confluent-kafka consumer with the same ``isolation.level`` returns (same partitions, offsets,
keys and values), and never a control record.

Offset gaps with splits (Spark's rule, ``KafkaDataConsumer.fetchRecord``: an offset at or above the earliest one
whose record is not there -- compacted away, a transaction marker, an aborted record -- is skipped, never data
loss): a compacted topic (the broker's cleaner runs every 100 ms) read in batch with ``maxRecordsPerPartition``
splits, the interleaved transactions with ``minPartitions`` splits (above), and both in one AvailableNow stream
with ``minPartitions`` splits, ``failOnDataLoss=true``, equal the consumer's records.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from broker_runtime.errors import ConfigError
from broker_runtime.launch import broker_process, create_topic
from broker_runtime.launch.layout import broker_log_dir
from broker_runtime.storage.segment import list_segment_bases
from broker_runtime.storage.txn_index import read_entries_read_only
from spark_kafka_log.common.reader_options import parse_reader_options
from spark_kafka_log.common.schema import arrow_schema, reader_schema
from spark_kafka_log.read.input_partition import PylogInputPartition
from spark_kafka_log.read.read_task import read_range
from tests.connector.kafka_peer import consume_to_end

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 3
Row = tuple[int, int, bytes | None, bytes | None]


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A broker process: (bootstrap, its log dir for the direct scan)."""
    data_dir = tmp_path_factory.mktemp("txn-broker")
    with broker_process(data_dir, {"log.cleaner.backoff.ms": "100"}) as bootstrap:
        yield bootstrap, str(broker_log_dir(data_dir))


def _txn_producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 300000,  # longer than any test: only the test ends its transactions
            "log_level": 0,
        }
    )
    producer.init_transactions(30)
    return producer


def _produce(producer: Producer, topic: str, prefix: str, n: int, partitions: int = PARTITIONS) -> None:
    for i in range(n):
        value = f"{prefix}-{i:03d}-".encode() + b"x" * 150
        producer.produce(topic, key=f"{prefix}-{i}".encode(), value=value, partition=i % partitions)
    assert producer.flush(30) == 0


def _write_interleaved(bootstrap: str, topic: str) -> None:
    """Two transactional producers and a plain one, their transactions overlapping in every partition."""
    create_topic(bootstrap, topic, partitions=PARTITIONS, configs={"segment.bytes": "2048"})
    a, b = _txn_producer(bootstrap, f"{topic}-a"), _txn_producer(bootstrap, f"{topic}-b")
    plain = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    a.begin_transaction()
    _produce(a, topic, "a1-committed", 9)
    b.begin_transaction()
    _produce(b, topic, "b1-aborted", 9)
    _produce(plain, topic, "plain1", 6)
    _produce(a, topic, "a1-committed-more", 6)
    _produce(b, topic, "b1-aborted-more", 12)
    _produce(plain, topic, "plain2", 3)
    b.abort_transaction(30)
    a.commit_transaction(30)
    b.begin_transaction()
    _produce(b, topic, "b2-committed", 9)
    b.commit_transaction(30)
    a.begin_transaction()
    _produce(a, topic, "a2-aborted", 9)
    _produce(plain, topic, "plain3", 3)
    a.abort_transaction(30)
    _produce(plain, topic, "plain4", 3)


def _read(
    spark: Any, bootstrap: str, log_dir: str, topic: str, metrics: Path, **options: str
) -> tuple[list[Row], list[dict[str, Any]]]:
    reader = (
        spark.read.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("pylog.logDirs", log_dir)
        .option("pylog.metricsDir", str(metrics))
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = reader.load().select("partition", "offset", "key", "value").collect()
    got = sorted(
        (
            r.partition,
            r.offset,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
        )
        for r in rows
    )
    tasks = [json.loads(Path(f).read_text()) for f in glob.glob(str(metrics / "read-*.json"))]
    return got, tasks


def _reference(bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS) -> list[Row]:
    return sorted(
        (m.partition, m.offset, m.key, m.value)
        for m in consume_to_end(bootstrap, topic, partitions, isolation)
    )


@pytest.fixture(scope="module")
def interleaved(txn_broker: tuple[str, str]) -> str:
    bootstrap, log_dir = txn_broker
    topic = "interleaved"
    _write_interleaved(bootstrap, topic)
    # The scenario must cover an ABORT marker indexed in a later segment than its transaction's first records.
    crossing = []
    for p in range(PARTITIONS):
        pdir = os.path.join(log_dir, f"{topic}-{p}")
        for base in list_segment_bases(pdir):
            entries = read_entries_read_only(Path(pdir) / f"{base:020d}.txnindex")
            crossing += [e for e in entries if e.first_offset < base]
    assert crossing, "no aborted transaction spans a segment boundary: make the segments smaller"
    return topic


@pytest.mark.parametrize("transport", ["fetch", "local"])
def test_read_committed_equals_a_read_committed_consumer(
    spark: Any, txn_broker: tuple[str, str], interleaved: str, transport: str, tmp_path: Path
) -> None:
    bootstrap, log_dir = txn_broker
    expected = _reference(bootstrap, interleaved, "read_committed")
    assert not [r for r in expected if b"aborted" in (r[3] or b"")], "the reference must skip aborted records"
    assert {r[0] for r in expected} == set(range(PARTITIONS))
    got, tasks = _read(
        spark,
        bootstrap,
        log_dir,
        interleaved,
        tmp_path,
        **{"kafka.isolation.level": "read_committed", "pylog.transport": transport, "minPartitions": "6"},
    )
    assert got == expected
    assert {t["transport"] for t in tasks} == {transport}
    assert {t["isolation"] for t in tasks} == {"read_committed"}
    assert sum(t["aborted_batches"] for t in tasks) > 0


@pytest.mark.parametrize("transport", ["fetch", "local"])
def test_read_uncommitted_equals_a_read_uncommitted_consumer(
    spark: Any, txn_broker: tuple[str, str], interleaved: str, transport: str, tmp_path: Path
) -> None:
    bootstrap, log_dir = txn_broker
    expected = _reference(bootstrap, interleaved, "read_uncommitted")
    assert [r for r in expected if b"aborted" in (r[3] or b"")], "the reference must include aborted records"
    got, tasks = _read(spark, bootstrap, log_dir, interleaved, tmp_path, **{"pylog.transport": transport})
    assert got == expected  # aborted records included, control records (the markers' offsets) never
    assert {t["transport"] for t in tasks} == {transport}
    assert {t["isolation"] for t in tasks} == {"read_uncommitted"}


def test_an_open_transaction_bounds_latest_at_its_first_offset(
    spark: Any, txn_broker: tuple[str, str], tmp_path: Path
) -> None:
    bootstrap, log_dir = txn_broker
    topic = "open-txn"
    create_topic(bootstrap, topic, partitions=1)
    plain = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    _produce(plain, topic, "before", 5, partitions=1)  # offsets 0..4
    open_txn = _txn_producer(bootstrap, "open-txn")
    open_txn.begin_transaction()
    _produce(open_txn, topic, "open", 3, partitions=1)  # offsets 5..7, not committed
    _produce(plain, topic, "after", 4, partitions=1)  # offsets 8..11
    # A task waiting for offsets that never become stable gives up after 5 s (the default is 60 s).
    committed = {"kafka.isolation.level": "read_committed", "kafka.default.api.timeout.ms": "5000"}
    try:
        for transport in ("fetch", "local"):
            got, _ = _read(
                spark,
                bootstrap,
                log_dir,
                topic,
                tmp_path / transport,
                **committed,
                **{"pylog.transport": transport},
            )
            assert [r[1] for r in got] == [0, 1, 2, 3, 4], transport
            assert got == _reference(bootstrap, topic, "read_committed", 1)
        uncommitted, _ = _read(spark, bootstrap, log_dir, topic, tmp_path / "u")
        assert [r[1] for r in uncommitted] == list(range(12))
        assert uncommitted == _reference(bootstrap, topic, "read_uncommitted", 1)

        # An explicit end beyond the last stable offset: refused (failOnDataLoss), else capped at it.
        beyond = {**committed, "endingOffsets": json.dumps({topic: {"0": 12}})}
        with pytest.raises(Exception, match="beyond the last stable offset 5"):
            _read(spark, bootstrap, log_dir, topic, tmp_path / "e", **beyond)
        capped, _ = _read(spark, bootstrap, log_dir, topic, tmp_path / "c", **beyond, failOnDataLoss="false")
        assert [r[1] for r in capped] == [0, 1, 2, 3, 4]
    finally:
        open_txn.abort_transaction(30)
    for transport in ("fetch", "local"):
        got, _ = _read(
            spark,
            bootstrap,
            log_dir,
            topic,
            tmp_path / f"done-{transport}",
            **committed,
            **{"pylog.transport": transport},
        )
        assert [r[1] for r in got] == [0, 1, 2, 3, 4, 8, 9, 10, 11]  # 5..7 aborted, 12 the ABORT marker
        assert got == _reference(bootstrap, topic, "read_committed", 1)


def test_direct_scan_falls_back_to_fetch_when_a_txnindex_cannot_be_read(
    txn_broker: tuple[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A malformed ``.txnindex``: the task logs a WARNING and fetches with read_committed; no aborted record."""
    bootstrap, log_dir = txn_broker
    topic = "bad-txnindex"
    _write_interleaved(bootstrap, topic)
    pdir = Path(log_dir) / f"{topic}-0"
    indexes = sorted(pdir.glob("*.txnindex"))
    assert indexes
    with open(indexes[0], "ab") as f:  # a whole entry with version 9: not Kafka's AbortedTxn v0
        f.write(b"\x00\x09" + b"\x00" * 32)
    expected = [r for r in _reference(bootstrap, topic, "read_committed") if r[0] == 0]
    options = parse_reader_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "kafka.isolation.level": "read_committed",
            "pylog.transport": "local",
            "pylog.metricsDir": str(tmp_path),
        }
    )
    end = max(r[1] for r in expected) + 1
    part = PylogInputPartition(topic, 0, 0, end, bootstrap, (log_dir,))
    with caplog.at_level(logging.WARNING, logger="spark_kafka_log.read_task"):
        batches = list(read_range(options, part, arrow_schema(reader_schema(False))))
    got = sorted(
        (p, o, k, v)
        for b in batches
        for p, o, k, v in zip(
            b.column("partition").to_pylist(),
            b.column("offset").to_pylist(),
            b.column("key").to_pylist(),
            b.column("value").to_pylist(),
            strict=True,
        )
    )
    assert got == expected
    assert any("cannot be read from the .txnindex files" in r.getMessage() for r in caplog.records)
    (metrics,) = [json.loads(Path(f).read_text()) for f in glob.glob(str(tmp_path / "read-*.json"))]
    assert metrics["transport"] == "fetch"


def test_isolation_level_option_values() -> None:
    base = {"subscribe": "t", "kafka.bootstrap.servers": "h:1"}
    assert parse_reader_options(base).isolation_level == "read_uncommitted"
    assert not parse_reader_options(base).read_committed
    o = parse_reader_options({**base, "KAFKA.ISOLATION.LEVEL": "Read_Committed"})
    assert o.read_committed and o.isolation_level_code == 1
    with pytest.raises(
        ConfigError, match="kafka.isolation.level.*allowed values: read_uncommitted, read_committed"
    ):
        parse_reader_options({**base, "kafka.isolation.level": "committed"})


# -- offset gaps (compaction, transactions) with splits, batch and streaming --------------------------------------

COMPACTED_PARTITIONS = 2


@pytest.fixture(scope="module")
def compacted(txn_broker: tuple[str, str]) -> str:
    """A compacted topic whose cleaner has removed records below the active segment: offset gaps from offset 0."""
    bootstrap, _ = txn_broker
    topic = "compacted"
    create_topic(
        bootstrap,
        topic,
        partitions=COMPACTED_PARTITIONS,
        configs={"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"},
    )
    # Small batches: a batch larger than segment.bytes is refused (RECORD_BATCH_TOO_LARGE, as Kafka).
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 5, "log_level": 0})
    errors: list[Any] = []
    n = 300
    for i in range(n):
        producer.produce(
            topic,
            key=(f"k{i % 10}" if i % 3 else f"unique{i}").encode(),  # unique keys stay: gaps between them
            value=f"v{i:04d}".encode() * 8,
            partition=i % 2,
            on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
        )
    assert producer.flush(30) == 0 and not errors, errors
    deadline = time.monotonic() + 30
    while len(_reference(bootstrap, topic, "read_uncommitted", COMPACTED_PARTITIONS)) >= n:
        assert time.monotonic() < deadline, "the cleaner compacted nothing"
        time.sleep(0.2)
    return topic


def _gaps(rows: list[Row]) -> int:
    """Offsets below a partition's last record that have no record (the log start offset stays 0)."""
    return sum(b[1] - a[1] - 1 for a, b in zip(rows, rows[1:], strict=False) if a[0] == b[0])


def test_compacted_topic_with_splits_and_fail_on_data_loss(
    spark: Any, txn_broker: tuple[str, str], compacted: str, tmp_path: Path
) -> None:
    """maxRecordsPerPartition splits (minPartitions ones: the stream below, and the interleaved transactions'
    read_committed batch above)."""
    bootstrap, log_dir = txn_broker
    expected = _reference(bootstrap, compacted, "read_uncommitted", COMPACTED_PARTITIONS)
    assert _gaps(expected) > 0, "no compaction gaps to read across"
    got, tasks = _read(
        spark, bootstrap, log_dir, compacted, tmp_path, failOnDataLoss="true", maxRecordsPerPartition="40"
    )
    assert got == expected
    assert len(tasks) >= 5, f"the splits were not made: {len(tasks)} tasks"


def test_stream_over_compaction_and_transaction_gaps(
    spark: Any, txn_broker: tuple[str, str], compacted: str, interleaved: str, tmp_path: Path
) -> None:
    bootstrap, log_dir = txn_broker
    stream = (
        spark.readStream.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", f"{compacted},{interleaved}")
        .option("pylog.logDirs", log_dir)
        .option("kafka.isolation.level", "read_committed")
        .option("minPartitions", "6")  # 5 topic-partitions: the largest ones are split
        .option("failOnDataLoss", "true")
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        stream.select("topic", "partition", "offset", "key", "value")
        .writeStream.format("memory")
        .queryName("gaps_stream")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the AvailableNow query did not stop"
    finally:
        query.stop()
    assert query.exception() is None
    rows = spark.sql("SELECT * FROM gaps_stream").collect()
    got = {
        t: sorted(
            (
                r.partition,
                r.offset,
                bytes(r.key) if r.key is not None else None,
                bytes(r.value) if r.value is not None else None,
            )
            for r in rows
            if r.topic == t
        )
        for t in (compacted, interleaved)
    }
    assert got[compacted] == _reference(bootstrap, compacted, "read_committed", COMPACTED_PARTITIONS)
    assert got[interleaved] == _reference(bootstrap, interleaved, "read_committed")
