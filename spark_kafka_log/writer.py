"""The batch writer (``df.write.format("pylog")``) and the streaming sink (``writeStream.format("pylog")``).

Where and when each method runs (pyspark's contracts, see ``pyspark/sql/datasource.py``):

* :meth:`PylogBatchWriter.write` / :meth:`PylogStreamWriter.write` -- on the **executors**, once per
  task, with the task's rows as ``pyarrow.RecordBatch``es. One :class:`~spark_kafka_log.producer.TaskProducer`
  per task; returns a :class:`PylogCommitMessage` after every record was acknowledged.
* :meth:`PylogBatchWriter.commit` / :meth:`PylogBatchWriter.abort` -- on the **driver**, once per job, in a
  fresh Python process on the unpickled writer: everything they report comes from the commit messages.
* :meth:`PylogStreamWriter.commit` / ``abort`` -- on the **driver**, once per micro-batch, on a NEW writer
  built by ``DataSource.streamWriter()``; commit also records the micro-batch (batch id, producer ids and
  epochs, per-partition offsets) as a small JSON file so exactly-once delivery can build on it.

Delivery semantics. With idempotence (the default): a resent request is never written twice, and a
retried task resumes the producer id of its failed attempt and skips what that attempt already wrote
(:mod:`spark_kafka_log.task_state`), so task retries do not duplicate either. Without idempotence:
at-least-once, as Spark's Kafka sink (a retried task rewrites its rows). Nothing is rolled back when a job
aborts; ``abort()`` logs what finished tasks wrote.

Test-only fault injection (``pylog.test.failAfterRequests``) raises :class:`InjectedFailure` in the first
attempt of each task; see :class:`~spark_kafka_log.options.WriterOptions`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from broker_runtime.launch import embedded_broker_address
from spark_kafka_log.options import WriterOptions
from spark_kafka_log.producer import PartitionStats, TaskProducer
from spark_kafka_log.schema import InputLayout
from spark_kafka_log.task_state import TaskIdentity, forget_write

__all__ = [
    "InjectedFailure",
    "PylogBatchWriter",
    "PylogCommitMessage",
    "PylogStreamWriter",
    "summarize",
]

log = logging.getLogger("spark_kafka_log.writer")


def _visible_log() -> logging.Logger:
    """The writer's logger; in Spark's driver-side Python worker nothing configures logging, so the
    commit summary gets a stderr handler there (stderr reaches the driver's console / log)."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    return log


class InjectedFailure(RuntimeError):
    """Raised by the test-only ``pylog.test.failAfterRequests`` option; never in production."""


@dataclass
class PylogCommitMessage(WriterCommitMessage):
    """What one write task delivered, sent from the executor to the driver's commit()."""

    write_id: str
    task: int
    attempt: int
    records: int
    recovered: int
    bytes: int
    producer_id: int
    producer_epoch: int
    seconds: float
    partitions: list[PartitionStats] = field(default_factory=list)


def _servers(options: WriterOptions, resolved: str) -> str:
    if options.bootstrap_servers is not None:
        return options.bootstrap_servers
    # Executors FIND the embedded broker the driver started (never start one: an executor on another
    # machine must not grow its own broker); the discovery file wins if the broker moved since.
    return embedded_broker_address(options.data_dir) or resolved


def _write_task(
    options: WriterOptions,
    layout: InputLayout,
    resolved: str,
    write_id: str,
    iterator: Iterator[pa.RecordBatch],
) -> PylogCommitMessage:
    ctx = TaskContext.get()
    task = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.attemptNumber() if ctx is not None else 0
    started = time.perf_counter()

    def on_ack(acknowledged: int) -> None:
        if (
            options.fail_after_requests is not None
            and attempt == 0
            and acknowledged >= options.fail_after_requests
        ):
            raise InjectedFailure(
                f"pylog.test.failAfterRequests={options.fail_after_requests}: injected failure of task "
                f"{task} attempt {attempt} after {acknowledged} acknowledged request(s) (test-only option)"
            )

    producer = TaskProducer(
        options,
        _servers(options, resolved),
        layout,
        identity=TaskIdentity(write_id, task, attempt),
        on_acknowledged=on_ack,
    )
    try:
        for batch in iterator:
            producer.write(batch)
        producer.flush()
    finally:
        producer.close()
    stats = sorted(producer.stats.values(), key=lambda s: (s.topic, s.partition))
    return PylogCommitMessage(
        write_id=write_id,
        task=task,
        attempt=attempt,
        records=sum(s.records for s in stats),
        recovered=sum(s.recovered for s in stats),
        bytes=sum(s.bytes for s in stats),
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        seconds=time.perf_counter() - started,
        partitions=[s for s in stats if s.records],
    )


def _merge(messages: Sequence[WriterCommitMessage | None]) -> dict[tuple[str, int], PartitionStats]:
    merged: dict[tuple[str, int], PartitionStats] = {}
    for m in messages:
        if not isinstance(m, PylogCommitMessage):
            continue
        for s in m.partitions:
            tp = (s.topic, s.partition)
            acc = merged.setdefault(tp, PartitionStats(s.topic, s.partition))
            acc.records += s.records
            acc.bytes += s.bytes
            if s.first_offset >= 0 and (acc.first_offset < 0 or s.first_offset < acc.first_offset):
                acc.first_offset = s.first_offset
            acc.last_offset = max(acc.last_offset, s.last_offset)
    return merged


def summarize(messages: Sequence[WriterCommitMessage | None]) -> str:
    """One line: records, bytes, tasks and per-partition offset ranges of the delivered commit messages."""
    done = [m for m in messages if isinstance(m, PylogCommitMessage)]
    merged = _merge(done)
    records = sum(m.records for m in done)
    size = sum(m.bytes for m in done)
    ranges = ", ".join(
        f"{t}-{p}@{s.first_offset}..{s.last_offset}" if s.first_offset >= 0 else f"{t}-{p}({s.records})"
        for (t, p), s in sorted(merged.items())
    )
    recovered = sum(m.recovered for m in done)
    return (
        f"{records} records, {size} bytes, {len(merged)} partition(s) from {len(done)} task(s)"
        + (f" (+{recovered} records written by failed attempts, not rewritten)" if recovered else "")
        + (f": {ranges}" if ranges else "")
    )


class PylogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("pylog")``: built on the driver by ``DataSource.writer()`` after validation."""

    def __init__(self, options: WriterOptions, layout: InputLayout, resolved_servers: str) -> None:
        self.options = options
        self.layout = layout
        self.resolved_servers = resolved_servers
        #: Shared by all tasks and attempts of this write (names the task state files).
        self.write_id = f"write-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PylogCommitMessage:
        """Executor: send this task's rows; return what was acknowledged."""
        return _write_task(self.options, self.layout, self.resolved_servers, self.write_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        """Driver, after every task succeeded: log the one-line summary."""
        forget_write(self.options.producer_state_dir, self.write_id)
        _visible_log().info("pylog write committed: %s", summarize(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        """Driver, after a task failed for good: say what may already be in the log (at-least-once)."""
        forget_write(self.options.producer_state_dir, self.write_id)
        done = [m for m in messages if isinstance(m, PylogCommitMessage)]
        _visible_log().warning(
            "pylog write aborted: %d of %d task(s) finished and their records stay in the log (%s); "
            "failed tasks may have written part of their rows before failing (at-least-once: nothing "
            "is rolled back)",
            len(done),
            len(messages),
            summarize(done),
        )


class PylogStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("pylog")``: a new instance per micro-batch (``DataSource.streamWriter()``)."""

    def __init__(
        self, options: WriterOptions, layout: InputLayout, resolved_servers: str, state_dir: str
    ) -> None:
        self.options = options
        self.layout = layout
        self.resolved_servers = resolved_servers
        self.state_dir = state_dir
        self.write_id = f"stream-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PylogCommitMessage:
        """Executor: send this task's rows of the micro-batch."""
        return _write_task(self.options, self.layout, self.resolved_servers, self.write_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        """Driver: log the micro-batch summary and record it under the sink's state directory."""
        summary = summarize(messages)
        self._record(messages, batchId, "committed")
        self._forget(messages)
        _visible_log().info("pylog stream batch %d committed: %s", batchId, summary)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        """Driver: a task of the micro-batch failed; records of finished tasks stay (at-least-once)."""
        self._record(messages, batchId, "aborted")
        self._forget(messages)
        _visible_log().warning(
            "pylog stream batch %d aborted: records already written stay in the log (at-least-once): %s",
            batchId,
            summarize(messages),
        )

    def _forget(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        # This writer is a new instance (streamWriter() per micro-batch): the write ids come from the tasks.
        for write_id in {m.write_id for m in messages if isinstance(m, PylogCommitMessage)}:
            forget_write(self.options.producer_state_dir, write_id)

    def _record(self, messages: Sequence[WriterCommitMessage | None], batch_id: int, status: str) -> None:
        done = [m for m in messages if isinstance(m, PylogCommitMessage)]
        doc = {
            "batchId": batch_id,
            "status": status,
            "committedAtMs": int(time.time() * 1000),
            "tasks": len(messages),
            "failedTasks": len(messages) - len(done),
            "records": sum(m.records for m in done),
            "producers": [
                {"task": m.task, "attempt": m.attempt, "producerId": m.producer_id, "epoch": m.producer_epoch}
                for m in done
            ],
            "partitions": [asdict(s) for s in _merge(done).values()],
        }
        os.makedirs(self.state_dir, exist_ok=True)
        path = os.path.join(self.state_dir, f"{batch_id}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=1)
        os.replace(tmp, path)
