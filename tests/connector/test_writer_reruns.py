"""Re-runs of a write task in idempotent mode, at the task level (``write_task``) against a real broker.

Spark re-runs a task as a task retry (attempt 1, 2, ...), as a task of a re-attempted stage (attempt numbers
restart at 0) or as a speculative copy running next to the first. These tests drive :func:`write_task` with
the identities Spark would give those attempts (no Spark: a stage retry cannot be forced reliably in local
mode), with the driver's part (:func:`prepare_write_dir`) done first, as ``PylogBatchWriter`` does.
Failures are injected with the test-only ``pylog.test.failAfterRequests`` option (first attempt only: the
test hands the faults to the attempt that must fail).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from broker_runtime.errors import InjectedFailure
from spark_kafka_log.common.fault_injection import TaskFaults
from spark_kafka_log.common.schema import InputLayout
from spark_kafka_log.common.writer_options import WriterOptions, parse_writer_options
from spark_kafka_log.write.producer import TaskProducer
from spark_kafka_log.write.task_state import (
    ConcurrentAttemptError,
    ProducerStateDirError,
    TaskIdentity,
    forget_write,
    prepare_write_dir,
)
from spark_kafka_log.write.writer import write_task
from tests.connector.kafka_peer import consume_all

pytestmark = pytest.mark.timeout(120)

LAYOUT = InputLayout(value="value", key="key")


def _batches(count: int, rows: int, value_bytes: int = 64, key: str | None = None) -> list[pa.RecordBatch]:
    """Rows 0..count*rows-1: key ``k<i>`` (or ``key`` for all rows), value = the row number, padded."""
    out = []
    for b in range(count):
        ids = np.arange(b * rows, (b + 1) * rows)
        keys = pa.array([key or f"k{i}" for i in ids])
        values = pa.array([f"{i:08d}".encode().ljust(value_bytes, b".") for i in ids], pa.binary())
        out.append(pa.RecordBatch.from_arrays([keys, values], ["key", "value"]))
    return out


def _setup(broker: str, tmp_path: Path, **extra: str) -> tuple[WriterOptions, str, str]:
    topic = f"r-{uuid.uuid4().hex[:10]}"
    options = parse_writer_options(
        {
            "kafka.bootstrap.servers": broker,
            "topic": topic,
            "kafka.batch.size": "2048",
            "kafka.linger.ms": "0",
            "pylog.producerStateDir": str(tmp_path / "state"),
            **extra,
        }
    )
    write_id = f"write-{uuid.uuid4().hex}"
    prepare_write_dir(options.producer_state_dir, write_id)
    return options, topic, write_id


def _failing(options: WriterOptions, requests: int) -> WriterOptions:
    faults = parse_writer_options(
        {"kafka.bootstrap.servers": "x:1", "topic": "t", "pylog.test.failAfterRequests": str(requests)}
    ).faults
    return WriterOptions(**{**options.__dict__, "faults": faults})


def _values(broker: str, topic: str) -> list[bytes]:
    return [m.value or b"" for m in consume_all(broker, topic, 3)]


def _assert_exactly_once(broker: str, topic: str, rows: int) -> None:
    values = _values(broker, topic)
    assert len(values) == rows, f"{len(values)} records in the log for {rows} rows"
    assert len(set(values)) == rows


def test_a_stage_retry_whose_attempt_numbers_restart_at_zero_writes_no_duplicates(
    broker: str, tmp_path: Path
) -> None:
    """Two attempts numbered 0 of one Spark partition: the second resumes the first's producer."""
    options, topic, write_id = _setup(broker, tmp_path)
    batches = _batches(4, 500)
    with pytest.raises(InjectedFailure):
        write_task(_failing(options, 3), LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(batches))
    message = write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(batches))
    assert message.recovered > 0 and message.records + message.recovered == 2000
    _assert_exactly_once(broker, topic, 2000)


def test_a_retry_after_a_failure_with_requests_in_flight_writes_exactly_once(
    broker: str, tmp_path: Path
) -> None:
    """The first attempt fails with up to 4 requests still unanswered; the retry starts right after it."""
    batches = _batches(10, 1000, value_bytes=1024)  # 10 MiB; requests of up to 1 MiB, 5 in flight
    for _ in range(3):  # a few times: without the fix the retry's scan races the broker's appends
        options, topic, write_id = _setup(
            broker,
            tmp_path,
            **{"kafka.batch.size": "524288", "kafka.max.in.flight.requests.per.connection": "5"},
        )
        with pytest.raises(InjectedFailure):
            write_task(_failing(options, 5), LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(batches))
        message = write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 1), iter(batches))
        assert message.recovered > 0 and message.records + message.recovered == 10000
        _assert_exactly_once(broker, topic, 10000)


def test_a_retry_after_more_than_8_mib_to_one_partition_pages_through_the_log(
    broker: str, tmp_path: Path
) -> None:
    """The first attempt writes ~10 MiB to one partition before failing: the resume scan needs >1 fetch."""
    options, topic, write_id = _setup(
        broker, tmp_path, **{"kafka.batch.size": "262144", "kafka.max.in.flight.requests.per.connection": "1"}
    )
    batches = _batches(12, 1000, value_bytes=1024, key="one")  # 12 MiB, every row to the same partition
    with pytest.raises(InjectedFailure):
        write_task(_failing(options, 40), LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(batches))
    message = write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 1), iter(batches))
    assert message.recovered * 1024 > 8 << 20, message.recovered
    assert message.records + message.recovered == 12000
    _assert_exactly_once(broker, topic, 12000)


def test_a_concurrent_attempt_of_the_same_partition_fails_naming_partition_and_lock(
    broker: str, tmp_path: Path
) -> None:
    """Speculation: attempt 1 starts while attempt 0 still writes; it stops before sending anything. A later
    attempt after attempt 0 finished resumes it and finds nothing left to write."""
    options, topic, write_id = _setup(broker, tmp_path)
    batches = _batches(4, 500)
    first = TaskProducer(options, broker, LAYOUT, identity=TaskIdentity(write_id, 3, 0))
    try:
        first.write(batches[0])
        lock = Path(options.producer_state_dir) / write_id / "task-3.lock"
        with pytest.raises(ConcurrentAttemptError, match=rf"Spark partition 3 .*{lock}"):
            write_task(options, LAYOUT, broker, TaskIdentity(write_id, 3, 1), iter(batches))
        for batch in batches[1:]:
            first.write(batch)
        first.flush()
    finally:
        first.close()
    late = write_task(options, LAYOUT, broker, TaskIdentity(write_id, 3, 2), iter(batches))
    assert (late.records, late.recovered) == (0, 2000)
    _assert_exactly_once(broker, topic, 2000)


def test_a_state_dir_unreachable_at_the_retry_is_an_error_naming_it(broker: str, tmp_path: Path) -> None:
    """The retry runs where the first attempt's state is not visible: it fails, and writes nothing."""
    options, topic, write_id = _setup(broker, tmp_path)
    batches = _batches(4, 500)
    with pytest.raises(InjectedFailure):
        write_task(_failing(options, 3), LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(batches))
    written = len(_values(broker, topic))
    state_dir = options.producer_state_dir
    shutil.move(state_dir, f"{state_dir}.elsewhere")  # as seen from another machine: not there
    with pytest.raises(ProducerStateDirError, match=rf"{state_dir}.*not reachable from this executor"):
        write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 1), iter(batches))
    assert len(_values(broker, topic)) == written
    # The directory exists but not the write's folder (an executor-local directory of the same name).
    os.makedirs(state_dir)
    with pytest.raises(ProducerStateDirError, match=rf"{write_id}.*does not see the driver's directory"):
        write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 1), iter(batches))
    assert len(_values(broker, topic)) == written


def test_a_first_attempt_without_the_write_directory_fails_before_sending(
    broker: str, tmp_path: Path
) -> None:
    options, topic, write_id = _setup(broker, tmp_path)
    write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(_batches(1, 10)))  # 10 records
    with pytest.raises(ProducerStateDirError, match="not reachable from this executor"):
        write_task(options, LAYOUT, broker, TaskIdentity("write-never-prepared", 0, 0), iter(_batches(1, 10)))
    assert len(_values(broker, topic)) == 10


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_state_dir_that_is_not_writable_is_an_error_naming_it(broker: str, tmp_path: Path) -> None:
    options, _, write_id = _setup(broker, tmp_path)
    wdir = Path(options.producer_state_dir) / write_id
    wdir.chmod(0o500)
    try:
        with pytest.raises(ProducerStateDirError, match=rf"{wdir}.*not writable"):
            write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(_batches(1, 10)))
    finally:
        wdir.chmod(0o700)


def test_a_corrupt_state_file_is_an_error_naming_it(broker: str, tmp_path: Path) -> None:
    options, _, write_id = _setup(broker, tmp_path)
    state_file = Path(options.producer_state_dir) / write_id / "task-0.json"
    state_file.write_text("{not json")
    with pytest.raises(ProducerStateDirError, match=rf"{state_file}.*cannot be read"):
        write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(_batches(1, 10)))


def test_forget_write_removes_the_state_of_a_finished_write(broker: str, tmp_path: Path) -> None:
    options, _, write_id = _setup(broker, tmp_path)
    write_task(options, LAYOUT, broker, TaskIdentity(write_id, 0, 0), iter(_batches(1, 10)))
    assert (Path(options.producer_state_dir) / write_id / "task-0.json").exists()
    forget_write(options.producer_state_dir, write_id)
    assert os.listdir(options.producer_state_dir) == []
    forget_write(options.producer_state_dir, write_id)  # already gone: nothing to say


def test_task_faults_fail_only_the_first_attempt() -> None:
    """The helper above relies on it: the faults apply to attempt 0 only."""
    faults = _failing(parse_writer_options({"kafka.bootstrap.servers": "x:1", "topic": "t"}), 1).faults
    assert faults is not None
    TaskFaults(faults, 0, 1).after_acknowledged(5)
    with pytest.raises(InjectedFailure):
        TaskFaults(faults, 0, 0).after_acknowledged(5)
