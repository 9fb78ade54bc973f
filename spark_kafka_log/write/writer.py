"""The batch writer (``df.write.format("pylog")``), and the write task the streaming sink runs too.

Runs on: driver (planning, commit); executors (task).

Where and when each method runs (pyspark's contracts, see ``pyspark/sql/datasource.py``):

* :meth:`PylogBatchWriter.write` (and the streaming sink's ``write``) -- on the **executors**, once per
  task, with the task's rows as ``pyarrow.RecordBatch``es. One :class:`~spark_kafka_log.write.producer.TaskProducer`
  per task; returns a :class:`PylogCommitMessage` after every record was acknowledged.
* :meth:`PylogBatchWriter.commit` / :meth:`PylogBatchWriter.abort` -- on the **driver**, once per job, in a
  fresh Python process on the unpickled writer: everything they report comes from the commit messages.
* The streaming sink's ``commit`` / ``abort`` (the exactly-once protocol across query restarts):
  :mod:`spark_kafka_log.stream.stream_writer`, whose tasks run :func:`write_task` too.

Delivery semantics. With idempotence (the default): a resent request is never written twice, and any re-run
of a task (task retry, stage retry, speculation) resumes the producer id of the Spark partition's earlier
attempt and skips what it already wrote (:mod:`spark_kafka_log.write.task_state`: keyed by write id and Spark
partition id, one attempt at a time by a lock), so re-runs do not duplicate either. The writer's constructor
(driver) creates the write's producer-state directory, which every task requires (an executor that cannot
reach it fails, naming it); ``commit()``/``abort()`` remove it. Without idempotence:
at-least-once, as Spark's Kafka sink (a retried task rewrites its rows). Nothing is rolled back when a job
aborts; ``abort()`` logs what finished tasks wrote.

Transactional batch writes (``kafka.transactional.id``): each task writes inside its own transaction, id
``<prefix>-<write id>-<Spark partition id>`` (every attempt of a partition shares it, so a later attempt fences
the earlier one), and flushes without committing. ``commit()`` writes a commit intent, commits every task's
transaction and removes the intent (:func:`spark_kafka_log.exactly_once.batch_commit.commit_write`); ``abort()`` aborts the
transactions of the finished tasks. A job that fails leaves nothing visible to read_committed readers.

What tasks report and the summary line the driver logs: :mod:`spark_kafka_log.common.commit_summary`; the record of
each committed write that the web console shows: :mod:`spark_kafka_log.common.write_provenance`. Test-only
fault injection (``pylog.test.*``): :mod:`spark_kafka_log.common.fault_injection`, handed to the task's producer only
when such an option is given.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    WriterCommitMessage,
)

from broker_runtime.errors import TransactionCommitError
from broker_runtime.launch.embedded import embedded_broker_address
from spark_kafka_log.common.commit_summary import PylogCommitMessage, summarize
from spark_kafka_log.common.driver_log import driver_log
from spark_kafka_log.common.fault_injection import TaskFaults
from spark_kafka_log.common.schema import InputLayout
from spark_kafka_log.common.write_provenance import delivery_mode, describe_write, record_write
from spark_kafka_log.common.writer_options import WriterOptions, task_transactional_id
from spark_kafka_log.exactly_once.batch_commit import CommitIntent, commit_write, intent_path
from spark_kafka_log.exactly_once.task_transactions import (
    end_transactions,
    only_final_failures,
    transactions_of,
)
from spark_kafka_log.write.producer import TaskProducer
from spark_kafka_log.write.task_state import TaskIdentity, forget_write, prepare_write_dir

__all__ = ["PylogBatchWriter", "spark_task", "write_task"]


def _servers(options: WriterOptions, resolved: str) -> str:
    if options.bootstrap_servers is not None:
        return options.bootstrap_servers
    # Executors FIND the embedded broker the driver started (never start one: an executor on another
    # machine must not grow its own broker); the discovery file wins if the broker moved since.
    return embedded_broker_address(options.data_dir) or resolved


def spark_task() -> tuple[int, int]:
    """(partition id, attempt number) of the running Spark task; (0, 0) outside Spark."""
    ctx = TaskContext.get()
    return (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)


def write_task(
    options: WriterOptions,
    layout: InputLayout,
    resolved: str,
    identity: TaskIdentity,
    iterator: Iterator[pa.RecordBatch],
    transactional_id: str | None = None,
) -> PylogCommitMessage:
    """Executor: write one task attempt's rows and return what it delivered (raises if anything failed).

    With ``transactional_id`` the rows go into one transaction, flushed but not committed (the message
    carries it to the driver); a failing attempt aborts it."""
    task, attempt, write_id = identity.task, identity.attempt, identity.write_id
    started = time.perf_counter()
    faults = None if options.faults is None else TaskFaults(options.faults, task, attempt, write_id)
    producer = TaskProducer(
        options,
        _servers(options, resolved),
        layout,
        identity=identity,
        faults=faults,
        transactional_id=transactional_id,
    )
    try:
        for batch in iterator:
            producer.write(batch)
        producer.flush()
    except BaseException:
        producer.abort_transaction()
        raise
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
        partitions=[s for s in stats if s.records or s.recovered],
        transactional_id=transactional_id if producer.in_transaction else None,
        transaction_started_ms=producer.transaction_started_ms,
        finished_ms=int(time.time() * 1000),
    )


class PylogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("pylog")``: built on the driver by ``DataSource.writer()`` after validation."""

    def __init__(self, options: WriterOptions, layout: InputLayout, resolved_servers: str) -> None:
        self.options = options
        self.layout = layout
        self.resolved_servers = resolved_servers
        #: Shared by all tasks and attempts of this write (names the task state files).
        self.write_id = f"write-{uuid.uuid4().hex}"
        # Tasks of an idempotent write require the write's state directory (task_state); transactional tasks
        # need none (a retry fences the earlier attempt instead of resuming it).
        if options.enable_idempotence and not options.transactional:
            prepare_write_dir(options.producer_state_dir, self.write_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PylogCommitMessage:
        """Executor: send this task's rows; return what was acknowledged (in a transaction: not committed)."""
        task, attempt = spark_task()
        identity = TaskIdentity(self.write_id, task, attempt)
        prefix = self.options.transactional_id_prefix
        tid = None if prefix is None else task_transactional_id(prefix, self.write_id, task)
        return write_task(self.options, self.layout, self.resolved_servers, identity, iterator, tid)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        """Driver, after every task succeeded: commit the tasks' transactions (transactional); log the summary."""
        if self.options.transactional:
            self._commit_transactions(messages)
        else:
            forget_write(self.options.producer_state_dir, self.write_id)
        driver_log().info("pylog write committed: %s", summarize(messages))
        # Visible now: recording it can no longer fail the write (write_provenance warns and counts instead).
        delivery = delivery_mode(self.options, stream=False)
        record_write(
            self.options,
            _servers(self.options, self.resolved_servers),
            describe_write(self.write_id, messages, delivery),
        )

    def _commit_transactions(self, messages: list[WriterCommitMessage | None]) -> None:
        opts = self.options
        txns = transactions_of(messages, opts.transaction_timeout_ms)
        intent = CommitIntent(
            write_id=self.write_id,
            bootstrap_servers=_servers(opts, self.resolved_servers),
            transactions=tuple(txns),
            embedded_data_dir=opts.data_dir if opts.embedded else None,
            client_id=opts.client_id,
            request_timeout_ms=opts.request_timeout_ms,
            transaction_timeout_ms=opts.transaction_timeout_ms,
        )
        faults = opts.faults
        commit_write(
            opts.transaction_state_dir,
            intent,
            kill_after_intent=None if faults is None else faults.kill_driver_after_commit_intent,
            stall_after_intent=None if faults is None else faults.stall_commit_after_prepared,
            security=opts.security,
        )
        driver_log().info("pylog write: committed %d transaction(s) of write %s", len(txns), self.write_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        """Driver, after a task failed for good (or commit() failed): roll back what can be rolled back."""
        if self.options.transactional:
            self._abort_transactions(messages)
            return
        forget_write(self.options.producer_state_dir, self.write_id)
        done = [m for m in messages if isinstance(m, PylogCommitMessage)]
        driver_log().warning(
            "pylog write aborted: %d of %d task(s) finished and their records stay in the log (%s); "
            "failed tasks may have written part of their rows before failing (at-least-once: nothing "
            "is rolled back)",
            len(done),
            len(messages),
            summarize(done),
        )

    def _abort_transactions(self, messages: list[WriterCommitMessage | None]) -> None:
        opts = self.options
        txns = transactions_of(messages, opts.transaction_timeout_ms)
        done = [m for m in messages if isinstance(m, PylogCommitMessage)]
        failed_tasks = len(messages) - len(done)
        pending = intent_path(opts.transaction_state_dir, self.write_id)
        if os.path.exists(pending):
            # commit() got past its check and failed half-way: aborting now could leave part of the write
            # visible; leave the choice to the user (commit_write's error named the command).
            driver_log().warning(
                "pylog write aborted while its commit was under way: the transactions not yet committed stay "
                "open; finish with python -m spark_kafka_log.transactions resolve --commit %s (or --abort), "
                "before kafka.transaction.timeout.ms=%d aborts them",
                pending,
                opts.transaction_timeout_ms,
            )
            return
        others = (
            f"the transactions of {failed_tasks} failed task(s) were aborted by the failing attempts, fenced by "
            f"their retries, or are aborted by the broker after kafka.transaction.timeout.ms="
            f"{opts.transaction_timeout_ms}"
        )
        try:
            end_transactions(
                _servers(opts, self.resolved_servers),
                txns,
                commit=False,
                client_id=opts.client_id,
                request_timeout_ms=opts.request_timeout_ms,
                security=opts.security,
            )
        except TransactionCommitError as exc:
            final = only_final_failures(exc)
            driver_log().warning(
                "pylog write aborted: %d of %d task(s) had finished; aborting their transactions failed for "
                "some: %s; %s%s",
                len(done),
                len(messages),
                exc,
                others,
                "" if final else "; the broker aborts those at their timeout",
            )
            return
        driver_log().warning(
            "pylog write aborted: %d of %d task(s) had finished and their %d transaction(s) were aborted; %s; "
            "nothing of this write is visible to read_committed readers",
            len(done),
            len(messages),
            len(txns),
            others,
        )
