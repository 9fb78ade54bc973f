"""writeStream.format("pylog") over several micro-batches, and the zero-configuration embedded broker."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from broker_runtime.launch import create_topic
from broker_runtime.launch.embedded import (
    DISCOVERY_FILE,
    embedded_broker_address,
    ensure_embedded_broker,
    stop_embedded_broker,
)
from tests.connector.kafka_peer import consume_all, consume_to_end
from tests.connector.test_writer_transactional import _assert_no_open_transaction
from tests.support.processes import running

pytestmark = [pytest.mark.timeout(180)]


def _stream_files(source: Path, batches: int, rows: int) -> list[bytes]:
    source.mkdir()
    for i in range(batches):  # one file per micro-batch
        lines = [{"k": f"k{i}-{j}", "v": f"v{i}-{j}"} for j in range(rows)]
        (source / f"part-{i}.json").write_text("\n".join(json.dumps(r) for r in lines))
    return sorted(f"v{i}-{j}".encode() for i in range(batches) for j in range(rows))


def _run_stream(spark: Any, source: Path, **options: str) -> Any:
    """Run a file-source query into pylog to its end (one file per micro-batch); the finished query."""
    writer = (
        spark.readStream.schema("k string, v string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .selectExpr("k as key", "v as value")
        .writeStream.format("pylog")
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.outputMode("append").trigger(availableNow=True).start()
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    return query


def test_streaming_sink_is_exactly_once_and_records_every_micro_batch_in_its_log(
    spark: Any, broker: str, tmp_path: Path
) -> None:
    topic = f"s-{uuid.uuid4().hex[:10]}"
    expected = _stream_files(tmp_path / "in", 3, 100)
    checkpoint = tmp_path / "checkpoint"
    query = _run_stream(
        spark,
        tmp_path / "in",
        **{
            "kafka.bootstrap.servers": broker,
            "topic": topic,
            "checkpointLocation": checkpoint.as_uri(),  # a file: URI works as a plain path does
            "pylog.producerStateDir": str(tmp_path / "producer-state"),
        },
    )
    assert query.exception() is None
    messages = consume_to_end(broker, topic, 3, "read_committed")
    assert sorted(m.value or b"" for m in messages) == expected
    # Each micro-batch is in the sink log under the checkpoint: committed, with its tasks' transactions.
    entries = sorted((checkpoint / "pylog-sink").glob("*.json"), key=lambda p: int(p.stem))
    docs = [json.loads(p.read_text()) for p in entries]
    assert [d["batchId"] for d in docs] == [0, 1, 2]
    assert all(d["status"] == "committed" and d["records"] == 100 for d in docs)
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    for d in docs:
        assert d["queryId"] == query_id and d["transactions"]
        for t in d["transactions"]:
            assert t["transactionalId"].startswith(f"pylog-stream-{query_id}-") and t["producerId"] >= 0
    ranges = sorted(
        (p["partition"], p["first_offset"], p["last_offset"]) for d in docs for p in d["partitions"]
    )
    assert sum(last - first + 1 for _, first, last in ranges) == 300
    # The driver recorded each micro-batch for the web console (__pylog_spark_writes), as the sink log has it.
    recorded = _recorded_writes(broker, topic)
    assert sorted(w.batch_id for w in recorded) == [0, 1, 2], recorded
    assert all(
        w.kind == "stream" and w.query_id == query_id and w.delivery == "exactly-once" for w in recorded
    )
    assert all(w.rows == 100 for w in recorded)
    assert sorted((p, first, last) for w in recorded for _, p, first, last, _ in w.partitions) == ranges
    # Transactions need no producer-state files.
    assert not (tmp_path / "producer-state").exists() or os.listdir(tmp_path / "producer-state") == []


def test_streaming_sink_rerun_of_a_committed_micro_batch_writes_nothing_again(
    spark: Any, broker: str, tmp_path: Path
) -> None:
    topic = f"s-{uuid.uuid4().hex[:10]}"
    expected = _stream_files(tmp_path / "in", 2, 50)
    checkpoint = tmp_path / "checkpoint"
    options = {"kafka.bootstrap.servers": broker, "topic": topic, "checkpointLocation": str(checkpoint)}
    assert _run_stream(spark, tmp_path / "in", **options).exception() is None
    # As if the driver died after the sink committed micro-batch 1 but before Spark's commit log said so:
    # the restarted query runs micro-batch 1 again.
    (checkpoint / "commits" / "1").unlink()
    (checkpoint / "commits" / ".1.crc").unlink(missing_ok=True)  # Hadoop's checksum file of it
    assert _run_stream(spark, tmp_path / "in", **options).exception() is None
    assert (checkpoint / "commits" / "1").exists()
    messages = consume_to_end(broker, topic, 3, "read_committed")
    assert sorted(m.value or b"" for m in messages) == expected
    # The re-run's records reached the log inside transactions that were aborted.
    assert len(consume_to_end(broker, topic, 3, "read_uncommitted")) == len(expected) + 50
    # ... and it is not recorded as a write: the console lists micro-batches 0 and 1 once each.
    assert sorted(w.batch_id for w in _recorded_writes(broker, topic)) == [0, 1]


def _recorded_writes(bootstrap: str, topic: str) -> list[Any]:
    """The Spark writes recorded for ``topic``, as the web console reads them."""
    from broker_runtime.client import KafkaClient
    from broker_runtime.console.spark_writes import writes_of

    with KafkaClient(bootstrap) as client:
        found = writes_of(client, topic)
    assert found.recorded and found.error is None, found
    return found.writes


def test_streaming_sink_needs_the_checkpoint_location_as_an_option(
    spark: Any, broker: str, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    _stream_files(source, 1, 10)
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "checkpoints"))
    try:
        with pytest.raises(StreamingQueryException) as failed:
            _run_stream(spark, source, **{"kafka.bootstrap.servers": broker, "topic": "nock"})
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert (
        "ConfigError: writeStream.format('pylog') is exactly-once and keeps its log in the query's checkpoint, "
        in str(failed.value)
    )
    assert "give it with .option('checkpointLocation', ...)" in str(failed.value)


def test_streaming_sink_at_least_once_keeps_nothing_in_the_checkpoint(
    spark: Any, broker: str, tmp_path: Path
) -> None:
    topic = f"s-{uuid.uuid4().hex[:10]}"
    expected = _stream_files(tmp_path / "in", 2, 50)
    checkpoint = tmp_path / "checkpoint"
    query = _run_stream(
        spark,
        tmp_path / "in",
        **{
            "kafka.bootstrap.servers": broker,
            "topic": topic,
            "checkpointLocation": str(checkpoint),
            "pylog.deliveryGuarantee": "at-least-once",
            "pylog.producerStateDir": str(tmp_path / "producer-state"),
        },
    )
    assert query.exception() is None
    assert sorted(m.value or b"" for m in consume_all(broker, topic, 3)) == expected
    assert not (checkpoint / "pylog-sink").exists()
    # Every micro-batch's commit removed its producer state (the tasks' and the commit writer's own folder).
    assert os.listdir(tmp_path / "producer-state") == []


def test_zero_config_write_starts_one_shared_embedded_broker(spark: Any) -> None:
    # No bootstrap servers, no pylog.dataDir: the data dir comes from $PYLOG_DATA_DIR as the Spark driver
    # saw it at start (the fixture points it at a temp dir; unset, it is ./pylog-data of the driver).
    data_dir = Path(os.environ["PYLOG_DATA_DIR"])
    data_dir.mkdir(parents=True, exist_ok=True)
    # A stale discovery file (dead pid, closed port) must be replaced, not trusted.
    (data_dir / DISCOVERY_FILE).write_text(json.dumps({"host": "127.0.0.1", "port": 1, "pid": 2**22 + 7}))
    info: dict[str, Any] = {}
    try:
        df = spark.range(0, 1000, 1, 2).selectExpr("cast(id as string) as key", "cast(id as string) as value")
        df.write.format("pylog").option("topic", "zero").mode("append").save()
        info = json.loads((data_dir / DISCOVERY_FILE).read_text())
        address = f"{info['host']}:{info['port']}"
        assert info["port"] != 1 and embedded_broker_address(data_dir) == address
        assert (data_dir / "logs" / "zero-0").is_dir() and (data_dir / "broker.properties").is_file()
        # A second job (and any other process) shares the same broker; it outlives the Spark jobs.
        df.write.format("pylog").option("topic", "zero").mode("append").save()
        assert ensure_embedded_broker(data_dir) == address
        assert json.loads((data_dir / DISCOVERY_FILE).read_text())["pid"] == info["pid"]
        messages = consume_all(address, "zero", 1)  # auto-created with the broker's num.partitions (1)
        assert len(messages) == 2000
    finally:
        stopped = stop_embedded_broker(data_dir)
    assert stopped
    assert embedded_broker_address(data_dir) is None
    assert not running(int(info["pid"]))


def test_streaming_sink_micro_batch_whose_task_fails_for_good_leaves_nothing_open_or_visible(
    spark: Any, broker: str, tmp_path: Path
) -> None:
    topic = f"s-{uuid.uuid4().hex[:10]}"
    create_topic(broker, topic, partitions=3)
    _stream_files(tmp_path / "in", 1, 600)
    query = (
        spark.readStream.schema("k string, v string")
        .json(str(tmp_path / "in"))
        .repartition(2, "k")
        .selectExpr("k as key", "v as value")
        .writeStream.format("pylog")
        .option("kafka.bootstrap.servers", broker)
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .option("kafka.batch.size", "1024")
        .option("pylog.test.alwaysFailPartition", "1")  # Spark partition 0 finishes, 1 fails every attempt
        .trigger(availableNow=True)
        .start()
    )
    try:
        with pytest.raises(StreamingQueryException, match="alwaysFailPartition"):
            query.awaitTermination(120)
    finally:
        query.stop()
    # abort() aborted the finished task's transaction (and fenced the failed one's id): nothing is visible,
    # no transaction holds the last stable offset, and the micro-batch is not in the sink log.
    assert consume_to_end(broker, topic, 3, "read_committed") == []
    assert len(consume_to_end(broker, topic, 3, "read_uncommitted")) > 0
    _assert_no_open_transaction(broker, topic)
    assert not (tmp_path / "checkpoint" / "pylog-sink").exists()
