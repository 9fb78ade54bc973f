"""Committing or aborting the tasks' transactions of a write, on behalf of their producers (EndTxn).

Where this runs: the **driver** (``PylogBatchWriter.commit()`` / ``abort()``, the streaming sink's commit, the
``spark_kafka_log.transactions`` tool), never on executors. Each task of a transactional write flushed its
records inside its own transaction and reported ``(transactional id, producer id, epoch)`` in its commit message;
the driver ends every one of those transactions with EndTxn carrying that producer id and epoch, as Flink's
Kafka sink does when it recovers a transaction (only standard Kafka APIs, so any Kafka broker works).

:func:`end_transactions` sends the EndTxns in parallel (one client per thread, at most ``max_parallel``
threads) and raises ONE :class:`~broker_runtime.errors.TransactionCommitError` naming every transactional id
that failed and why (one line). With ``check_first`` (a batch commit) every transaction is first checked to be
still open at its epoch, by an AddPartitionsToTxn of the partitions it already holds (a no-op for an open
transaction; PRODUCER_FENCED once a later attempt of the Spark partition or the coordinator's timeout aborted
it): when any check fails nothing is committed. A fence that lands between the check and the commit is not
caught by it: the error then says which transactions were committed anyway.

Resending EndTxn(commit) for a transaction that already committed, with the same producer id and epoch,
succeeds (Kafka's coordinator treats it as a retry), so a commit interrupted half-way can be completed by
sending every EndTxn again; never use ``check_first`` for that (AddPartitionsToTxn would open a new
transaction on a completed one).

Thread-safety: the function is safe to call from any thread; it shares nothing between its worker threads
but the result dictionary (written under a lock).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError, PylogError, TransactionCommitError
from broker_runtime.security import ClientSecurity
from spark_kafka_log.commit_summary import PylogCommitMessage

__all__ = [
    "TaskTransaction",
    "TransactionCommitError",
    "check_transactions",
    "end_transactions",
    "only_final_failures",
    "transactions_of",
]

log = logging.getLogger(__name__)

_FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
#: Answers after which the transaction can never be ended otherwise (already committed or aborted, or gone).
_FINAL = _FENCED | {ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_ID_MAPPING}


def only_final_failures(exc: TransactionCommitError) -> bool:
    """True when every failed transaction of ``exc`` is already committed or aborted for good (nothing left
    that another EndTxn could change), False when some failed for a reason that may pass (unreachable broker)."""
    return all(e.code in _FINAL for e in exc.failed.values())


@dataclass(frozen=True)
class TaskTransaction:
    """One task's open transaction: what EndTxn needs, plus what explains a failure."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    #: The partitions the task added to the transaction (for ``check_first``); () when unknown.
    partitions: tuple[tuple[str, int], ...] = ()
    #: Wall-clock ms when the transaction began (-1: unknown) and its ``transaction.timeout.ms`` (-1: unknown).
    started_ms: int = -1
    timeout_ms: int = -1


def transactions_of(
    messages: Iterable[WriterCommitMessage | None], timeout_ms: int = -1
) -> list[TaskTransaction]:
    """The open transactions reported by the tasks' commit messages (tasks that wrote nothing have none)."""
    out = []
    for m in messages:
        if isinstance(m, PylogCommitMessage) and m.transactional_id is not None:
            out.append(
                TaskTransaction(
                    m.transactional_id,
                    m.producer_id,
                    m.producer_epoch,
                    tuple(sorted((s.topic, s.partition) for s in m.partitions)),
                    m.transaction_started_ms,
                    timeout_ms,
                )
            )
    return out


def end_transactions(
    servers: str,
    txns: Sequence[TaskTransaction],
    commit: bool,
    *,
    client_id: str = "pylog-txn-commit",
    request_timeout_ms: int = 30000,
    retry_backoff_ms: int = 100,
    retry_timeout_ms: int | None = 30000,
    check_first: bool = False,
    max_parallel: int = 8,
    security: ClientSecurity | None = None,
) -> None:
    """EndTxn(commit or abort) for every transaction of ``txns``; raise one TransactionCommitError if any fails.

    Retriable answers (coordinator moving or loading, CONCURRENT_TRANSACTIONS, lost connections) are retried
    for ``retry_timeout_ms`` per request. See the module docstring for ``check_first``.
    """
    if not txns:
        return
    verb = "commit" if commit else "abort"
    if check_first:
        check_transactions(
            servers,
            txns,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_timeout_ms=retry_timeout_ms,
            max_parallel=max_parallel,
            security=security,
        )

    def end(client: KafkaClient, txn: TaskTransaction) -> None:
        client.end_txn(txn.transactional_id, txn.producer_id, txn.producer_epoch, commit)

    failed = _run(
        servers,
        txns,
        end,
        client_id,
        request_timeout_ms,
        retry_backoff_ms,
        retry_timeout_ms,
        max_parallel,
        security,
    )
    if failed:
        done = len(txns) - len(failed)
        raise TransactionCommitError(
            f"pylog transactions: EndTxn({verb}) failed for {len(failed)} of {len(txns)} transaction(s)"
            + (f" ({done} others were {verb}ted)" if commit and done else "")
            + f": {_explain(txns, failed, commit)}",
            failed,
        )


def check_transactions(
    servers: str,
    txns: Sequence[TaskTransaction],
    *,
    client_id: str = "pylog-txn-commit",
    request_timeout_ms: int = 30000,
    retry_backoff_ms: int = 100,
    retry_timeout_ms: int | None = 30000,
    max_parallel: int = 8,
    security: ClientSecurity | None = None,
) -> None:
    """Check that every transaction is still open at its epoch (see the module docstring); raise one
    TransactionCommitError ("nothing was committed") naming the ones that are not. Never on a completed
    transaction: AddPartitionsToTxn would open a new one."""
    failed = _run(
        servers,
        txns,
        _check,
        client_id,
        request_timeout_ms,
        retry_backoff_ms,
        retry_timeout_ms,
        max_parallel,
        security,
    )
    if failed:
        raise TransactionCommitError(
            f"pylog transactions: nothing was committed, because {len(failed)} of {len(txns)} transaction(s) "
            f"are no longer open: {_explain(txns, failed, True)}",
            failed,
        )


def _check(client: KafkaClient, txn: TaskTransaction) -> None:
    if txn.partitions:
        client.add_partitions_to_txn(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.partitions
        )


def _run(
    servers: str,
    txns: Sequence[TaskTransaction],
    call: Callable[[KafkaClient, TaskTransaction], None],
    client_id: str,
    request_timeout_ms: int,
    retry_backoff_ms: int,
    retry_timeout_ms: int | None,
    max_parallel: int,
    security: ClientSecurity | None = None,
) -> dict[str, KafkaError]:
    """``call(client, txn)`` for each transaction, spread over up to ``max_parallel`` threads; the failures."""
    failed: dict[str, KafkaError] = {}
    lock = threading.Lock()
    workers = max(1, min(max_parallel, len(txns)))
    chunks = [list(txns[i::workers]) for i in range(workers)]

    def work(chunk: list[TaskTransaction]) -> None:
        with KafkaClient(
            servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_timeout_ms=retry_timeout_ms,
            security=security,
        ) as client:
            for txn in chunk:
                try:
                    call(client, txn)
                except KafkaError as exc:
                    with lock:
                        failed[txn.transactional_id] = exc
                except (PylogError, OSError) as exc:
                    with lock:
                        failed[txn.transactional_id] = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))

    if workers == 1:
        work(chunks[0])
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="pylog-endtxn") as pool:
            for future in [pool.submit(work, c) for c in chunks]:
                future.result()
    return failed


def _explain(txns: Sequence[TaskTransaction], failed: dict[str, KafkaError], commit: bool) -> str:
    """One clause per failed transaction: its id, Kafka's error name and what it means here."""
    by_id = {t.transactional_id: t for t in txns}
    now_ms = int(time.time() * 1000)
    parts = []
    for tid in sorted(failed):
        err, txn = failed[tid], by_id[tid]
        code = err.code
        if code in _FENCED:
            age = now_ms - txn.started_ms if txn.started_ms >= 0 else -1
            if txn.timeout_ms > 0 and age > txn.timeout_ms:
                why = (
                    f"the transaction was open {age} ms, longer than kafka.transaction.timeout.ms="
                    f"{txn.timeout_ms}, so the broker aborted it: set kafka.transaction.timeout.ms above the "
                    "write's duration (up to the broker's transaction.max.timeout.ms)"
                )
            else:
                why = (
                    "the producer was fenced: a later attempt of the same Spark partition (a speculative copy "
                    "or a stage re-attempt) re-initialized the transactional id and aborted this transaction"
                    + (
                        f" (open {age} ms, within kafka.transaction.timeout.ms={txn.timeout_ms})"
                        if age >= 0 and txn.timeout_ms > 0
                        else " or the broker aborted it on its timeout"
                    )
                )
            parts.append(f"{tid} {err.name}: {why}")
        elif code == ErrorCode.INVALID_TXN_STATE and commit:
            parts.append(f"{tid} INVALID_TXN_STATE: the transaction was already aborted (or never began)")
        elif code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
            parts.append(
                f"{tid} INVALID_PRODUCER_ID_MAPPING: the broker no longer knows this transactional id with "
                f"producer id {txn.producer_id} (expired, or a newer producer id took it)"
            )
        else:
            parts.append(f"{tid}: {err}")
    return "; ".join(parts)
