"""The writer's parts without Spark: the task producer against a real broker, embedded-broker discovery under
concurrency, and the driver's commit summary."""

from __future__ import annotations

import json
import multiprocessing
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from broker_runtime.launch.embedded import DISCOVERY_FILE, ensure_embedded_broker, stop_embedded_broker
from spark_kafka_log.options import parse_writer_options
from spark_kafka_log.producer import PartitionStats, TaskProducer
from spark_kafka_log.schema import InputLayout
from spark_kafka_log.writer import PylogCommitMessage, summarize
from tests.connector.kafka_peer import consume_all

pytestmark = pytest.mark.timeout(120)


def _batches(count: int, rows: int) -> list[pa.RecordBatch]:
    out = []
    for b in range(count):
        ids = np.arange(b * rows, (b + 1) * rows)
        keys = pa.array([f"k{i}" for i in ids])
        values = pa.array([f"{i:08d}".encode() * 8 for i in ids], pa.binary())  # 64-byte values
        out.append(pa.RecordBatch.from_arrays([keys, values], ["key", "value"]))
    return out


def test_buffer_memory_bounds_what_a_task_holds(broker: str) -> None:
    topic = f"u-{uuid.uuid4().hex[:10]}"
    options = parse_writer_options(
        {
            "kafka.bootstrap.servers": broker,
            "topic": topic,
            "kafka.batch.size": "4096",
            "kafka.buffer.memory": "65536",
            "kafka.max.in.flight.requests.per.connection": "2",
        }
    )
    producer = TaskProducer(options, broker, InputLayout(value="value", key="key"))
    peak = 0
    batches = _batches(20, 500)  # 20 x ~40 KB of input
    try:
        for batch in batches:
            producer.write(batch)
            peak = max(peak, producer._held_bytes)
        producer.flush()
    finally:
        producer.close()
    largest_input = max(b.nbytes for b in batches)
    assert peak <= options.buffer_memory + largest_input
    assert producer._held_bytes == 0
    stats = producer.stats
    assert sum(s.records for s in stats.values()) == 10_000
    for (_, p), s in stats.items():  # one producer alone on the topic: contiguous offsets from 0
        assert (s.first_offset, s.last_offset) == (0, s.records - 1), p
    assert len(consume_all(broker, topic, 3)) == 10_000


def _ensure(data_dir: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(ensure_embedded_broker(data_dir))


def test_concurrent_processes_start_one_embedded_broker(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_ensure, args=(str(tmp_path), queue)) for _ in range(3)]
    try:
        for p in procs:
            p.start()
        addresses = {queue.get(timeout=90) for _ in procs}
        for p in procs:
            p.join(30)
        assert len(addresses) == 1
        info = json.loads((tmp_path / DISCOVERY_FILE).read_text())
        assert addresses == {f"{info['host']}:{info['port']}"}
        # The starters are gone; the broker outlives them and still answers.
        assert ensure_embedded_broker(tmp_path) == addresses.pop()
    finally:
        assert stop_embedded_broker(tmp_path)
    assert not stop_embedded_broker(tmp_path)  # nothing left to stop


def test_commit_summary_merges_tasks_per_partition() -> None:
    def message(task: int, parts: list[PartitionStats]) -> PylogCommitMessage:
        return PylogCommitMessage(
            write_id="w",
            task=task,
            attempt=0,
            records=sum(p.records for p in parts),
            recovered=0,
            bytes=sum(p.bytes for p in parts),
            producer_id=task,
            producer_epoch=0,
            seconds=0.1,
            partitions=parts,
        )

    line = summarize(
        [
            message(0, [PartitionStats("t", 0, 10, 1000, 0, 9), PartitionStats("t", 1, 5, 500, 20, 24)]),
            message(1, [PartitionStats("t", 0, 10, 1000, 10, 19)]),
            None,  # a failed task
        ]
    )
    assert line == "25 records, 2500 bytes, 2 partition(s) from 2 task(s): t-0@0..19, t-1@20..24"
