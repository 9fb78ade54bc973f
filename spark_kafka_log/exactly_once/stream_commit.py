"""The exactly-once streaming sink's commit protocol: one Kafka transaction per task, committed per micro-batch
by the driver, recorded in the sink log so a restarted query neither loses nor repeats a micro-batch.

Runs on: driver (planning, commit).

Where this runs: the **driver**, in the Python workers where PySpark calls ``streamWriter()`` and ``commit()`` /
``abort()``; one micro-batch at a time (Spark plans micro-batch N+1 only after N's ``commit()`` returned). No
threads. The tasks' side (a transactional producer per task, flushed but never committed) is
:mod:`spark_kafka_log.write.producer`; EndTxn on the tasks' behalf is :mod:`spark_kafka_log.exactly_once.task_transactions`.

When PySpark calls what (probed on 4.3, see the README's streaming sink section): for every micro-batch,
``streamWriter()`` runs in ``pyspark.sql.worker.write_into_data_source`` on the driver BEFORE any task of the
micro-batch starts (the writer it returns is pickled into the tasks), then the tasks run, then
``commit(messages, batchId)`` or ``abort(...)`` runs on a NEW writer built by another ``streamWriter()`` call in
``pyspark.sql.worker.python_streaming_sink_runner``. The batch id is only known in ``commit()``/``abort()``.

Transactional ids: ``<kafka.transactional.id prefix, default pylog-stream>-<query id>-<Spark partition id>``
(:func:`spark_kafka_log.common.writer_options.task_transactional_id`), the query id being Spark's (stable across restarts from
one checkpoint, ``<checkpoint>/metadata``). Every task attempt calls InitProducerId with its id,
which fences any earlier holder (a failed attempt, a zombie of a crashed run, the previous micro-batch's task)
and aborts the transaction it left open.

The protocol, per micro-batch N (sink log: :mod:`spark_kafka_log.exactly_once.sink_log`):

1. ``streamWriter()`` -- :func:`resolve_pending`: if the newest sink-log entry is ``prepared`` (an earlier run
   died mid-commit), finish it: EndTxn(commit) for each recorded transaction with the recorded producer id and
   epoch (a transaction already committed answers success again), then mark it ``committed``. This must happen
   before the tasks' InitProducerId, which would abort a prepared transaction. If it cannot be finished (the
   broker aborted the transactions, e.g. after ``transaction.timeout.ms`` while the query was down), fail with
   :class:`~broker_runtime.errors.StreamingSinkError` naming the batch and the way out.
2. Tasks write inside their transactions and return (transactional id, producer id, epoch).
3. ``commit(messages, N)`` -- :func:`commit_batch`: if N <= the newest committed batch id, this is a re-run of
   a micro-batch whose rows are already in the topic (the driver died after our commit, before Spark's commit
   log): abort the re-run's transactions, nothing becomes visible twice. Else check that every transaction is
   still open (else abort them all and fail: nothing committed, no entry, a restart writes N again), write the
   entry ``prepared`` (with every transaction), EndTxn(commit) each, write it ``committed``.
4. ``abort(messages, N)`` -- :func:`abort_batch`: abort the finished tasks' transactions and fence the failed
   tasks' ids (their open transactions are aborted); nothing of N becomes visible.

Failure anywhere leaves a state the next run resolves: before ``prepared`` -- the open transactions are aborted
by the re-run's InitProducerId and the micro-batch is written again; between ``prepared`` and ``committed`` --
step 1 finishes it and step 3 drops the re-run; after ``committed`` -- step 3 drops the re-run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import asdict

from pyspark.sql.datasource import WriterCommitMessage

from broker_runtime.client import KafkaClient
from broker_runtime.errors import KafkaError, StreamingSinkError
from spark_kafka_log.common.commit_summary import PylogCommitMessage, merge_partitions, summarize
from spark_kafka_log.common.connections import drop_kept_client, kept_client, writer_client
from spark_kafka_log.common.driver_log import driver_log
from spark_kafka_log.common.fault_injection import stall_commit
from spark_kafka_log.common.writer_options import WriterOptions, task_transactional_id
from spark_kafka_log.exactly_once.sink_log import PREPARED, SinkEntry, SinkLog
from spark_kafka_log.exactly_once.task_transactions import (
    STREAM_MICRO_BATCH,
    TaskTransaction,
    TransactionCommitError,
    check_transactions,
    commit_client,
    end_transactions,
    transactions_of,
)

__all__ = ["abort_batch", "commit_batch", "resolve_pending"]


def _end(
    options: WriterOptions,
    servers: str,
    txns: Sequence[TaskTransaction],
    commit: bool,
    client: KafkaClient | None = None,
) -> None:
    """EndTxn(commit or abort) for every transaction of ``txns`` (raises TransactionCommitError)."""
    end_transactions(
        servers, txns, commit, wording=STREAM_MICRO_BATCH, client=client, **options.client_settings()
    )


def _kept_client(options: WriterOptions, servers: str) -> KafkaClient:
    """The commit client this process keeps across micro-batches (see :func:`kept_client`): PySpark runs
    ``commit()`` in a driver Python worker it reuses for the query's next micro-batches (4.3), so a commit
    saves a connection and a FindCoordinator per transactional id. A failed commit drops it."""
    settings = options.client_settings()
    return kept_client(_KEPT, (servers, *settings.values()), lambda: commit_client(servers, **settings))


_KEPT = "stream-commit"


def resolve_pending(log: SinkLog, options: WriterOptions, servers: str) -> SinkEntry | None:
    """Finish a micro-batch an earlier run left ``prepared``; the newest entry afterwards (None: empty log)."""
    entry = log.newest()
    if entry is None or entry.committed:
        return entry
    started = time.perf_counter()
    try:
        _end(options, servers, entry.transactions, commit=True)
    except TransactionCommitError as e:
        raise StreamingSinkError(
            f"pylog streaming sink: micro-batch {entry.batch_id} was prepared by an earlier run of this query "
            f"({log.path(entry.batch_id)}) but its commit cannot be finished: {e}. Its records are not visible "
            "to read_committed readers (its transactions were aborted, e.g. kafka.transaction.timeout.ms ran out "
            "while the query was down, or another producer took a transactional id). To write the micro-batch "
            f"again, delete {log.path(entry.batch_id)} and restart the query (Spark re-runs it); rows of "
            "transactions this message reports as committed would then be written twice. To avoid it, set "
            "kafka.transaction.timeout.ms above the longest time the query may stay down"
        ) from None
    log.mark_committed(entry)
    driver_log().warning(
        "pylog stream batch %d: finished the commit an earlier run of the query left prepared (%d "
        "transaction(s), %d records, %.0f ms)",
        entry.batch_id,
        len(entry.transactions),
        entry.records,
        (time.perf_counter() - started) * 1000,
    )
    return entry


def commit_batch(
    log: SinkLog,
    options: WriterOptions,
    servers: str,
    query_id: str,
    batch_id: int,
    messages: Sequence[WriterCommitMessage | None],
    writer_stamps: tuple[int, int, int] = (-1, -1, -1),
) -> bool:
    """Driver, ``commit()``: make micro-batch ``batch_id`` visible exactly once (see the module docstring);
    True when this call made it visible, False for a re-run of a micro-batch committed before (dropped).

    ``writer_stamps``: (worker process start, ``streamWriter()`` called, writer built), epoch ms, recorded in
    the sink-log entry as diagnostics."""
    called_ms = int(time.time() * 1000)
    newest = resolve_pending(log, options, servers)
    txns = transactions_of(messages, options.transaction_timeout_ms)
    if newest is not None and batch_id <= newest.batch_id:
        _abort_rerun(options, servers, batch_id, newest, txns)
        return False
    # One client for the check and the EndTxns, kept by this process for the next micro-batch's commit.
    client = _kept_client(options, servers)
    try:
        _prepare_and_commit(
            log, options, servers, query_id, batch_id, messages, txns, (*writer_stamps, called_ms), client
        )
    except BaseException:
        drop_kept_client(_KEPT)  # whatever went wrong, the next commit starts from fresh connections
        raise
    driver_log().info("pylog stream batch %d committed: %s", batch_id, summarize(messages))
    return True


def _prepare_and_commit(
    log: SinkLog,
    options: WriterOptions,
    servers: str,
    query_id: str,
    batch_id: int,
    messages: Sequence[WriterCommitMessage | None],
    txns: Sequence[TaskTransaction],
    stamps: tuple[int, int, int, int],
    client: KafkaClient,
) -> None:
    _check_still_open(options, servers, batch_id, txns, client)
    done = [m for m in messages if isinstance(m, PylogCommitMessage)]
    entry = SinkEntry(
        batch_id=batch_id,
        status=PREPARED,
        query_id=query_id,
        transactions=list(txns),
        records=sum(m.records + m.recovered for m in done),
        partitions=[asdict(s) for s in merge_partitions(done).values()],
        tasks_ended_at_ms=max((m.finished_ms for m in done), default=-1),
        worker_started_at_ms=stamps[0],
        writer_called_at_ms=stamps[1],
        writer_ready_at_ms=stamps[2],
        commit_called_at_ms=stamps[3],
        prepared_at_ms=int(time.time() * 1000),
    )
    log.write(entry)
    faults = options.faults
    if faults is not None and faults.stall_commit_after_prepared is not None:
        count = faults.stall_commit_after_prepared
        _end(options, servers, txns[:count], commit=True, client=client)
        stall_commit(log.touch, batch_id, count)
    try:
        _end(options, servers, txns, commit=True, client=client)
    except TransactionCommitError as e:
        raise StreamingSinkError(
            f"pylog streaming sink: committing micro-batch {batch_id} failed: {e}. It stays prepared in "
            f"{log.path(batch_id)}; restart the query to finish its commit"
        ) from None
    entry.transactions_committed_at_ms = int(time.time() * 1000)
    log.mark_committed(entry)


def _check_still_open(
    options: WriterOptions,
    servers: str,
    batch_id: int,
    txns: Sequence[TaskTransaction],
    client: KafkaClient,
) -> None:
    """Before ``prepared`` is written: every transaction must still be open at its epoch, else nothing is committed.

    AddPartitionsToTxn of the partitions a transaction already holds is a no-op while it is open, and fails
    with PRODUCER_FENCED once it was aborted (a speculative or zombie attempt of the Spark partition took the
    transactional id, or kafka.transaction.timeout.ms ran out). Then the micro-batch fails with nothing
    committed and no sink-log entry, so a restart of the query simply writes it again.
    """
    try:
        check_transactions(servers, txns, wording=STREAM_MICRO_BATCH, client=client)
    except TransactionCommitError as e:
        # The closed ones refuse; the others are aborted here, or fenced by the next run's InitProducerId.
        with contextlib.suppress(TransactionCommitError):
            _end(options, servers, txns, commit=False, client=client)
        raise StreamingSinkError(
            f"pylog streaming sink: micro-batch {batch_id} cannot be committed: {e}. Its other transactions were "
            "aborted, nothing of it is visible, and it is not in the sink log: restarting the query writes it again"
        ) from None


def _abort_rerun(
    options: WriterOptions, servers: str, batch_id: int, newest: SinkEntry, txns: Sequence[TaskTransaction]
) -> None:
    """A re-run of an already committed micro-batch: its transactions must not become visible."""
    try:
        _end(options, servers, txns, commit=False)
        outcome = "aborted its transactions"
    except TransactionCommitError as e:
        # Still invisible to read_committed readers: open until the next micro-batch's InitProducerId (or
        # transaction.timeout.ms) aborts them.
        outcome = f"could not abort all of its transactions ({e}); they stay invisible and are aborted later"
    driver_log().warning(
        "pylog stream batch %d was already committed (the sink log's newest committed batch is %d): a re-run "
        "after a restart; %s (%d transaction(s)), nothing is written twice",
        batch_id,
        newest.batch_id,
        outcome,
        len(txns),
    )


def _task_id(options: WriterOptions, query_id: str, task: int) -> str:
    assert options.transactional_id_prefix is not None
    return task_transactional_id(options.transactional_id_prefix, query_id, task)


def abort_batch(
    options: WriterOptions,
    servers: str,
    query_id: str,
    batch_id: int,
    messages: Sequence[WriterCommitMessage | None],
) -> None:
    """Driver, ``abort()``: nothing of the micro-batch becomes visible; say so."""
    txns = transactions_of(messages, options.transaction_timeout_ms)
    problems: list[str] = []
    try:
        _end(options, servers, txns, commit=False)
    except TransactionCommitError as e:
        problems.append(str(e))
    # A failed task's transaction is still open: a new InitProducerId with its id aborts it (and fences the
    # attempt, should it still run). The messages are in Spark partition order.
    failed = [task for task, m in enumerate(messages) if not isinstance(m, PylogCommitMessage)]
    if failed:
        with writer_client(
            servers,
            client_id=options.client_id,
            request_timeout_ms=options.request_timeout_ms,
            security=options.security,
        ) as client:
            for task in failed:
                try:
                    client.transactions.init_producer_id(
                        transactional_id=_task_id(options, query_id, task),
                        transaction_timeout_ms=options.transaction_timeout_ms,
                    )
                except KafkaError as e:
                    problems.append(f"fencing {_task_id(options, query_id, task)}: {e}")
    driver_log().warning(
        "pylog stream batch %d aborted: nothing of it is visible to read_committed readers (%d transaction(s) "
        "aborted, %d failed task(s) fenced)%s; read_uncommitted readers may have seen its records: %s",
        batch_id,
        len(txns),
        len(failed),
        f"; not all could be reached now, they are aborted by the next run or transaction.timeout.ms: "
        f"{'; '.join(problems)}"
        if problems
        else "",
        summarize(messages),
    )
