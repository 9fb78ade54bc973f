"""The writer's parts without Spark: the task producer against a real broker, embedded-broker discovery under
concurrency, and the driver's commit summary."""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from broker_runtime.errors import InjectedFailure, KafkaError, ProduceFailedError
from broker_runtime.launch.embedded import DISCOVERY_FILE, ensure_embedded_broker, stop_embedded_broker
from broker_runtime.protocol.record_codec.decode import decode_batches
from spark_kafka_log.common.commit_summary import PartitionStats, PylogCommitMessage, summarize
from spark_kafka_log.common.schema import InputLayout
from spark_kafka_log.common.writer_options import WriterOptions, parse_writer_options
from spark_kafka_log.write.accumulator import RecordAccumulator
from spark_kafka_log.write.partitioner import Partitioner
from spark_kafka_log.write.producer import TaskProducer
from spark_kafka_log.write.task_state import TaskIdentity, prepare_write_dir
from spark_kafka_log.write.write_plan import prepare_write
from spark_kafka_log.write.writer import write_task
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


def _options(broker: str, topic: str, **extra: str) -> WriterOptions:
    return parse_writer_options({"kafka.bootstrap.servers": broker, "topic": topic, **extra})


def test_answers_are_collected_between_writes_without_blocking(broker: str) -> None:
    """A write() completes the requests the broker already answered, so the pipeline refills while the task
    encodes, instead of holding every answer until buffer.memory is full (the broker then sat idle)."""
    topic = f"u-{uuid.uuid4().hex[:10]}"
    options = _options(broker, topic, **{"kafka.batch.size": "4096", "kafka.linger.ms": "0"})
    producer = TaskProducer(options, broker, InputLayout(value="value", key="key"))
    sender = producer._sender
    try:
        batches = _batches(6, 200)
        producer.write(batches[0])  # ~13 KB: a few requests sent, far below buffer.memory
        assert sender.requests_acknowledged == 0
        deadline = time.monotonic() + 10
        for batch in batches[1:]:
            while True:  # give the broker the time to answer, then the next write must see it
                time.sleep(0.2)
                if (
                    all(
                        producer._client.produce_answered(r.handle)
                        for q in sender._in_flight.values()
                        for r in q
                        if r.handle is not None
                    )
                    or time.monotonic() > deadline
                ):
                    break
            before = sender.requests_acknowledged
            producer.write(batch)
            assert sender.requests_acknowledged > before
        assert producer.held_bytes < options.buffer_memory
        producer.flush()
    finally:
        producer.close()
    assert sum(s.records for s in producer.stats.values()) == 1200


def test_buffer_memory_bounds_what_a_task_holds(broker: str) -> None:
    topic = f"u-{uuid.uuid4().hex[:10]}"
    options = _options(
        broker,
        topic,
        **{
            "kafka.batch.size": "4096",
            "kafka.buffer.memory": "65536",
            "kafka.max.in.flight.requests.per.connection": "2",
        },
    )
    producer = TaskProducer(options, broker, InputLayout(value="value", key="key"))
    peak = 0
    batches = _batches(20, 500)  # 20 x ~40 KB of input
    try:
        for batch in batches:
            producer.write(batch)
            peak = max(peak, producer.held_bytes)
        producer.flush()
    finally:
        producer.close()
    largest_input = max(b.nbytes for b in batches)
    assert peak <= options.buffer_memory + largest_input
    assert producer.held_bytes == 0
    stats = producer.stats
    assert sum(s.records for s in stats.values()) == 10_000
    for (_, p), s in stats.items():  # one producer alone on the topic: contiguous offsets from 0
        assert (s.first_offset, s.last_offset) == (0, s.records - 1), p
    assert len(consume_all(broker, topic, 3)) == 10_000


def test_a_batch_larger_than_the_topic_allows_fails_naming_kafka_batch_size(
    broker: str, tmp_path: Path
) -> None:
    """The default 1 MiB batches exceed a topic whose max.message.bytes is smaller: the broker's
    MESSAGE_TOO_LARGE fails the task saying which option to lower; a batch.size below the limit writes."""
    from broker_runtime.client import KafkaClient

    topic = f"u-{uuid.uuid4().hex[:10]}"
    with KafkaClient(broker) as client:
        assert client.admin.create_topics({topic: (1, 1)}, configs={"max.message.bytes": "100000"}) == {
            topic: 0
        }
    layout = InputLayout(value="value", key="key")
    batches = _batches(4, 1000)  # ~300 KB of records for the one partition
    state = {"pylog.producerStateDir": str(tmp_path)}
    for write_id in ("w-large", "w-small"):
        prepare_write_dir(str(tmp_path), write_id)  # the driver's part
    with pytest.raises(ProduceFailedError) as failed:
        options = _options(broker, topic, **state)
        write_task(options, layout, broker, TaskIdentity("w-large", 0, 0), iter(batches))
    text = str(failed.value)
    assert "MESSAGE_TOO_LARGE (10)" in text and "kafka.batch.size=1048576" in text, text
    assert "set kafka.batch.size below the topic's max.message.bytes" in text, text
    options = _options(broker, topic, **state, **{"kafka.batch.size": "65536"})
    message = write_task(options, layout, broker, TaskIdentity("w-small", 0, 0), iter(batches))
    assert message.records == 4000
    assert len(consume_all(broker, topic, 1)) == 4000


def _ensure(data_dir: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(ensure_embedded_broker(data_dir))


def _accumulator(options: WriterOptions, partitions: int) -> RecordAccumulator:
    """A task's accumulator outside Spark: key and value columns, ``partitions`` partitions a topic, producer 7."""
    accumulator = RecordAccumulator(
        options,
        InputLayout(value="value", key="key"),
        Partitioner(options.batch_size, seed="s"),
        partition_count=lambda topic: partitions,
        before_first_record=lambda tp: None,
    )
    accumulator.set_producer(7, 0, {})
    return accumulator


def test_a_batch_that_compression_makes_larger_than_max_request_size_is_split() -> None:
    """lz4 makes a batch of batch.size (1 MiB) random bytes ~70 bytes larger than the 1 MiB request bound: such a
    batch is encoded again in halves (same records, same sequences) instead of failing the task as if one
    record were above kafka.max.request.size."""
    rng = np.random.default_rng(5)
    keys = pa.array([rng.bytes(16) for _ in range(1100)], pa.binary())
    values = pa.array([rng.bytes(1000) for _ in range(1100)], pa.binary())
    options = parse_writer_options(
        {"kafka.bootstrap.servers": "localhost:9", "topic": "t", "kafka.compression.type": "lz4"}
    )
    accumulator = _accumulator(options, 1)
    accumulator.append(pa.RecordBatch.from_arrays([keys, values], ["key", "value"]))
    accumulator.seal_all()
    sealed = list(accumulator.queue(("t", 0)).ready)
    assert len(sealed) > 2 and max(len(b.data) for b in sealed) <= options.max_request_size
    assert [b.base_sequence for b in sealed] == np.cumsum([0] + [b.count for b in sealed[:-1]]).tolist()
    decoded = pa.Table.from_batches([decode_batches(b.data) for b in sealed])
    assert decoded.column("value").to_pylist() == values.to_pylist()


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


def test_commit_summary_counts_what_failed_attempts_wrote() -> None:
    retried = PylogCommitMessage(
        write_id="w",
        task=0,
        attempt=1,
        records=16000,
        recovered=4000,
        bytes=160000,
        producer_id=7,
        producer_epoch=0,
        seconds=0.1,
        partitions=[PartitionStats("t", 0, 16000, 160000, 4000, 19999, recovered=4000)],
    )
    line = summarize([retried])
    assert line.startswith(
        "20000 records, 4000 of them written by failed attempts of retried tasks (kept, not rewritten) and 16000 "
        "by the final attempts (160000 bytes), 1 partition(s) from 1 task(s): "
    )
    assert line.endswith("t-0@4000..19999 (+4000 earlier, by failed attempts)")


def test_a_retried_attempt_reports_every_record_the_job_made_visible(broker: str, tmp_path: Path) -> None:
    """Attempt 0 fails after 3 acknowledged requests (pylog.test.failAfterRequests); attempt 1 resumes it."""
    topic = f"u-{uuid.uuid4().hex[:10]}"
    options = _options(
        broker,
        topic,
        **{
            "kafka.batch.size": "2048",
            "kafka.linger.ms": "0",
            "pylog.producerStateDir": str(tmp_path / "state"),
            "pylog.test.failAfterRequests": "3",
        },
    )
    layout = InputLayout(value="value", key="key")
    batches = _batches(4, 500)
    prepare_write_dir(options.producer_state_dir, "write-x")  # the driver's part
    with pytest.raises(InjectedFailure, match="failAfterRequests=3"):
        write_task(options, layout, broker, TaskIdentity("write-x", 0, 0), iter(batches))
    message = write_task(options, layout, broker, TaskIdentity("write-x", 0, 1), iter(batches))
    assert message.recovered > 0 and message.records + message.recovered == 2000
    assert len(consume_all(broker, topic, 3)) == 2000
    line = summarize([message])
    assert line.startswith(
        f"2000 records, {message.recovered} of them written by failed attempts of retried tasks"
    )


# ------------------------------------------------------------------------------ weaker delivery is said once


def _prepare_logging(
    broker: str, caplog: pytest.LogCaptureFixture, **options: str
) -> list[logging.LogRecord]:
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("value", StringType())])
    base = {"kafka.bootstrap.servers": broker, "topic": f"u-{uuid.uuid4().hex[:10]}"}
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spark_kafka_log"):
        prepare_write({**base, **options}, schema)
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    "option, value",
    [
        ("kafka.max.in.flight.requests.per.connection", "6"),
        ("kafka.retries", "0"),
        ("kafka.acks", "1"),
        ("kafka.acks", "0"),
        ("kafka.enable.idempotence", "false"),
    ],
)
def test_an_option_weakening_delivery_is_warned_about_once_by_name(
    broker: str, caplog: pytest.LogCaptureFixture, option: str, value: str
) -> None:
    warnings = _prepare_logging(broker, caplog, **{option: value})
    assert len(warnings) == 1, [w.getMessage() for w in warnings]
    assert f"{option}={value}" in warnings[0].getMessage()
    assert warnings[0].name == "spark_kafka_log.writer"


def test_default_options_warn_about_nothing(broker: str, caplog: pytest.LogCaptureFixture) -> None:
    assert _prepare_logging(broker, caplog) == []
    assert _prepare_logging(broker, caplog, **{"kafka.acks": "all", "kafka.enable.idempotence": "true"}) == []


def test_stream_topic_check_keeps_its_client_and_survives_a_broker_restart(tmp_path: Path) -> None:
    """The streaming sink's driver calls keep one client per process (PySpark reuses the worker): it must
    neither pin a dead connection after the broker restarted on the same address nor hide a missing topic."""
    import socket

    from pyspark.sql.types import StringType, StructField, StructType

    from broker_runtime.client import KafkaClient
    from broker_runtime.launch import broker_process, create_topic
    from spark_kafka_log.common import connections
    from spark_kafka_log.write.write_plan import prepare_write

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "auto.create.topics.enable": "false"}
    schema = StructType([StructField("value", StringType())])
    # A missing topic is waited for up to the request timeout (it may be being created): keep it short.
    options = {
        "kafka.bootstrap.servers": f"127.0.0.1:{port}",
        "topic": "kept",
        "kafka.request.timeout.ms": "3000",
    }
    with broker_process(tmp_path / "b", overrides, startup_timeout_s=180) as bootstrap:
        create_topic(bootstrap, "kept", partitions=1)
        prepare_write(options, schema, keep_client=True)
        kept = connections._kept["stream-topic-check"][1]
        prepare_write(options, schema, keep_client=True)
        assert connections._kept["stream-topic-check"][1] is kept  # one client across calls
    with broker_process(
        tmp_path / "b", overrides, startup_timeout_s=180
    ):  # the same data, the same address, a new process
        prepare_write(options, schema, keep_client=True)
        with KafkaClient(f"127.0.0.1:{port}") as client:
            client.admin.delete_topics(["kept"])
        with pytest.raises(KafkaError, match="topic 'kept' is not available for writing"):
            prepare_write(options, schema, keep_client=True)
    connections.drop_kept_client("stream-topic-check")


_TWO_TASKS = """
import logging, sys, uuid
import pyarrow as pa
from spark_kafka_log.common.writer_options import parse_writer_options
from spark_kafka_log.write.producer import TaskProducer
from spark_kafka_log.common.schema import InputLayout
from tests.connector.kafka_peer import consume_all

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
broker, topic = sys.argv[1], sys.argv[2]
opts = parse_writer_options({"kafka.bootstrap.servers": broker, "topic": topic})
for task in range(2):
    producer = TaskProducer(opts, broker, InputLayout(value="value", key="key"))
    try:
        keys = pa.array([f"k{task}-{i}" for i in range(50)])
        values = pa.array([b"" if i % 7 == 0 else None if i % 5 == 0 else b"v" * i for i in range(50)], pa.binary())
        producer.write(pa.RecordBatch.from_arrays([keys, values], ["key", "value"]))
        producer.flush()
    finally:
        producer.close()
got = sorted((r.key, r.value) for r in consume_all(broker, topic, 3))
want = sorted(
    (f"k{t}-{i}".encode(), b"" if i % 7 == 0 else None if i % 5 == 0 else b"v" * i) for t in range(2) for i in range(50)
)
assert got == want, (got[:5], want[:5])
print("OK")
"""


@pytest.mark.parametrize("walk", ["compiled", "numpy"])
def test_a_write_process_names_its_encoder_once_and_warns_on_the_fallback(broker: str, walk: str) -> None:
    """Two write tasks in one (executor-like) process: the encoder that runs is named once per process, as a
    WARNING when the numpy fallback runs (PYLOG_RECORD_WALK=numpy), and the records arrive intact either way."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env.pop("PYLOG_RECORD_WALK", None)
    if walk == "numpy":
        env["PYLOG_RECORD_WALK"] = "numpy"
    topic = f"enc-{uuid.uuid4().hex[:10]}"
    proc = subprocess.run(
        [sys.executable, "-c", _TWO_TASKS, broker, topic],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
    named = [line for line in proc.stderr.splitlines() if "writer tasks encode records" in line]
    assert len(named) == 1, named
    if walk == "numpy":
        assert (
            named[0].startswith("WARNING") and "numpy encoder" in named[0] and "PYLOG_RECORD_WALK" in named[0]
        )
    else:
        assert named[0].startswith("INFO") and "compiled encoder" in named[0]


def test_buffer_memory_counts_every_pooled_buffer_a_stuck_partition_keeps_alive() -> None:
    """The batches of one encoding call are views of one pooled buffer: while one partition's batch is not
    acknowledged, its whole buffer stays alive, and ``held_bytes`` (what buffer.memory bounds) must count it,
    not only that batch (16 partitions, one never acknowledged: counting batches alone saw 1/16 of the memory)."""
    rng = np.random.default_rng(7)
    options = parse_writer_options({"kafka.bootstrap.servers": "localhost:9", "topic": "t"})
    accumulator = _accumulator(options, 16)
    base = pa.total_allocated_bytes()
    stuck = []
    for _ in range(20):
        keys = pa.array([rng.bytes(16) for _ in range(1600)], pa.binary())
        values = pa.array([rng.bytes(100) for _ in range(1600)], pa.binary())
        accumulator.append(pa.RecordBatch.from_arrays([keys, values], ["key", "value"]))
        accumulator.seal_all()
        for q in accumulator.queues():
            while q.ready:
                batch = q.ready.popleft()
                if q.partition == 0:
                    stuck.append(batch)  # never acknowledged: its partition has no leader
                else:
                    accumulator.release(batch)
    del keys, values  # the input's own Arrow memory: not the writer's
    alive = pa.total_allocated_bytes() - base
    assert stuck and alive > 0
    # the pool rounds each of the 20 calls' buffers up to 64 bytes
    assert accumulator.held_bytes + 20 * 64 >= alive, (accumulator.held_bytes, alive)
    for batch in stuck:
        accumulator.release(batch)
    assert accumulator.held_bytes == 0
