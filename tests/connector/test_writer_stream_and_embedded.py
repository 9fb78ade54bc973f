"""writeStream.format("pylog") over several micro-batches, and the zero-configuration embedded broker."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.launch.embedded import (
    DISCOVERY_FILE,
    embedded_broker_address,
    ensure_embedded_broker,
    stop_embedded_broker,
)
from tests.connector.kafka_peer import consume_all
from tests.processes import running

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def test_streaming_sink_writes_every_micro_batch_and_records_it(
    spark: Any, broker: str, tmp_path: Path
) -> None:
    topic = f"s-{uuid.uuid4().hex[:10]}"
    source = tmp_path / "in"
    source.mkdir()
    for i in range(3):  # one file per micro-batch
        rows = [{"k": f"k{i}-{j}", "v": f"v{i}-{j}"} for j in range(100)]
        (source / f"part-{i}.json").write_text("\n".join(json.dumps(r) for r in rows))
    checkpoint = tmp_path / "checkpoint"
    query = (
        spark.readStream.schema("k string, v string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .selectExpr("k as key", "v as value")
        .writeStream.format("pylog")
        .option("kafka.bootstrap.servers", broker)
        .option("topic", topic)
        .option("checkpointLocation", str(checkpoint))
        .option("pylog.producerStateDir", str(tmp_path / "producer-state"))
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
        assert query.exception() is None
    finally:
        query.stop()
    messages = consume_all(broker, topic, 3)
    assert sorted(m.value or b"" for m in messages) == sorted(
        f"v{i}-{j}".encode() for i in range(3) for j in range(100)
    )
    # Each micro-batch is recorded with its producers and offsets under the checkpoint location.
    records = sorted((checkpoint / "pylog-sink").glob("*.json"), key=lambda p: int(p.stem))
    docs = [json.loads(p.read_text()) for p in records]
    assert [d["batchId"] for d in docs] == [0, 1, 2]
    assert all(d["status"] == "committed" and d["records"] == 100 for d in docs)
    assert all(p["producerId"] >= 0 for d in docs for p in d["producers"])
    ranges = sorted(
        (p["partition"], p["first_offset"], p["last_offset"]) for d in docs for p in d["partitions"]
    )
    assert sum(last - first + 1 for _, first, last in ranges) == 300
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
