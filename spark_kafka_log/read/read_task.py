"""The executor side of a read: one offset range of one topic partition in, ``pyarrow.RecordBatch`` objects out.

Runs on: executors (task).

Where this runs: the **executors**, one call of :func:`read_range` per input partition (batch read task, and
the streaming reader's micro-batch tasks); single-threaded, one Kafka client per call at most, closed at the end.

Transports (``pylog.transport``), behind one loop that decodes chunks of whole record batches:

* ``local`` -- the direct segment scan of :mod:`spark_kafka_log.read.local_scan`: segment by base offset, seek
  through the ``.index``, read whole batches, read-only. Used by ``auto`` whenever the partition's directory
  exists under the log dirs (``pylog.logDirs``, or ``<pylog.dataDir>/logs`` for the embedded broker). If the
  files end before the range does, or a segment vanishes (retention), the rest is fetched. Replicated
  partitions are planned without log dirs (:mod:`spark_kafka_log.read.read_plan`): they are always fetched.
* ``fetch`` -- Kafka Fetch requests over TCP to any Kafka-protocol broker.

Both hand the same bytes to the same vectorized decoder
(:func:`broker_runtime.protocol.record_codec.decode.decode_batches`; no Python loop per record), so they give identical
rows with exactly the Arrow schema PySpark derives from the Spark schema. Control batches (transaction markers)
and records outside [start, end) are dropped by the decoder in either isolation level; every codec is decoded.

``kafka.isolation.level=read_committed``: the planner ended the range at or below the last stable offset
(:mod:`spark_kafka_log.read.read_plan`). Fetch requests carry IsolationLevel=1 and every answer's
``AbortedTransactions`` feed one :class:`~spark_kafka_log.read.txn_filter.ReadCommittedFilter` for that answer; the
direct scan collects the aborted transactions of the range from the ``.txnindex`` files first
(:meth:`~spark_kafka_log.read.local_scan.LocalPartitionScanner.aborted_transactions`) and filters all its chunks with
one filter. Either way the batches of aborted transactions are dropped before decoding, exactly as a Kafka
read_committed consumer drops them. When the direct scan cannot read the transaction indexes (a malformed or
unreadable ``.txnindex``, a segment gone), it logs a WARNING and the range is fetched with read_committed
instead: it never yields records it cannot show are committed.

Leader failover during the read (Fetch): the client retries a partition whose leader moved, is unknown or
cannot be reached, refreshing the metadata from any live broker, for ``kafka.default.api.timeout.ms`` per
call (``kafka.retry.backoff.ms`` apart), then fails naming topic, partition, offset and the last error. A
new leader's high watermark may lag the old one's for a moment (it learns it from its followers' fetches):
when it is below the offsets still needed, the task waits up to the same budget for it before treating
those offsets as lost.

Waiting for records (``kafkaConsumer.pollTimeoutMs``, Spark's name, default 120000 as Spark's
``spark.network.timeout``): the longest a task goes without progress while the range still promises records.
The task's client never waits on one request or retries one call longer than that (its
``kafka.request.timeout.ms`` and ``kafka.default.api.timeout.ms`` are capped at it), answers without records
are retried ``kafka.retry.backoff.ms`` apart, and when the time is up the task fails with a
:class:`~broker_runtime.errors.WaitTimeoutError` in the shape of Spark's ``TimeoutException``: "Cannot fetch
record for offset N in M milliseconds", naming topic, partition and range (a stopped or unreachable leader, a
broker that answers nothing). A high watermark below the offsets still needed (see above) is waited for at most
as long, then handled as data loss.

Data loss during the read (offsets that left the log, a log that ends early): with ``failOnDataLoss=true``
:class:`~broker_runtime.errors.DataLossError` names topic, partition and range; with ``false`` the lost offsets
are skipped with a warning on the logger ``spark_kafka_log.read_task``.

Per-task metrics: with ``pylog.metricsDir`` set, each call writes ``<dir>/read-<uuid>.json`` (written
atomically) with ``topic, partition, start, end, transport, batches, bytes, rows, isolation, aborted_batches``
(batches of aborted transactions dropped), so tests and users can see
what a query actually read (PySpark's Python data sources have no metrics API). Metrics never fail a read.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pyarrow as pa

from broker_runtime.client import KafkaClient
from broker_runtime.errors import (
    ConfigError,
    CorruptIndexError,
    DataLossError,
    ErrorCode,
    KafkaError,
    WaitTimeoutError,
)
from broker_runtime.fsutil import write_atomically
from broker_runtime.protocol.batch_header import iter_batch_spans
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from broker_runtime.protocol.record_codec.decode import decode_batches
from spark_kafka_log.common.connections import reader_client
from spark_kafka_log.common.reader_options import ReaderOptions
from spark_kafka_log.read.input_partition import PylogInputPartition
from spark_kafka_log.read.local_scan import LocalPartitionScanner, SegmentGoneError, find_partition_dir
from spark_kafka_log.read.txn_filter import ReadCommittedFilter

__all__ = ["read_range"]

log = logging.getLogger("spark_kafka_log.read_task")

_TS_MS = pa.timestamp("ms", tz="UTC")
_TS_US = pa.timestamp("us", tz="UTC")


@dataclass
class _Stats:
    transport: list[str] = field(default_factory=list)
    batches: int = 0
    bytes: int = 0
    rows: int = 0
    aborted_batches: int = 0
    read_committed: bool = False


def read_range(
    options: ReaderOptions, part: PylogInputPartition, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Executor: the records of ``part`` ([start, end) of one topic partition) as Arrow batches of ``schema``."""
    if part.start >= part.end:
        return
    stats = _Stats(read_committed=options.read_committed)
    include_headers = "headers" in schema.names
    try:
        for data, from_offset in _raw_chunks(options, part, stats):
            decoded = decode_batches(
                data,
                start_offset=from_offset,
                end_offset=part.end,
                verify_crc=options.check_crcs,
                allow_partial_tail=False,
            )
            if decoded.num_rows:
                stats.rows += decoded.num_rows
                yield _to_spark_batch(decoded, part.topic, part.partition, schema, include_headers)
    finally:
        if options.metrics_dir:
            _write_metrics(options.metrics_dir, part, stats)


def _raw_chunks(
    options: ReaderOptions, part: PylogInputPartition, stats: _Stats
) -> Iterator[tuple[bytes | memoryview, int]]:
    """(bytes of whole batches, the offset to decode from) covering [part.start, part.end), in order."""
    next_offset = part.start
    end = part.end
    if options.transport in ("auto", "local"):
        pdir = find_partition_dir(part.log_dirs, part.topic, part.partition)
        if pdir is None and options.transport == "local":
            raise ConfigError(
                f"option 'pylog.transport' is 'local' but no directory {part.topic}-{part.partition} with "
                f"segments exists under the log dirs {list(part.log_dirs)} on this machine; set pylog.logDirs "
                "or use pylog.transport=auto"
            )
        scanner = LocalPartitionScanner(pdir) if pdir is not None else None
        committed: ReadCommittedFilter | None = None
        if scanner is not None and options.read_committed:
            try:
                committed = ReadCommittedFilter(
                    (a.producer_id, a.first_offset) for a in scanner.aborted_transactions(next_offset, end)
                )
            except (SegmentGoneError, CorruptIndexError) as exc:
                log.warning(
                    "kafka.isolation.level=read_committed: the aborted transactions of %s-%d [%d, %d) cannot be "
                    "read from the .txnindex files under %s (%s); fetching the range from the broker instead",
                    part.topic,
                    part.partition,
                    next_offset,
                    end,
                    pdir,
                    exc,
                )
                scanner = None
        if scanner is not None:
            stats.transport.append("local")
            try:
                for chunk in scanner.chunks(next_offset, end):
                    stats.batches += chunk.batches
                    stats.bytes += len(chunk.data)
                    yield _committed(committed, chunk.data, stats), next_offset
                    next_offset = chunk.next_offset
            except SegmentGoneError as exc:
                log.info("direct scan of %s stopped (%s); fetching the rest", pdir, exc)
            if next_offset >= end:
                return
    stats.transport.append("fetch")
    yield from _fetch_chunks(options, part, next_offset, stats)


def _committed(
    committed: ReadCommittedFilter | None, data: bytes | memoryview, stats: _Stats
) -> bytes | memoryview:
    """``data`` without the batches of aborted transactions (read_committed), else unchanged."""
    if committed is None:
        return data
    before = committed.batches_dropped
    kept = committed.keep(data)
    stats.aborted_batches += committed.batches_dropped - before
    return kept


def _fetch_chunks(
    options: ReaderOptions, part: PylogInputPartition, next_offset: int, stats: _Stats
) -> Iterator[tuple[bytes | memoryview, int]]:
    tp = (part.topic, part.partition)
    end = part.end
    max_bytes = options.max_partition_fetch_bytes
    poll_timeout_ms = options.poll_timeout_ms
    #: When the task last made progress (or began): kafkaConsumer.pollTimeoutMs counts from here.
    progress_at = time.monotonic()
    #: Since when the leader's high watermark has stayed below the offset still needed (None: it has not).
    hw_behind_since: float | None = None

    def waited_out() -> bool:
        return (time.monotonic() - progress_at) * 1000 >= poll_timeout_ms

    def poll_timeout(cause: str) -> WaitTimeoutError:
        return WaitTimeoutError(
            f"Cannot fetch record for offset {next_offset} in {poll_timeout_ms} milliseconds: topic "
            f"{part.topic!r} partition {part.partition}, reading range [{part.start}, {end}): {cause} "
            "(option kafkaConsumer.pollTimeoutMs: how long a read task waits for the records of its range)"
        )

    # No single request or retried call outlasts the poll timeout (Spark's consumer.poll(pollTimeoutMs) bound).
    capped = replace(
        options,
        request_timeout_ms=min(options.request_timeout_ms, poll_timeout_ms),
        default_api_timeout_ms=min(options.default_api_timeout_ms, poll_timeout_ms),
    )
    client = reader_client(part.bootstrap, capped)
    try:
        while next_offset < end:
            try:
                result = client.fetch(
                    {tp: next_offset},
                    max_bytes=max(options.fetch_max_bytes, max_bytes),
                    partition_max_bytes=max_bytes,
                    max_wait_ms=100,
                    min_bytes=1,
                    isolation_level=options.isolation_level_code,
                )[tp]
            except KafkaError as exc:  # the leader stayed unreachable for kafka.default.api.timeout.ms
                if waited_out():
                    raise poll_timeout(f"the leader did not answer ({exc})") from exc
                raise KafkaError(
                    exc.code,
                    f"fetching topic {part.topic!r} partition {part.partition} at offset {next_offset} failed: "
                    f"{exc}",
                ) from exc
            error = result.error
            if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                next_offset = _lost(options, part, next_offset, client)
                progress_at = time.monotonic()
                continue
            if error:
                if KafkaError(error).retriable and waited_out():
                    raise poll_timeout(f"the leader answered {KafkaError(error)}")
                raise KafkaError(
                    error,
                    f"fetching topic {part.topic!r} partition {part.partition} at offset {next_offset} failed"
                    + (
                        f" (kafka.default.api.timeout.ms={capped.default_api_timeout_ms} spent retrying)"
                        if KafkaError(error).retriable
                        else ""
                    ),
                )
            records = result.records or b""
            spans = iter_batch_spans(records) if records else []
            if not spans:
                # read_committed: the broker answers up to the last stable offset, the range ends at or below it.
                hw = result.last_stable_offset if options.read_committed else result.high_watermark
                if hw <= next_offset:
                    # A leader elected after the range was planned learns the high watermark from its
                    # followers' next fetches, so it may briefly be lower than the old leader's: wait for it
                    # within the retry budget (and the poll timeout) before calling the missing offsets lost.
                    now = time.monotonic()
                    hw_behind_since = now if hw_behind_since is None else hw_behind_since
                    if (now - hw_behind_since) * 1000 < options.default_api_timeout_ms and not waited_out():
                        time.sleep(options.retry_backoff_ms / 1000)
                        continue
                    next_offset = _lost(options, part, next_offset, client, high_watermark=hw)
                    progress_at = time.monotonic()
                    continue
                if records:
                    max_bytes *= 2  # one batch larger than the partition limit: ask for more
                    continue
                if waited_out():
                    raise poll_timeout(f"the leader's high watermark is {hw} but it returned no records")
                time.sleep(options.retry_backoff_ms / 1000)
                continue
            last_pos, last = spans[-1]
            if last.next_offset <= next_offset:  # only batches before the offset asked for: no progress
                if waited_out():
                    raise poll_timeout("the leader returned only batches before that offset")
                time.sleep(options.retry_backoff_ms / 1000)
                continue
            hw_behind_since = None
            stats.batches += len(spans)
            stats.bytes += last_pos + last.size
            whole = memoryview(records)[: last_pos + last.size]
            if options.read_committed:
                # Kafka's unit: the aborted list belongs to this answer (from its fetch offset to the LSO).
                committed = ReadCommittedFilter(result.aborted_transactions or ())
                yield _committed(committed, whole, stats), next_offset
            else:
                yield whole, next_offset
            next_offset = last.next_offset
            progress_at = time.monotonic()
    finally:
        client.close()


def _lost(
    options: ReaderOptions,
    part: PylogInputPartition,
    offset: int,
    client: KafkaClient,
    high_watermark: int | None = None,
) -> int:
    """Handle offsets that left the log during the read: raise, or return where to resume (may be >= end)."""
    tp = (part.topic, part.partition)
    earliest = client.list_offsets({tp: EARLIEST_TIMESTAMP})[tp][0]
    latest = (
        client.list_offsets({tp: LATEST_TIMESTAMP}, isolation_level=options.isolation_level_code)[tp][0]
        if high_watermark is None
        else high_watermark
    )
    if offset < earliest:
        lost_to = min(earliest, part.end)
        what = (
            f"offsets [{offset}, {lost_to}) are no longer in the log (earliest available offset {earliest})"
        )
        resume = earliest
    else:
        lost_to = part.end
        what = (
            f"offsets [{offset}, {part.end}) are beyond the log's last stable offset {latest} "
            "(kafka.isolation.level=read_committed; was the log truncated?)"
            if options.read_committed
            else f"offsets [{offset}, {part.end}) are beyond the log's latest offset {latest} (was it truncated?)"
        )
        resume = part.end
    msg = (
        f"topic {part.topic!r} partition {part.partition}, reading range [{part.start}, {part.end}): {what}; "
        "data was lost (retention, deletion or truncation)"
    )
    if options.fail_on_data_loss:
        raise DataLossError(
            f'{msg}; set the source option "failOnDataLoss" to "false" to skip the missing offsets instead'
        )
    log.warning("%s; skipping [%d, %d) (failOnDataLoss=false)", msg, offset, lost_to)
    return resume


def _to_spark_batch(
    decoded: pa.RecordBatch, topic: str, partition: int, schema: pa.Schema, include_headers: bool
) -> pa.RecordBatch:
    n = decoded.num_rows
    timestamps = decoded.column("timestamp").view(_TS_MS).cast(_TS_US)
    columns = [
        decoded.column("key"),
        decoded.column("value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        decoded.column("offset"),
        timestamps,
        decoded.column("timestampType"),
    ]
    if include_headers:
        columns.append(decoded.column("headers").cast(schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _write_metrics(directory: str, part: PylogInputPartition, stats: _Stats) -> None:
    record = {
        "topic": part.topic,
        "partition": part.partition,
        "start": part.start,
        "end": part.end,
        "transport": "+".join(stats.transport) or "none",
        "batches": stats.batches,
        "bytes": stats.bytes,
        "rows": stats.rows,
        "isolation": "read_committed" if stats.read_committed else "read_uncommitted",
        "aborted_batches": stats.aborted_batches,
    }
    try:
        os.makedirs(directory, exist_ok=True)
        write_atomically(
            os.path.join(directory, f"read-{uuid.uuid4().hex}.json"), json.dumps(record).encode()
        )
    except OSError as exc:  # metrics must never fail a read
        log.warning("could not write read metrics to %s: %s", directory, exc)
