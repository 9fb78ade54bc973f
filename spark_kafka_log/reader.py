"""The batch reader of ``spark.read.format("pylog")``: topic partitions by offset range into Arrow batches.

Where each piece runs and when (PySpark's Python Data Source lifecycle):

* :func:`create_reader` -- **driver** (the planner's Python worker), from ``PylogDataSource.reader()``, once
  per query: parses the options (:mod:`spark_kafka_log.reader_options`; a bad option fails here) and returns
  a :class:`PylogPushdownReader` when ``spark.sql.python.filterPushdown.enabled`` is true, else a
  :class:`PylogReader` (PySpark refuses a reader that implements ``pushFilters`` while the conf is off).
* :meth:`PylogPushdownReader.pushFilters` -- **driver**, once, before ``partitions()``: keeps the filters
  it can turn into offset ranges (see "Filter pushdown" below) on ``self``.
* :meth:`PylogReader.partitions` -- **driver**, once: resolves concrete offset ranges through the broker
  (Metadata, ListOffsets; timestamps through the broker's time index), checks them against the log's
  [earliest, latest] (``failOnDataLoss``), narrows them by the pushed filters and splits them
  (``minPartitions``, ``maxRecordsPerPartition``) into picklable :class:`PylogInputPartition` objects that
  carry everything a task needs (the resolved broker address too: PySpark pickles the reader BEFORE it
  calls ``partitions()``, so nothing set there reaches the executors except through the partitions).
* :meth:`PylogReader.read` -- **executors**, once per input partition: pulls whole record batches for
  [start, end) from one of two transports and yields ``pyarrow.RecordBatch`` objects decoded by the
  vectorized decoder (:func:`broker_runtime.protocol.arrow_records.decode_batches`; no Python loop per
  record), with exactly the Arrow schema PySpark derives from the Spark schema.

Transports (``pylog.transport``), behind one loop that decodes chunks of whole batches:

* ``local`` -- the direct segment scan of :mod:`spark_kafka_log.local_scan`: segment by base offset,
  seek through the ``.index``, read whole batches, read-only. Used by ``auto`` whenever the partition's
  directory exists under the log dirs (``pylog.logDirs``, or ``<pylog.dataDir>/logs`` for the embedded
  broker). If the files end before the range does, or a segment vanishes (retention), the rest is fetched.
* ``fetch`` -- Kafka Fetch requests over TCP to any Kafka-protocol broker.

Both hand the same bytes to the same decoder, so they give identical rows. Control batches and records
outside [start, end) are dropped by the decoder; every codec is decoded.

Filter pushdown (only with ``spark.sql.python.filterPushdown.enabled=true``): ``partition = n`` /
``partition IN (...)`` and ``offset`` comparisons (=, >, >=, <, <=) are applied EXACTLY by narrowing the
planned ranges, so they are not returned to Spark. ``timestamp >= t`` / ``timestamp > t`` / ``timestamp = t``
move each range's start to the first offset whose timestamp is >= t (ListOffsets, i.e. the time index);
records before that offset all have smaller timestamps, so nothing matching is skipped. Timestamps need
not grow with offsets (CreateTime), so upper timestamp bounds cannot cut a range safely: every timestamp
filter is also returned to Spark, which applies it exactly. Everything else is returned untouched.

Errors: bad options raise :class:`~broker_runtime.errors.ConfigError` naming the option; an unknown topic or
partition raises :class:`UnknownTopicError`; lost data with ``failOnDataLoss=true`` raises
:class:`DataLossError` naming the topic, partition and offset range (with ``false`` the lost part is
skipped with a warning on the logger ``spark_kafka_log.reader``).

Per-task metrics: with ``pylog.metricsDir`` set, each task writes ``<dir>/read-<uuid>.json`` with
``topic, partition, start, end, transport, batches, bytes, rows``, so tests and users can see what a
query actually read (PySpark's Python data sources have no metrics API).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import re
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ConfigError, ErrorCode, KafkaError, PylogError
from broker_runtime.protocol.arrow_records import decode_batches
from broker_runtime.protocol.batch_header import iter_batch_spans
from spark_kafka_log.local_scan import LocalPartitionScanner, SegmentGoneError, find_partition_dir
from spark_kafka_log.reader_options import EARLIEST, LATEST, ReaderOptions, parse_reader_options
from spark_kafka_log.schema import KAFKA_SOURCE_SCHEMA

__all__ = [
    "DataLossError",
    "PylogInputPartition",
    "PylogPushdownReader",
    "PylogReader",
    "UnknownTopicError",
    "arrow_schema",
    "create_reader",
    "reader_schema",
]

log = logging.getLogger("spark_kafka_log.reader")

TopicPartition = tuple[str, int]

_HEADERS_FIELD = StructField(
    "headers",
    ArrayType(
        StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True
    ),
    True,
)
_TS_MS = pa.timestamp("ms", tz="UTC")
_TS_US = pa.timestamp("us", tz="UTC")
_MAX_EMPTY_FETCHES = 20
_METADATA, _LIST_OFFSETS, _FETCH = 3, 2, 1
#: Metadata v4+ (AllowAutoTopicCreation=false: a read never creates a topic), ListOffsets v1+ (one offset
#: per timestamp), Fetch v5+ (log start offset).
_MIN_VERSIONS = {_METADATA: 4, _LIST_OFFSETS: 1, _FETCH: 5}


class UnknownTopicError(PylogError):
    """A subscribed or assigned topic / partition does not exist on the broker."""


class DataLossError(PylogError):
    """Offsets the query needs are no longer (or not yet) in the log, and ``failOnDataLoss`` is true."""


def reader_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema; with ``includeHeaders`` plus ``headers array<struct<key,value>>``."""
    fields = list(KAFKA_SOURCE_SCHEMA.fields)
    if include_headers:
        fields.append(_HEADERS_FIELD)
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema PySpark requires of batches yielded for ``schema`` (timestamps as us, UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


@dataclass
class PylogInputPartition(InputPartition):
    """One Spark task: offsets [start, end) of one topic partition, plus what the task needs to get them.

    Built on the driver by :meth:`PylogReader.partitions`, pickled to an executor.
    """

    topic: str
    partition: int
    start: int
    end: int
    bootstrap: str
    log_dirs: tuple[str, ...]

    def __post_init__(self) -> None:
        self.value = f"{self.topic}-{self.partition}[{self.start},{self.end})"


@dataclass(frozen=True)
class _Pushed:
    """Constraints taken from pushed filters (all optional); offsets are [lo, hi)."""

    partitions: frozenset[int] | None = None
    offset_lo: int | None = None
    offset_hi: int | None = None
    timestamp_lo_ms: int | None = None

    def with_partitions(self, values: Sequence[int]) -> _Pushed:
        keep = frozenset(values) if self.partitions is None else self.partitions & frozenset(values)
        return replace(self, partitions=keep)

    def with_offsets(self, lo: int | None, hi: int | None) -> _Pushed:
        new_lo = lo if self.offset_lo is None else (self.offset_lo if lo is None else max(lo, self.offset_lo))
        new_hi = hi if self.offset_hi is None else (self.offset_hi if hi is None else min(hi, self.offset_hi))
        return replace(self, offset_lo=new_lo, offset_hi=new_hi)

    def with_timestamp(self, lo_ms: int) -> _Pushed:
        cur = self.timestamp_lo_ms
        return replace(self, timestamp_lo_ms=lo_ms if cur is None else max(cur, lo_ms))


def _connect(bootstrap: str, options: ReaderOptions) -> KafkaClient:
    """The reader's Kafka client: leader routing, version negotiation, never auto-creating a topic."""
    return KafkaClient(
        bootstrap,
        client_id=options.client_id,
        request_timeout_ms=options.request_timeout_ms,
        min_versions=_MIN_VERSIONS,
    )


def _partitions_by_topic(client: KafkaClient, topics: list[str] | None) -> dict[str, list[int] | None]:
    """{topic: sorted partitions, or None when unknown}; ``None`` asks for every (non-internal) topic."""
    out: dict[str, list[int] | None] = {}
    for t in client.metadata(topics, allow_auto_create=False).topics.values():
        if t.error:
            out[t.name] = None
        elif not t.is_internal:
            out[t.name] = sorted(t.partitions)
    return out


def _resolve_bootstrap(options: ReaderOptions) -> str:
    if options.bootstrap_servers is not None:
        return options.bootstrap_servers
    from broker_runtime.launch import ensure_embedded_broker

    return ensure_embedded_broker(options.data_dir)


class PylogReader(DataSourceReader):
    """Batch reader of pylog / Kafka topics (no filter pushdown; see :class:`PylogPushdownReader`)."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._pushed = _Pushed()

    # ------------------------------------------------------------------ planning (driver)

    def partitions(self) -> Sequence[InputPartition]:
        """Driver: resolve and split the offset ranges of every selected topic partition."""
        bootstrap = _resolve_bootstrap(self.options)
        client = _connect(bootstrap, self.options)
        try:
            ranges = self._plan_ranges(client)
        finally:
            client.close()
        log_dirs = self.options.effective_log_dirs()
        return [
            PylogInputPartition(t, p, s, e, bootstrap, log_dirs)
            for t, p, s, e in _split(
                ranges, self.options.min_partitions, self.options.max_records_per_partition
            )
        ]

    def _selected_partitions(self, client: KafkaClient) -> list[TopicPartition]:
        opts = self.options
        if opts.assign is not None:
            wanted_topics = sorted({t for t, _ in opts.assign})
            known = _partitions_by_topic(client, wanted_topics)
            for t, p in opts.assign:
                parts = known.get(t)
                if parts is None:
                    raise UnknownTopicError(f"option 'assign': topic {t!r} does not exist on the broker")
                if p not in parts:
                    raise UnknownTopicError(
                        f"option 'assign': partition {p} of topic {t!r} does not exist (it has partitions "
                        f"{parts})"
                    )
            return sorted(opts.assign)
        if opts.subscribe is not None:
            known = _partitions_by_topic(client, list(opts.subscribe))
            missing = [t for t in opts.subscribe if known.get(t) is None]
            if missing:
                raise UnknownTopicError(
                    f"option 'subscribe': topic(s) {', '.join(map(repr, missing))} do not exist on the broker"
                )
            return sorted((t, p) for t in opts.subscribe for p in known[t] or [])
        assert opts.subscribe_pattern is not None
        pattern = re.compile(opts.subscribe_pattern)
        known = _partitions_by_topic(client, None)
        return sorted((t, p) for t, parts in known.items() if parts and pattern.fullmatch(t) for p in parts)

    def _plan_ranges(self, client: KafkaClient) -> list[tuple[str, int, int, int]]:
        opts = self.options
        all_tps = self._selected_partitions(client)
        if not all_tps:
            return []
        earliest = {tp: r[0] for tp, r in client.list_offsets({tp: EARLIEST for tp in all_tps}).items()}
        latest = {tp: r[0] for tp, r in client.list_offsets({tp: LATEST for tp in all_tps}).items()}
        starts = self._resolve(client, all_tps, opts.starting, earliest, latest, starting=True)
        ends = self._resolve(client, all_tps, opts.ending, earliest, latest, starting=False)

        pushed = self._pushed
        tps = all_tps if pushed.partitions is None else [tp for tp in all_tps if tp[1] in pushed.partitions]
        ranges: list[tuple[str, int, int, int]] = []
        for tp in tps:
            t, p = tp
            start, end = self._checked_range(tp, starts[tp], ends[tp], earliest[tp], latest[tp])
            if pushed.offset_lo is not None:
                start = max(start, pushed.offset_lo)
            if pushed.offset_hi is not None:
                end = min(end, pushed.offset_hi)
            ranges.append((t, p, start, max(start, end)))
        if pushed.timestamp_lo_ms is not None:
            live = [(t, p) for t, p, s, e in ranges if s < e]
            found = client.list_offsets({tp: pushed.timestamp_lo_ms for tp in live}) if live else {}
            narrowed = []
            for t, p, s, e in ranges:
                if (t, p) in found:
                    o = found[(t, p)][0]
                    s = e if o < 0 else max(s, min(o, e))
                narrowed.append((t, p, s, e))
            ranges = narrowed
        return ranges

    def _resolve(
        self,
        client: KafkaClient,
        tps: list[TopicPartition],
        bound: Any,
        earliest: dict[TopicPartition, int],
        latest: dict[TopicPartition, int],
        *,
        starting: bool,
    ) -> dict[TopicPartition, int]:
        opts = self.options
        which = "starting" if starting else "ending"
        if bound.kind == "earliest":
            return dict(earliest)
        if bound.kind == "latest":
            return dict(latest)
        if bound.kind in ("offsets", "timestamps"):
            given = bound.as_dict()
            name = {
                ("offsets", True): "startingOffsets",
                ("offsets", False): "endingOffsets",
                ("timestamps", True): "startingOffsetsByTimestamp",
                ("timestamps", False): "endingOffsetsByTimestamp",
            }[(bound.kind, starting)]
            if set(given) != set(tps):
                raise ConfigError(
                    f"option {name!r}: it must name exactly the partitions of the query (as Spark's Kafka source "
                    f"requires); given {_fmt_tps(given)}, the query reads {_fmt_tps(tps)}"
                    + ("; use -2 for earliest, -1 for latest" if bound.kind == "offsets" else "")
                )
            if bound.kind == "offsets":
                return {
                    tp: earliest[tp] if v == EARLIEST else latest[tp] if v == LATEST else v
                    for tp, v in given.items()
                }
            timestamps = given
        else:
            assert bound.timestamp is not None
            timestamps = {tp: bound.timestamp for tp in tps}
        found = client.list_offsets(timestamps)
        out: dict[TopicPartition, int] = {}
        for tp in tps:
            offset = found[tp][0]
            if offset is None or offset < 0:
                # No record with a timestamp >= t.
                if starting and opts.starting_by_timestamp_strategy == "error":
                    raise DataLossError(
                        f"{which} offset by timestamp: no record of {tp[0]}-{tp[1]} has a timestamp >= "
                        f"{timestamps[tp]} ms (latest offset {latest[tp]}); set "
                        "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead"
                    )
                offset = latest[tp]
            out[tp] = offset
        return out

    def _checked_range(
        self, tp: TopicPartition, start: int, end: int, earliest: int, latest: int
    ) -> tuple[int, int]:
        t, p = tp
        fail = self.options.fail_on_data_loss
        hint = 'set the source option "failOnDataLoss" to "false" to skip the missing offsets instead'
        if start < earliest:
            msg = (
                f"topic {t!r} partition {p}: offsets [{start}, {min(earliest, end)}) of the requested range "
                f"[{start}, {end}) are no longer in the log (earliest available offset {earliest}); the data "
                "was removed by retention or the topic was recreated"
            )
            if fail:
                raise DataLossError(f"{msg}; {hint}")
            log.warning("%s; skipping them (failOnDataLoss=false)", msg)
            start = earliest
        if end > latest:
            msg = (
                f"topic {t!r} partition {p}: ending offset {end} of the requested range [{start}, {end}) is "
                f"beyond the latest offset {latest}"
            )
            if fail:
                raise DataLossError(f"{msg}; {hint}")
            log.warning("%s; reading up to %d (failOnDataLoss=false)", msg, latest)
            end = latest
        if start > end:
            msg = (
                f"topic {t!r} partition {p}: starting offset {start} is after the ending offset {end} "
                f"(log range [{earliest}, {latest}))"
            )
            if fail:
                raise DataLossError(f"{msg}; {hint}")
            log.warning("%s; reading nothing from it (failOnDataLoss=false)", msg)
            start = end
        return start, end

    # ------------------------------------------------------------------ reading (executors)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: yield the records of one input partition as Arrow batches of the declared schema."""
        if not isinstance(partition, PylogInputPartition) or partition.start >= partition.end:
            return iter(())
        return _read_partition(self.options, partition, arrow_schema(self.schema))


class PylogPushdownReader(PylogReader):
    """:class:`PylogReader` plus ``pushFilters`` (used when Spark's Python filter pushdown is enabled)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Driver, once, before ``partitions()``: keep what narrows offset ranges; yield the rest back."""
        for f in filters:
            if not self._push(f):
                yield f

    def _push(self, f: Filter) -> bool:
        """Record ``f`` if it can narrow the plan; True when it is then applied exactly (not returned)."""
        attr = getattr(f, "attribute", None)
        if not isinstance(attr, tuple) or len(attr) != 1:
            return False
        column = attr[0].lower()
        value: Any = getattr(f, "value", None)
        if column == "partition":
            if isinstance(f, EqualTo) and _is_int(value):
                self._pushed = self._pushed.with_partitions([value])
                return True
            if isinstance(f, In) and all(_is_int(v) for v in value):
                self._pushed = self._pushed.with_partitions(list(value))
                return True
            return False
        if column == "offset" and _is_int(value):
            lo_hi = {
                EqualTo: (value, value + 1),
                GreaterThan: (value + 1, None),
                GreaterThanOrEqual: (value, None),
                LessThan: (None, value),
                LessThanOrEqual: (None, value + 1),
            }.get(type(f))
            if lo_hi is None:
                return False
            self._pushed = self._pushed.with_offsets(*lo_hi)
            return True
        if column == "timestamp" and isinstance(value, _dt.datetime):
            micros = _micros(value)
            if isinstance(f, (GreaterThanOrEqual, EqualTo)):
                self._pushed = self._pushed.with_timestamp(-(-micros // 1000))  # ceil to ms
            elif isinstance(f, GreaterThan):
                self._pushed = self._pushed.with_timestamp(micros // 1000 + 1)
            return False  # Spark still applies every timestamp filter exactly.
        return False


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _micros(value: _dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    delta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _fmt_tps(tps: Any) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"


def _split(
    ranges: list[tuple[str, int, int, int]], min_partitions: int | None, max_records: int | None
) -> list[tuple[str, int, int, int]]:
    """Spark's KafkaOffsetRangeCalculator: drop empty ranges, cap records per range, then honour minPartitions."""
    out = [r for r in ranges if r[3] > r[2]]
    if max_records is not None:
        capped = []
        for t, p, s, e in out:
            parts = -(-(e - s) // max_records)
            capped.extend(_even(t, p, s, e, parts))
        out = capped
    if min_partitions is not None and min_partitions > len(out) and out:
        total = sum(e - s for _, _, s, e in out)
        split = []
        for t, p, s, e in out:
            parts = max(round((e - s) / total * min_partitions), 1)
            split.extend(_even(t, p, s, e, parts))
        out = split
    return out


def _even(t: str, p: int, s: int, e: int, parts: int) -> list[tuple[str, int, int, int]]:
    out = []
    remaining = e - s
    start = s
    for i in range(parts):
        this = remaining // (parts - i)
        remaining -= this
        end = min(start + this, e)
        if end > start:
            out.append((t, p, start, end))
        start = end
    return out


# ---------------------------------------------------------------------- executor side


@dataclass
class _Stats:
    transport: list[str] = field(default_factory=list)
    batches: int = 0
    bytes: int = 0
    rows: int = 0


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
        if pdir is not None:
            stats.transport.append("local")
            scanner = LocalPartitionScanner(pdir)
            try:
                for chunk in scanner.chunks(next_offset, end):
                    stats.batches += chunk.batches
                    stats.bytes += len(chunk.data)
                    yield chunk.data, next_offset
                    next_offset = chunk.next_offset
            except SegmentGoneError as exc:
                log.info("direct scan of %s stopped (%s); fetching the rest", pdir, exc)
            if next_offset >= end:
                return
    stats.transport.append("fetch")
    yield from _fetch_chunks(options, part, next_offset, stats)


def _fetch_chunks(
    options: ReaderOptions, part: PylogInputPartition, next_offset: int, stats: _Stats
) -> Iterator[tuple[bytes | memoryview, int]]:
    tp = (part.topic, part.partition)
    end = part.end
    max_bytes = options.max_partition_fetch_bytes
    empty = 0
    client = _connect(part.bootstrap, options)
    try:
        while next_offset < end:
            result = client.fetch(
                {tp: next_offset},
                max_bytes=max(options.fetch_max_bytes, max_bytes),
                partition_max_bytes=max_bytes,
                max_wait_ms=100,
                min_bytes=1,
            )[tp]
            error = result.error
            if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                next_offset = _lost(options, part, next_offset, client)
                continue
            if error:
                raise KafkaError(error, f"fetching {part.topic}-{part.partition} at offset {next_offset}")
            records = result.records or b""
            spans = iter_batch_spans(records) if records else []
            if not spans:
                hw = result.high_watermark
                if hw <= next_offset:
                    next_offset = _lost(options, part, next_offset, client, high_watermark=hw)
                    continue
                if records:
                    max_bytes *= 2  # one batch larger than the partition limit: ask for more
                empty += 1
                if empty > _MAX_EMPTY_FETCHES:
                    raise PylogError(
                        f"topic {part.topic!r} partition {part.partition}: the broker returned no records at "
                        f"offset {next_offset} {empty} times although the range ends at {end}"
                    )
                continue
            last_pos, last = spans[-1]
            if last.next_offset <= next_offset:
                empty += 1  # only batches before the offset asked for: no progress
                continue
            empty = 0
            stats.batches += len(spans)
            stats.bytes += last_pos + last.size
            yield memoryview(records)[: last_pos + last.size], next_offset
            next_offset = last.next_offset
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
    earliest = client.list_offsets({tp: EARLIEST})[tp][0]
    latest = client.list_offsets({tp: LATEST})[tp][0] if high_watermark is None else high_watermark
    if offset < earliest:
        lost_to = min(earliest, part.end)
        what = (
            f"offsets [{offset}, {lost_to}) are no longer in the log (earliest available offset {earliest})"
        )
        resume = earliest
    else:
        lost_to = part.end
        what = (
            f"offsets [{offset}, {part.end}) are beyond the log's latest offset {latest} (was it truncated?)"
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


def _read_partition(
    options: ReaderOptions, part: PylogInputPartition, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    stats = _Stats()
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
    }
    try:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"read-{uuid.uuid4().hex}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)
    except OSError as exc:  # metrics must never fail a read
        log.warning("could not write read metrics to %s: %s", directory, exc)


# ---------------------------------------------------------------------- factory (driver)


def _pushdown_enabled_in_planner() -> bool:
    """Whether the PySpark planner that is calling us has ``spark.sql.python.filterPushdown.enabled`` on.

    PySpark (4.1-4.3) reads the conf in ``pyspark.sql.worker.plan_data_source_read`` into the local
    variable ``enable_pushdown`` before calling ``DataSource.reader()``, and refuses a reader implementing
    ``pushFilters`` when it is false, but does not tell ``reader()``. So we look for that local in the
    calling frames; when it cannot be found (another caller), pushdown is assumed enabled.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").endswith("plan_data_source_read"):
            value = frame.f_locals.get("enable_pushdown")
            if isinstance(value, bool):
                return value
        frame = frame.f_back  # type: ignore[assignment]
    return True


def create_reader(options: Mapping[str, str], schema: StructType | None = None) -> PylogReader:
    """Driver: the reader for ``spark.read.format("pylog")`` with these options and schema.

    ``schema`` is what Spark passes to ``DataSource.reader()``: it must be the Kafka source schema (with
    ``headers`` exactly when ``includeHeaders`` is true); a user-specified schema is rejected as Spark's
    Kafka source rejects it.
    """
    parsed = parse_reader_options(options)
    expected = reader_schema(parsed.include_headers)
    if schema is not None and [f.name for f in schema.fields] != [f.name for f in expected.fields]:
        raise ConfigError(
            "the pylog source has a fixed schema and cannot be read with a custom one; expected "
            f"{expected.simpleString()}, got {schema.simpleString()}"
        )
    cls = PylogPushdownReader if _pushdown_enabled_in_planner() else PylogReader
    return cls(parsed, expected)
