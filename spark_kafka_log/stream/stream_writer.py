"""The streaming sink, ``writeStream.format("pylog")``: exactly-once per micro-batch across query restarts by default.

Runs on: driver (planning, commit); executors (task).

Where and when each method runs (probed on PySpark 4.3; see :mod:`spark_kafka_log.exactly_once.stream_commit`):

* ``DataSource.streamWriter()`` builds a :class:`PylogStreamWriter` on the **driver** twice per micro-batch: in
  ``pyspark.sql.worker.write_into_data_source`` BEFORE the micro-batch's tasks start (that instance is pickled
  into the tasks), and in ``pyspark.sql.worker.python_streaming_sink_runner`` to run ``commit()`` /
  ``abort()`` after they ended. Building it resolves a micro-batch an earlier run left half-committed
  (:func:`~spark_kafka_log.exactly_once.stream_commit.resolve_pending`), which must precede the tasks' InitProducerId.
* :meth:`PylogStreamWriter.write` -- **executors**, once per task: the task's rows in one transaction whose id
  is stable per (query, Spark partition), flushed, not committed
  (:func:`spark_kafka_log.write.writer.write_task`).
* :meth:`PylogStreamWriter.commit` / :meth:`PylogStreamWriter.abort` -- **driver**, once per micro-batch:
  the commit protocol of :mod:`spark_kafka_log.exactly_once.stream_commit`, recorded in the sink log
  (:mod:`spark_kafka_log.exactly_once.sink_log`, ``<checkpointLocation>/pylog-sink/``).

``pylog.deliveryGuarantee=at-least-once`` opts out: no transactions, no sink log; the idempotent producer as
for batch writes (task and stage re-runs do not duplicate), but a micro-batch that a restarted query re-runs is
written again; pylog then keeps nothing in the checkpoint.

The writer keeps only picklable, immutable state (options, layout, servers, :class:`SinkTarget`).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_kafka_log.common.commit_summary import PylogCommitMessage, summarize
from spark_kafka_log.common.driver_log import driver_log
from spark_kafka_log.common.schema import InputLayout
from spark_kafka_log.common.write_provenance import delivery_mode, describe_write, record_write
from spark_kafka_log.common.writer_options import WriterOptions, task_transactional_id
from spark_kafka_log.exactly_once.sink_log import SinkLog
from spark_kafka_log.exactly_once.stream_commit import abort_batch, commit_batch, resolve_pending
from spark_kafka_log.write.task_state import TaskIdentity, forget_write, prepare_write_dir
from spark_kafka_log.write.writer import spark_task, write_task

__all__ = ["PylogStreamWriter", "SinkTarget"]


@dataclass(frozen=True)
class SinkTarget:
    """Where the exactly-once sink keeps its log and whose transactional ids it uses."""

    #: The query's checkpoint: a local directory or an fsspec URL (:func:`spark_kafka_log.exactly_once.sink_log.checkpoint_dir`).
    checkpoint: str
    #: Spark's query id (``<checkpoint>/metadata``), stable across restarts.
    query_id: str


class PylogStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("pylog")``: a new instance per ``streamWriter()`` call (see the module docstring).

    ``sink`` None: at-least-once (``pylog.deliveryGuarantee=at-least-once``), else exactly-once into ``sink``.
    """

    def __init__(
        self,
        options: WriterOptions,
        layout: InputLayout,
        resolved_servers: str,
        sink: SinkTarget | None,
        called_ms: int = -1,
    ) -> None:
        self.options = options
        self.layout = layout
        self.resolved_servers = resolved_servers
        self.sink = sink
        self.write_id = f"stream-{uuid.uuid4().hex}"
        if sink is not None:
            # Before any task of this micro-batch calls InitProducerId (which would abort a prepared
            # transaction): finish what an earlier run left prepared, or fail naming it.
            resolve_pending(SinkLog(sink.checkpoint), options, resolved_servers)
        # Diagnostics for the sink log (where a commit's time goes): see sink_log's format.
        self.stamps = (_process_started_ms(), called_ms, int(time.time() * 1000))
        if (
            sink is None and options.enable_idempotence
        ):  # tasks require the write's state directory (task_state)
            prepare_write_dir(options.producer_state_dir, self.write_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PylogCommitMessage:
        """Executor: send this task's rows of the micro-batch (in its transaction when exactly-once)."""
        task, attempt = spark_task()
        identity = TaskIdentity(self.write_id, task, attempt)
        tid = None
        if self.sink is not None:
            assert self.options.transactional_id_prefix is not None
            tid = task_transactional_id(self.options.transactional_id_prefix, self.sink.query_id, task)
        return write_task(self.options, self.layout, self.resolved_servers, identity, iterator, tid)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        """Driver: make the micro-batch visible exactly once (or, at-least-once, log its summary)."""
        if self.sink is not None:
            log = SinkLog(self.sink.checkpoint)
            if commit_batch(
                log, self.options, self.resolved_servers, self.sink.query_id, batchId, messages, self.stamps
            ):
                self._record(messages, batchId, self.sink.query_id)
            return
        self._forget(messages)
        driver_log().info("pylog stream batch %d committed: %s", batchId, summarize(messages))
        self._record(messages, batchId, None)

    def _record(
        self, messages: Sequence[WriterCommitMessage | None], batch_id: int, query: str | None
    ) -> None:
        """The micro-batch is visible: record its provenance (never fails it, see write_provenance)."""
        ids = sorted({m.write_id for m in messages if isinstance(m, PylogCommitMessage)})
        delivery = delivery_mode(self.options, stream=True, exactly_once=self.sink is not None)
        write_id = ids[0] if ids else self.write_id
        record_write(
            self.options,
            self.resolved_servers,
            describe_write(write_id, messages, delivery, query_id=query, batch_id=batch_id),
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        """Driver: a task of the micro-batch failed for good."""
        if self.sink is not None:
            abort_batch(self.options, self.resolved_servers, self.sink.query_id, batchId, messages)
            return
        self._forget(messages)
        driver_log().warning(
            "pylog stream batch %d aborted: records already written stay in the log (at-least-once): %s",
            batchId,
            summarize(messages),
        )

    def _forget(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        # This writer is a new instance (streamWriter() per micro-batch): the write ids come from the tasks,
        # and this instance's own (unused) state directory goes too. When every task failed, no message names
        # the tasks' write id and its directory stays (logged by nobody; harmless, see task_state).
        ids = {m.write_id for m in messages if isinstance(m, PylogCommitMessage)} | {self.write_id}
        for write_id in ids:
            forget_write(self.options.producer_state_dir, write_id)


def _process_started_ms() -> int:
    """When this process started, epoch ms (Linux ``/proc``; -1 elsewhere or when unreadable)."""
    try:
        with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, after "pid (comm)"
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return -1
    return int((boot + ticks / os.sysconf("SC_CLK_TCK")) * 1000)
