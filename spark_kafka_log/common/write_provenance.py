"""Spark-write provenance: after a write committed, the driver records what it wrote in the cluster's
``__pylog_spark_writes`` topic, which the web console reads (record format and topic settings:
:mod:`broker_runtime.protocol.spark_writes`, their one home).

Runs on: driver (commit).

Where this runs: the **driver**, in ``commit()`` of the batch writer and of the streaming sink, AFTER the write's
records are visible (a failure here can no longer touch the write). One record per committed write (per
micro-batch for streams), built from the tasks' commit messages alone: write id, kind, query id and batch id for
streams, delivery mode, tasks, rows, bytes, commit time and per-partition offset ranges. Never an option value
(an option may hold a secret), never a host name.

Cost: a client this process keeps (:func:`~spark_kafka_log.common.connections.kept_client`), so after the first
write one Produce request (acks=all) per commit; the first write of a process also asks Metadata, and the
cluster's first write creates the topic (CreateTopics, 1 partition, replication factor -1: the cluster's
``default.replication.factor``).

Never fails a write: when the topic cannot be created or written (no ACL for it, a cluster that refuses the
topic, the broker gone), the driver logs ONE WARNING per process naming the reason and how to turn recording off,
every failure is counted (:func:`provenance_failures`, each later one logged at INFO with the count), and the
commit returns normally. ``pylog.writeProvenance=false`` turns recording off. Not thread-safe: one commit at a
time per process, as PySpark calls them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from pyspark.sql.datasource import WriterCommitMessage

from broker_runtime.client import BrokerConnectionError, KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError, PylogError
from broker_runtime.protocol.messages import create_topics
from broker_runtime.protocol.records import RecordBatchBuilder
from broker_runtime.protocol.spark_writes import TOPIC, TOPIC_CONFIGS, SparkWrite
from spark_kafka_log.common.commit_summary import PylogCommitMessage, merge_partitions
from spark_kafka_log.common.connections import drop_kept_client, kept_client, writer_client
from spark_kafka_log.common.driver_log import driver_log
from spark_kafka_log.common.writer_options import WriterOptions

__all__ = ["describe_write", "provenance_failures", "record_write"]

_KEPT = "write-provenance"
#: Provenance requests wait at most this long (ms) for an answer, whatever the write's request timeout: a slow
#: provenance topic must not hold up a committed write for long.
MAX_WAIT_MS = 5000

_failures = 0
_warned = False


def provenance_failures() -> int:
    """Committed writes of this process whose provenance could not be recorded."""
    return _failures


def delivery_mode(options: WriterOptions, *, stream: bool, exactly_once: bool = False) -> str:
    """The write's delivery as the console shows it."""
    if exactly_once:
        mode = "exactly-once"
    elif options.transactional and not stream:
        mode = "transactional"
    elif options.enable_idempotence and not stream:
        mode = "idempotent"
    else:
        mode = "at-least-once"
    return mode if options.acks == -1 else f"{mode} (acks={options.acks})"


def describe_write(
    write_id: str,
    messages: Sequence[WriterCommitMessage | None],
    delivery: str,
    *,
    query_id: str | None = None,
    batch_id: int | None = None,
) -> SparkWrite:
    """The record of one committed write, from its tasks' commit messages."""
    done = [m for m in messages if isinstance(m, PylogCommitMessage)]
    merged = merge_partitions(done)
    return SparkWrite(
        write_id=write_id,
        kind="batch" if batch_id is None else "stream",
        query_id=query_id,
        batch_id=batch_id,
        delivery=delivery,
        tasks=len(done),
        rows=sum(m.records + m.recovered for m in done),
        size=sum(m.bytes for m in done),
        committed_ms=int(time.time() * 1000),
        partitions=tuple(
            (t, p, s.first_offset, s.last_offset, s.records + s.recovered)
            for (t, p), s in sorted(merged.items())
        ),
    )


def record_write(options: WriterOptions, servers: str, write: SparkWrite) -> bool:
    """Record ``write`` (see the module docstring); True when recorded, False when off or failed (counted)."""
    if not options.write_provenance:
        return False
    try:
        wait_ms = min(options.request_timeout_ms, MAX_WAIT_MS)
        settings = (servers, options.client_id, wait_ms, options.security)
        client = kept_client(
            _KEPT,
            settings,
            lambda: writer_client(
                servers, client_id=options.client_id, request_timeout_ms=wait_ms, security=options.security
            ),
        )
        _ensure_topic(client, wait_ms)
        batch = RecordBatchBuilder()
        batch.append(write.committed_ms, write.write_id.encode(), write.to_value())
        answer = client.produce(
            client.leader_for(TOPIC, 0), {(TOPIC, 0): batch.build()}, acks=-1, timeout_ms=wait_ms
        )
        result = (answer or {}).get((TOPIC, 0))
        if result is not None and result.error:
            raise KafkaError(result.error, f"producing to {TOPIC}")
    except (PylogError, OSError) as exc:  # KafkaError and BrokerConnectionError are PylogErrors
        drop_kept_client(_KEPT)
        _failed(write, exc)
        return False
    return True


def _ensure_topic(client: KafkaClient, wait_ms: int) -> None:
    found = client.metadata([TOPIC]).topics.get(TOPIC)
    if found is not None and found.error == ErrorCode.NONE and found.partitions:
        return
    if found is None or found.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        codes = client.admin.create_topics(
            {TOPIC: (1, create_topics.NO_REPLICATION_FACTOR)}, configs=TOPIC_CONFIGS, timeout_ms=wait_ms
        )
        code = codes.get(TOPIC, ErrorCode.NONE)
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise KafkaError(code, f"creating topic {TOPIC}")
    client.partitions_for(TOPIC, timeout_ms=wait_ms)  # waits for its leader; raises what the broker says


def _failed(write: SparkWrite, exc: BaseException) -> None:
    global _failures, _warned
    _failures += 1
    reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, BrokerConnectionError | OSError) else str(exc)
    if not _warned:
        _warned = True
        driver_log().warning(
            "pylog writer: write %s committed, but its provenance could not be recorded in topic %s (%s); the web "
            "console will not list it. Grant the writer's principal CREATE and WRITE on that topic (or create it), "
            "or set pylog.writeProvenance=false to stop recording. Logged once per driver process; failures "
            "so far: %d",
            write.write_id,
            TOPIC,
            reason,
            _failures,
        )
    else:
        driver_log().log(
            logging.INFO,
            "pylog writer: provenance of write %s not recorded (%s); failures so far: %d",
            write.write_id,
            reason,
            _failures,
        )
