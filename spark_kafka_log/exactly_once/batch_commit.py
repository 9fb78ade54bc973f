"""Commit intents of transactional batch writes, and the way out of an interrupted commit (the tool's work).

Runs on: driver (commit); any machine (tool).

Where this runs: the **driver** (``PylogBatchWriter.commit()`` / ``abort()``), or any machine that can read the
intent directory and reach the brokers (the ``resolve`` tool); never on executors.

The commit of a transactional batch write (:func:`commit_write`):

1. write ``<pylog.transactionStateDir>/<write id>.json`` atomically (:func:`broker_runtime.fsutil.
   write_atomically`): the transactions to commit (transactional id, producer id, epoch, partitions) and how to
   reach the brokers;
2. check every transaction is still open and EndTxn(commit) each one (:func:`spark_kafka_log.exactly_once.task_transactions.
   end_transactions`);
3. remove the intent file.

If the driver dies between 1 and 3, some transactions may be committed and others still open (half visible to
read_committed readers, the open ones holding back their partitions' last stable offset until the broker aborts
them at ``kafka.transaction.timeout.ms``). The intent file stays; :func:`resolve` (``python -m
spark_kafka_log.transactions resolve --commit|--abort [DIR or FILE ...]``) sends EndTxn(commit) -- resending it
for the ones already committed succeeds -- or EndTxn(abort) to every transaction of the intent, then removes it.
``--commit`` works only while the open transactions have not timed out; once the broker aborted one, the commit
fails naming it and the intent stays for ``--abort`` (which cannot undo what was already committed: the error
says which transactions those are).

Intent file (JSON, version 1)::

    {"version": 1, "writeId": "write-<hex>", "createdAtMs": 1700000000000, "bootstrapServers": "h:p",
     "embeddedDataDir": null | "/abs/data/dir", "clientId": "pylog-writer", "requestTimeoutMs": 30000,
     "transactionTimeoutMs": 60000,
     "transactions": [{"transactionalId": "...", "producerId": 7, "producerEpoch": 0,
                       "partitions": [["topic", 0], ...], "startedMs": 1700000000000}, ...]}

``embeddedDataDir`` is set when the write used the embedded broker: :func:`resolve` then reaches (or starts) the
embedded broker of that directory, whose port may have changed since.

Test-only: ``pylog.test.killDriverAfterCommitIntent`` (:mod:`spark_kafka_log.common.fault_injection`) kills the driver
right after step 1; ``pylog.test.stallCommitAfterPrepared`` stops the commit there for good.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ConfigError, PylogError, TransactionCommitError
from broker_runtime.fsutil import write_atomically
from broker_runtime.security import ClientSecurity
from spark_kafka_log.exactly_once.task_transactions import (
    TaskTransaction,
    check_transactions,
    commit_client,
    end_transactions,
    only_final_failures,
)

__all__ = [
    "CommitIntent",
    "commit_write",
    "intent_path",
    "pending_intents",
    "read_intent",
    "resolve",
]

_VERSION = 1


@dataclass(frozen=True)
class CommitIntent:
    """What a driver is about to commit (see the module docstring for the file format)."""

    write_id: str
    bootstrap_servers: str
    transactions: tuple[TaskTransaction, ...]
    embedded_data_dir: str | None = None
    client_id: str = "pylog-writer"
    request_timeout_ms: int = 30000
    transaction_timeout_ms: int = 60000
    created_ms: int = -1

    def to_json(self) -> bytes:
        doc = {
            "version": _VERSION,
            "writeId": self.write_id,
            "createdAtMs": self.created_ms if self.created_ms >= 0 else int(time.time() * 1000),
            "bootstrapServers": self.bootstrap_servers,
            "embeddedDataDir": self.embedded_data_dir,
            "clientId": self.client_id,
            "requestTimeoutMs": self.request_timeout_ms,
            "transactionTimeoutMs": self.transaction_timeout_ms,
            "transactions": [
                {
                    "transactionalId": t.transactional_id,
                    "producerId": t.producer_id,
                    "producerEpoch": t.producer_epoch,
                    "partitions": [list(tp) for tp in t.partitions],
                    "startedMs": t.started_ms,
                }
                for t in self.transactions
            ],
        }
        return json.dumps(doc, indent=1).encode()


def intent_path(state_dir: str, write_id: str) -> str:
    return os.path.join(state_dir, f"{write_id}.json")


def read_intent(path: str | os.PathLike[str]) -> CommitIntent:
    """Parse an intent file; a file that is not one raises ConfigError naming it."""
    try:
        doc = json.loads(Path(path).read_bytes())
        if doc.get("version") != _VERSION:
            raise ValueError(f"version {doc.get('version')!r}, expected {_VERSION}")
        timeout = int(doc["transactionTimeoutMs"])
        txns = tuple(
            TaskTransaction(
                str(t["transactionalId"]),
                int(t["producerId"]),
                int(t["producerEpoch"]),
                tuple((str(tp[0]), int(tp[1])) for tp in t["partitions"]),
                int(t["startedMs"]),
                timeout,
            )
            for t in doc["transactions"]
        )
        return CommitIntent(
            write_id=str(doc["writeId"]),
            bootstrap_servers=str(doc["bootstrapServers"]),
            transactions=txns,
            embedded_data_dir=doc.get("embeddedDataDir"),
            client_id=str(doc["clientId"]),
            request_timeout_ms=int(doc["requestTimeoutMs"]),
            transaction_timeout_ms=timeout,
            created_ms=int(doc["createdAtMs"]),
        )
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ConfigError(f"{path} is not a readable pylog commit intent: {exc}") from exc


def pending_intents(state_dir: str | os.PathLike[str]) -> list[Path]:
    """The intent files left in ``state_dir`` (interrupted commits), oldest first; [] when there is none."""
    d = Path(state_dir)
    if not d.is_dir():
        return []
    return sorted((p for p in d.glob("*.json") if p.is_file()), key=lambda p: p.stat().st_mtime)


def _servers(intent: CommitIntent, override: str | None) -> str:
    if override:
        return override
    if intent.embedded_data_dir is not None:
        from broker_runtime.launch import ensure_embedded_broker

        return ensure_embedded_broker(intent.embedded_data_dir)
    return intent.bootstrap_servers


def commit_write(
    state_dir: str,
    intent: CommitIntent,
    *,
    kill_after_intent: int | None = None,
    stall_after_intent: int | None = None,
    security: ClientSecurity | None = None,
) -> None:
    """Driver: write the intent, check every transaction, commit every one, remove the intent.

        Errors (TransactionCommitError): a failed check commits nothing and removes the intent (the caller may abort
        everything); a failed commit removes the intent only when the failed transactions are ended for good
        (then some may be visible and others aborted: the error names them), else the intent stays and the error
        names the resolve command. ``security``: the write's ``kafka.security.protocol`` and SASL/SSL settings
    (never written into the intent). ``kill_after_intent`` (a pid) and ``stall_after_intent`` (a count of
    transactions to commit before stopping for good): the test-only faults, see
    :mod:`spark_kafka_log.common.fault_injection`.
    """
    os.makedirs(state_dir, exist_ok=True)
    path = intent_path(state_dir, intent.write_id)
    write_atomically(path, intent.to_json())
    if kill_after_intent is not None:
        from spark_kafka_log.common.fault_injection import kill_driver

        kill_driver(kill_after_intent)
    if stall_after_intent is not None:
        from spark_kafka_log.common.fault_injection import stall_commit

        if stall_after_intent:
            end_transactions(
                intent.bootstrap_servers,
                intent.transactions[:stall_after_intent],
                commit=True,
                client_id=intent.client_id,
                request_timeout_ms=intent.request_timeout_ms,
                security=security,
            )
        stall_commit(lambda name: Path(state_dir, name).touch(), intent.write_id, stall_after_intent)
    servers, txns, client_id, timeout = (
        intent.bootstrap_servers,
        intent.transactions,
        intent.client_id,
        intent.request_timeout_ms,
    )
    # One client (one connection per coordinator) for the check and the EndTxns.
    with commit_client(servers, client_id=client_id, request_timeout_ms=timeout, security=security) as client:
        try:
            check_transactions(servers, txns, client=client)
        except PylogError:
            os.remove(path)
            raise
        _end_or_keep_intent(path, servers, txns, client)
    os.remove(path)


def _end_or_keep_intent(
    path: str | os.PathLike[str], servers: str, txns: Sequence[TaskTransaction], client: KafkaClient
) -> None:
    try:
        end_transactions(servers, txns, commit=True, client=client)
    except TransactionCommitError as exc:
        if only_final_failures(exc):
            os.remove(path)
            raise
        raise TransactionCommitError(
            f"{exc}; the commit intent {path} stays: finish the commit with `python -m "
            f"spark_kafka_log.transactions resolve --commit {path}` (or roll back what is still open with --abort)",
            exc.failed,
        ) from exc


def resolve(
    paths: Sequence[str | os.PathLike[str]], commit: bool, *, bootstrap_servers: str | None = None
) -> list[str]:
    """Finish (``commit=True``) or abort every interrupted commit named by ``paths`` (intent files, or
    directories whose intent files are all taken); remove each intent once done. Returns the write ids done.

    Raises :class:`~broker_runtime.errors.TransactionCommitError` after trying every intent when a transaction
    cannot be ended that way: the intent stays when another try may succeed (e.g. the broker is unreachable),
    and is removed when the failed transactions are already ended for good (committed, or aborted by the broker
    at their timeout), which the error says.
    """
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(pending_intents(path))
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(f"{path}: no such commit intent file or directory")
    done: list[str] = []
    errors: list[PylogError] = []
    for f in files:
        intent = read_intent(f)
        try:
            end_transactions(
                _servers(intent, bootstrap_servers),
                intent.transactions,
                commit=commit,
                client_id=intent.client_id,
                request_timeout_ms=intent.request_timeout_ms,
            )
        except TransactionCommitError as exc:
            if only_final_failures(exc):
                f.unlink()
                exc = TransactionCommitError(
                    f"{exc}; intent {f} removed: every transaction of write {intent.write_id} is ended for good",
                    exc.failed,
                )
            errors.append(exc)
            continue
        except PylogError as exc:
            errors.append(exc)
            continue
        f.unlink()
        done.append(intent.write_id)
    if errors:
        raise errors[0] if len(errors) == 1 else type(errors[0])("; ".join(str(e) for e in errors))
    return done
