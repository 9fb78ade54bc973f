"""Committing or aborting the tasks' transactions of a write, on behalf of their producers (EndTxn).

Runs on: driver (commit); any machine (tool).

Where this runs: the **driver** (``PylogBatchWriter.commit()`` / ``abort()``, the streaming sink's commit, the
``spark_kafka_log.transactions`` tool), never on executors. Each task of a transactional write flushed its
records inside its own transaction and reported ``(transactional id, producer id, epoch)`` in its commit message;
the driver ends every one of those transactions with EndTxn carrying that producer id and epoch, as Flink's
Kafka sink does when it recovers a transaction (only standard Kafka APIs, so any Kafka broker works).

:func:`end_transactions` sends the EndTxns pipelined on one connection per coordinator (all requests out, then
the answers; a retriable answer is retried alone) and raises ONE :class:`~broker_runtime.errors.TransactionCommitError`
naming every transactional id that failed and why (one line). A caller that checks and then ends (the streaming
sink's commit) passes one client to both, so the commit pays for one connection and one coordinator lookup. With ``check_first`` (a batch commit) every transaction is first checked to be
still open at its epoch, by an AddPartitionsToTxn of the partitions it already holds (a no-op for an open
transaction; PRODUCER_FENCED once a later attempt of the Spark partition or the coordinator's timeout aborted
it): when any check fails nothing is committed. A fence that lands between the check and the commit is not
caught by it: the error then says which transactions were committed anyway.

Resending EndTxn(commit) for a transaction that already committed, with the same producer id and epoch,
succeeds (Kafka's coordinator treats it as a retry), so a commit interrupted half-way can be completed by
sending every EndTxn again; never use ``check_first`` for that (AddPartitionsToTxn would open a new
transaction on a completed one).

Error texts name what can fence or time out a transaction of the caller (:class:`Wording`): a batch write's
task (a later attempt of its Spark partition) or a streaming micro-batch's (also a later run of the query).

Thread-safety: the functions are safe to call from any thread with their own client (a given ``client`` is
used by the calling thread only).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError, PylogError, TransactionCommitError
from broker_runtime.security import ClientSecurity
from spark_kafka_log.common.commit_summary import PylogCommitMessage

__all__ = [
    "BATCH_WRITE",
    "STREAM_MICRO_BATCH",
    "TaskTransaction",
    "TransactionCommitError",
    "check_transactions",
    "commit_client",
    "end_transactions",
    "only_final_failures",
    "transactions_of",
    "Wording",
]

log = logging.getLogger("spark_kafka_log.txn_commit")

_FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
#: Answers after which the transaction can never be ended otherwise (already committed or aborted, or gone).
_FINAL = _FENCED | {ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_ID_MAPPING}


def only_final_failures(exc: TransactionCommitError) -> bool:
    """True when every failed transaction of ``exc`` is already committed or aborted for good (nothing left
    that another EndTxn could change), False when some failed for a reason that may pass (unreachable broker)."""
    return all(e.code in _FINAL for e in exc.failed.values())


@dataclass(frozen=True)
class Wording:
    """How an error text names the caller's unit of work and who may have ended its transactions."""

    #: The unit whose duration ``kafka.transaction.timeout.ms`` must exceed.
    unit: str
    #: Who re-initializes the transactional id of a task (and so fences and aborts its transaction).
    fencers: str


BATCH_WRITE = Wording(
    unit="the write's duration",
    fencers="a later attempt of the same Spark partition (a task retry, a speculative copy or a task of a "
    "re-attempted stage)",
)
STREAM_MICRO_BATCH = Wording(
    unit="the micro-batch's duration and the longest time the query may stay down",
    fencers="a later attempt of the same Spark partition (a task retry or a speculative copy in this run, or a "
    "task of a later run of the query from the same checkpoint) or another producer with this transactional id",
)


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
    wording: Wording = BATCH_WRITE,
    client: KafkaClient | None = None,
    security: ClientSecurity | None = None,
) -> None:
    """EndTxn(commit or abort) for every transaction of ``txns``; raise one TransactionCommitError if any fails.

    Retriable answers (coordinator moving or loading, CONCURRENT_TRANSACTIONS, lost connections) are retried
    for ``retry_timeout_ms`` per request. See the module docstring for ``check_first``. ``client``: use this
    connected client (else one is opened and closed here).
    """
    if not txns:
        return
    with _client_for(
        servers, client, client_id, request_timeout_ms, retry_backoff_ms, retry_timeout_ms, security
    ) as c:
        if check_first:
            check_transactions(servers, txns, wording=wording, client=c)
        verb = "commit" if commit else "abort"
        failed = _guard(txns, lambda: c.transactions.end_txns([_ident(t) for t in txns], commit))
    if failed:
        done = len(txns) - len(failed)
        raise TransactionCommitError(
            f"pylog transactions: EndTxn({verb}) failed for {len(failed)} of {len(txns)} transaction(s)"
            + (f" ({done} others were {verb}ted)" if commit and done else "")
            + f": {_explain(txns, failed, commit, wording)}",
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
    wording: Wording = BATCH_WRITE,
    client: KafkaClient | None = None,
    security: ClientSecurity | None = None,
) -> None:
    """Check that every transaction is still open at its epoch (see the module docstring); raise one
    TransactionCommitError ("nothing was committed") naming the ones that are not. Never on a completed
    transaction: AddPartitionsToTxn would open a new one."""
    todo = [t for t in txns if t.partitions]
    if not todo:
        return
    with _client_for(
        servers, client, client_id, request_timeout_ms, retry_backoff_ms, retry_timeout_ms, security
    ) as c:
        failed = _guard(todo, lambda: c.transactions.check_txns([(*_ident(t), t.partitions) for t in todo]))
    if failed:
        raise TransactionCommitError(
            f"pylog transactions: nothing was committed, because {len(failed)} of {len(txns)} transaction(s) "
            f"are no longer open: {_explain(txns, failed, True, wording)}",
            failed,
        )


def commit_client(
    servers: str,
    *,
    client_id: str = "pylog-txn-commit",
    request_timeout_ms: int = 30000,
    retry_backoff_ms: int = 100,
    retry_timeout_ms: int | None = 30000,
    security: ClientSecurity | None = None,
) -> KafkaClient:
    """A client for :func:`check_transactions` and :func:`end_transactions` to share (the caller closes it).
    ``security``: the write's ``kafka.security.protocol`` and SASL/SSL settings (None: PLAINTEXT)."""
    return KafkaClient(
        servers,
        client_id=client_id,
        request_timeout_ms=request_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
        retry_timeout_ms=retry_timeout_ms,
        security=security,
    )


def _ident(txn: TaskTransaction) -> tuple[str, int, int]:
    return txn.transactional_id, txn.producer_id, txn.producer_epoch


@contextlib.contextmanager
def _client_for(
    servers: str,
    client: KafkaClient | None,
    client_id: str,
    request_timeout_ms: int,
    retry_backoff_ms: int,
    retry_timeout_ms: int | None,
    security: ClientSecurity | None,
) -> Iterator[KafkaClient]:
    if client is not None:
        yield client
        return
    with commit_client(
        servers,
        client_id=client_id,
        request_timeout_ms=request_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
        retry_timeout_ms=retry_timeout_ms,
        security=security,
    ) as own:
        yield own


def _guard(
    txns: Sequence[TaskTransaction], call: Callable[[], dict[str, KafkaError]]
) -> dict[str, KafkaError]:
    """``call()``'s failures; a failure of the whole call (no broker reachable) fails every transaction."""
    try:
        return call()
    except KafkaError as exc:
        return {t.transactional_id: exc for t in txns}
    except (PylogError, OSError) as exc:
        return {t.transactional_id: KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) for t in txns}


def _explain(
    txns: Sequence[TaskTransaction], failed: dict[str, KafkaError], commit: bool, wording: Wording
) -> str:
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
                    f"{txn.timeout_ms}, so the broker aborted it: set kafka.transaction.timeout.ms above "
                    f"{wording.unit} (up to the broker's transaction.max.timeout.ms)"
                )
            else:
                why = (
                    f"the producer was fenced: {wording.fencers} re-initialized the transactional id and "
                    "aborted this transaction"
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
