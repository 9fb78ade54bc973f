"""Read planning: which topic partitions a query reads and which concrete offset ranges, split into Spark tasks.

Runs on: driver (planning).

Where this runs: the **driver** (the planner's Python worker), from the reader's ``partitions()``, once per batch
query; the streaming reader (:mod:`spark_kafka_log.stream.stream_plan`) resolves its offsets and turns each micro-batch's
ranges into tasks with the same pieces (:func:`list_offsets`, :func:`resolve_bound`, :func:`input_partitions`). It talks to the broker (Metadata,
ListOffsets; timestamps through the broker's time index) over one client it opens and closes.

Steps (Spark's Kafka source rules for batch queries):

1. :func:`selected_partitions` -- ``assign`` (every named partition must exist), ``subscribe`` (every topic must
   exist; a stream waits for them) or ``subscribePattern`` (a regex found anywhere in the name, as Java's
   ``Matcher.find`` in Spark's Kafka source); unknown ones raise :class:`~broker_runtime.errors.UnknownTopicError`;
2. :func:`plan_ranges` -- resolve the starting and ending bounds (earliest / latest / per-partition offsets /
   timestamps) to offsets, check them against the log's [earliest, latest] (``failOnDataLoss``: raise
   :class:`~broker_runtime.errors.DataLossError` naming topic, partition and range, or log a warning on
   ``spark_kafka_log.read.read_plan`` and clamp), then narrow them by the pushed filters
   (:class:`~spark_kafka_log.read.pushdown.PushedFilters`);
3. :func:`split_ranges` -- Spark's KafkaOffsetRangeCalculator: drop empty ranges, cap records per task
   (``maxRecordsPerPartition``), then honour ``minPartitions``.

A range is ``(topic, partition, start, end)`` with ``start <= end``, end exclusive.

Isolation (``kafka.isolation.level``): every ListOffsets carries it. With ``read_committed`` the partition's
"latest" is its last stable offset (LSO: the first offset of the earliest open transaction, else the high
watermark), as a Kafka consumer's ``endOffsets`` in read_committed, so ``latest`` ends there. An explicit or
timestamp-resolved ending offset beyond the LSO is treated like one beyond the latest offset: with
``failOnDataLoss=true`` the query fails naming the LSO and why (offsets from there on are not yet decided);
with ``false`` the range is capped at the LSO with a WARNING. Every planned range therefore ends at or below
the LSO seen here; the read tasks rely on that (all transactions with records below it are complete, so their
ABORT markers and ``.txnindex`` entries exist).

Offset lookups and ``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``: every planning step (a batch
query's whole plan; a stream's initial offsets, latest offsets, Trigger.AvailableNow target and micro-batch
tasks) runs under :func:`with_offset_retries`, as Spark's KafkaOffsetReader runs its lookups: up to
``numRetries`` attempts, each with a new client (the client itself retries leader moves for
``kafka.default.api.timeout.ms`` within one attempt), ``retryIntervalMs`` apart, a WARNING per failed attempt;
then the last error is raised. Only Kafka errors and failed connections are retried: a missing topic, a bad
option or data loss is an answer, not a transient failure.

Transport per task: a partition with more than one replica is never read from local segment files (its task
gets no log dirs, so ``pylog.transport=auto`` fetches it from the leader, with a WARNING when log dirs were
given; ``local`` fails on the driver naming the partitions): a replica's files may be behind the leader or,
for a replica that left the ISR (an old leader that died), hold records that were never committed, and
nothing in the files tells which replica they are.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ConfigError, DataLossError, ErrorCode, KafkaError, UnknownTopicError
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from broker_runtime.protocol.topic_partition import TopicPartition
from spark_kafka_log.common.connections import reader_client
from spark_kafka_log.common.reader_options import OffsetBound, ReaderOptions
from spark_kafka_log.read.input_partition import PylogInputPartition
from spark_kafka_log.read.pushdown import PushedFilters

__all__ = [
    "OffsetRange",
    "TopicPartition",
    "plan_input_partitions",
    "plan_ranges",
    "input_partitions",
    "list_offsets",
    "resolve_bootstrap",
    "resolve_bound",
    "selected_partitions",
    "split_ranges",
    "with_offset_retries",
]

log = logging.getLogger("spark_kafka_log.read_plan")

#: (topic, partition, start, end): offsets [start, end).
OffsetRange = tuple[str, int, int, int]

_T = TypeVar("_T")

_DATA_LOSS_HINT = 'set the source option "failOnDataLoss" to "false" to skip the missing offsets instead'


def resolve_bootstrap(options: ReaderOptions) -> str:
    """``kafka.bootstrap.servers``, else the embedded broker of ``pylog.dataDir`` (found, or started)."""
    if options.bootstrap_servers is not None:
        return options.bootstrap_servers
    from broker_runtime.launch import ensure_embedded_broker

    return ensure_embedded_broker(options.data_dir)


def with_offset_retries(options: ReaderOptions, what: str, attempt: Callable[[], _T]) -> _T:
    """Driver: ``attempt()`` (which opens and closes its own client) tried up to ``fetchOffset.numRetries`` times,
    ``fetchOffset.retryIntervalMs`` after each failure (a Kafka error or a failed connection), as Spark's
    KafkaOffsetReader; a WARNING names each failed attempt; the last failure is raised."""
    tries = options.fetch_offset_num_retries
    for number in range(1, tries + 1):
        try:
            return attempt()
        except (KafkaError, OSError) as exc:
            log.warning(
                "pylog reader: attempt %d of %d (fetchOffset.numRetries) to %s failed: %s",
                number,
                tries,
                what,
                exc,
            )
            if number == tries:
                raise
            time.sleep(options.fetch_offset_retry_interval_ms / 1000)
    raise AssertionError("unreachable: fetchOffset.numRetries >= 1")


def plan_input_partitions(options: ReaderOptions, pushed: PushedFilters) -> list[PylogInputPartition]:
    """Driver: the Spark tasks of one batch query (resolved, checked, narrowed and split offset ranges)."""
    bootstrap = resolve_bootstrap(options)

    def attempt() -> list[PylogInputPartition]:
        client = reader_client(bootstrap, options)
        try:
            return input_partitions(client, options, bootstrap, plan_ranges(client, options, pushed))
        finally:
            client.close()

    return with_offset_retries(options, "plan the offset ranges", attempt)


def input_partitions(
    client: KafkaClient, options: ReaderOptions, bootstrap: str, ranges: list[OffsetRange]
) -> list[PylogInputPartition]:
    """Driver: resolved ranges -> the Spark tasks that read them (split as Spark's KafkaOffsetRangeCalculator;
    replicated partitions get no log dirs, so they are fetched from their leaders). Batch and stream alike."""
    log_dirs = options.effective_log_dirs()
    replicated = _replicated(client, {(t, p) for t, p, s, e in ranges if e > s}) if log_dirs else {}
    if replicated:
        names = ", ".join(f"{t}-{p} ({n} replicas)" for (t, p), n in sorted(replicated.items()))
        why = (
            "a replica's segment files may be behind the leader, or (a replica that was out of the ISR, e.g. "
            "an old leader that died) hold records that were never committed, and the files do not say which"
        )
        if options.transport == "local":
            raise ConfigError(
                f"option 'pylog.transport' is 'local' but {names} are replicated: {why}; use "
                "pylog.transport=auto or fetch to read them from their leaders"
            )
        log.warning(
            "pylog reader: reading %s by Fetch from their leaders, not from the segment files under %s: %s",
            names,
            list(log_dirs),
            why,
        )
    return [
        PylogInputPartition(t, p, s, e, bootstrap, () if (t, p) in replicated else log_dirs)
        for t, p, s, e in split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    ]


def _replicated(client: KafkaClient, tps: set[TopicPartition]) -> dict[TopicPartition, int]:
    """The partitions of ``tps`` with more than one replica -> their replica count (from the metadata)."""
    if not tps:
        return {}
    md = client.metadata(sorted({t for t, _ in tps}), allow_auto_create=False)
    out: dict[TopicPartition, int] = {}
    for t, p in tps:
        pm = md.topics[t].partitions.get(p) if t in md.topics else None
        if pm is not None and len(pm.replicas) > 1:
            out[(t, p)] = len(pm.replicas)
    return out


def _partitions_by_topic(client: KafkaClient, topics: list[str] | None) -> dict[str, list[int] | None]:
    """{topic: sorted partitions, or None when unknown}; ``None`` asks for every (non-internal) topic. A named
    topic the broker's ACLs hide fails the query (KafkaError TOPIC_AUTHORIZATION_FAILED), as a Kafka consumer's
    TopicAuthorizationException, instead of reading as a topic that does not exist."""
    out: dict[str, list[int] | None] = {}
    for t in client.metadata(topics, allow_auto_create=False).topics.values():
        if t.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise KafkaError(
                t.error,
                f"topic {t.name!r}: not authorized to DESCRIBE it (the broker's ACLs; ask for READ on it)",
            )
        if t.error:
            out[t.name] = None
        elif not t.is_internal:
            out[t.name] = sorted(t.partitions)
    return out


def selected_partitions(client: KafkaClient, options: ReaderOptions) -> list[TopicPartition]:
    """The topic partitions named by ``assign`` / ``subscribe`` / ``subscribePattern``, sorted.

    ``subscribePattern`` selects every non-internal topic in which the regex matches somewhere, as Spark's
    Kafka source does (Java's ``Matcher.find``: ``"events"`` selects ``events`` and ``old-events-2``; anchor it,
    ``"^events$"``, for the whole name). A stream (``options.streaming``) subscribed to topics that do not exist
    yet reads nothing from them until they appear, as a Kafka consumer's ``subscribe`` does; a batch query fails.
    """
    if options.assign is not None:
        known = _partitions_by_topic(client, sorted({t for t, _ in options.assign}))
        for t, p in options.assign:
            parts = known.get(t)
            if parts is None:
                raise UnknownTopicError(f"option 'assign': topic {t!r} does not exist on the broker")
            if p not in parts:
                raise UnknownTopicError(
                    f"option 'assign': partition {p} of topic {t!r} does not exist (it has partitions {parts})"
                )
        return sorted(options.assign)
    if options.subscribe is not None:
        known = _partitions_by_topic(client, list(options.subscribe))
        missing = [t for t in options.subscribe if known.get(t) is None]
        if missing and not options.streaming:
            raise UnknownTopicError(
                f"option 'subscribe': topic(s) {', '.join(map(repr, missing))} do not exist on the broker"
            )
        return sorted((t, p) for t in options.subscribe for p in known.get(t) or [])
    assert options.subscribe_pattern is not None
    pattern = re.compile(options.subscribe_pattern)
    known = _partitions_by_topic(client, None)
    return sorted((t, p) for t, parts in known.items() if parts and pattern.search(t) for p in parts)


def list_offsets(
    client: KafkaClient, options: ReaderOptions, tps: Iterable[TopicPartition], timestamp: int
) -> dict[TopicPartition, int]:
    """ListOffsets of ``tps`` at ``timestamp`` (-2 earliest, -1 latest: with read_committed the last stable
    offset) -> offset per partition."""
    tps = list(tps)
    if not tps:
        return {}
    found = client.list_offsets({tp: timestamp for tp in tps}, isolation_level=options.isolation_level_code)
    return {tp: r[0] for tp, r in found.items()}


def plan_ranges(client: KafkaClient, options: ReaderOptions, pushed: PushedFilters) -> list[OffsetRange]:
    """Resolved, checked and pushdown-narrowed offset ranges of every selected partition (not split)."""
    all_tps = selected_partitions(client, options)
    if not all_tps:
        return []
    earliest = list_offsets(client, options, all_tps, EARLIEST_TIMESTAMP)
    latest = list_offsets(
        client, options, all_tps, LATEST_TIMESTAMP
    )  # read_committed: the last stable offset
    starts = resolve_bound(client, options, all_tps, options.starting, earliest, latest, starting=True)
    ends = resolve_bound(client, options, all_tps, options.ending, earliest, latest, starting=False)

    tps = all_tps if pushed.partitions is None else [tp for tp in all_tps if tp[1] in pushed.partitions]
    ranges: list[OffsetRange] = []
    for tp in tps:
        t, p = tp
        start, end = _checked_range(options, tp, starts[tp], ends[tp], earliest[tp], latest[tp])
        if pushed.offset_lo is not None:
            start = max(start, pushed.offset_lo)
        if pushed.offset_hi is not None:
            end = min(end, pushed.offset_hi)
        ranges.append((t, p, start, max(start, end)))
    if pushed.timestamp_lo_ms is not None:
        live = [(t, p) for t, p, s, e in ranges if s < e]
        found = (
            client.list_offsets(
                {tp: pushed.timestamp_lo_ms for tp in live}, isolation_level=options.isolation_level_code
            )
            if live
            else {}
        )
        narrowed = []
        for t, p, s, e in ranges:
            if (t, p) in found:
                o = found[(t, p)][0]
                s = e if o < 0 else max(s, min(o, e))
            narrowed.append((t, p, s, e))
        ranges = narrowed
    return ranges


_BOUND_OPTION = {
    ("offsets", True): "startingOffsets",
    ("offsets", False): "endingOffsets",
    ("timestamps", True): "startingOffsetsByTimestamp",
    ("timestamps", False): "endingOffsetsByTimestamp",
}


def resolve_bound(
    client: KafkaClient,
    options: ReaderOptions,
    tps: list[TopicPartition],
    bound: OffsetBound,
    earliest: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    *,
    starting: bool,
) -> dict[TopicPartition, int]:
    """The offset of ``bound`` in every partition of ``tps``."""
    which = "starting" if starting else "ending"
    if bound.kind == "earliest":
        return dict(earliest)
    if bound.kind == "latest":
        return dict(latest)
    if bound.kind in ("offsets", "timestamps"):
        given = bound.as_dict()
        if set(given) != set(tps):
            raise ConfigError(
                f"option {_BOUND_OPTION[(bound.kind, starting)]!r}: it must name exactly the partitions of the "
                f"query (as Spark's Kafka source requires); given {_fmt_tps(given)}, the query reads "
                f"{_fmt_tps(tps)}"
                + (
                    f"; use {EARLIEST_TIMESTAMP} for earliest, {LATEST_TIMESTAMP} for latest"
                    if bound.kind == "offsets"
                    else ""
                )
            )
        if bound.kind == "offsets":
            return {
                tp: earliest[tp] if v == EARLIEST_TIMESTAMP else latest[tp] if v == LATEST_TIMESTAMP else v
                for tp, v in given.items()
            }
        timestamps = given
    else:
        assert bound.timestamp is not None
        timestamps = {tp: bound.timestamp for tp in tps}
    found = client.list_offsets(timestamps, isolation_level=options.isolation_level_code)
    out: dict[TopicPartition, int] = {}
    for tp in tps:
        offset = found[tp][0]
        if offset is None or offset < 0:
            # No record with a timestamp >= t.
            if starting and options.starting_by_timestamp_strategy == "error":
                raise DataLossError(
                    f"{which} offset by timestamp: no record of {tp[0]}-{tp[1]} has a timestamp >= "
                    f"{timestamps[tp]} ms (latest offset {latest[tp]}); set "
                    "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead"
                )
            offset = latest[tp]
        out[tp] = offset
    return out


def _checked_range(
    options: ReaderOptions, tp: TopicPartition, start: int, end: int, earliest: int, latest: int
) -> tuple[int, int]:
    """[start, end) checked against the log's [earliest, latest]: raise, or clamp with a warning.

    With read_committed ``latest`` is the last stable offset."""
    t, p = tp
    fail = options.fail_on_data_loss
    if start < earliest:
        msg = (
            f"topic {t!r} partition {p}: offsets [{start}, {min(earliest, end)}) of the requested range "
            f"[{start}, {end}) are no longer in the log (earliest available offset {earliest}); the data "
            "was removed by retention or the topic was recreated"
        )
        if fail:
            raise DataLossError(f"{msg}; {_DATA_LOSS_HINT}")
        log.warning("%s; skipping them (failOnDataLoss=false)", msg)
        start = earliest
    if end > latest:
        if options.read_committed:
            msg = (
                f"topic {t!r} partition {p}: ending offset {end} of the requested range [{start}, {end}) is "
                f"beyond the last stable offset {latest} (kafka.isolation.level=read_committed: offsets from "
                f"{latest} on belong to or follow a transaction that is still open, or are not yet replicated, "
                "so whether they are committed is not known yet)"
            )
            if fail:
                raise DataLossError(
                    f'{msg}; wait for the transaction to end, or set the source option "failOnDataLoss" to '
                    f'"false" to read up to the last stable offset'
                )
        else:
            msg = (
                f"topic {t!r} partition {p}: ending offset {end} of the requested range [{start}, {end}) is "
                f"beyond the latest offset {latest}"
            )
            if fail:
                raise DataLossError(f"{msg}; {_DATA_LOSS_HINT}")
        log.warning("%s; reading up to %d (failOnDataLoss=false)", msg, latest)
        end = latest
    if start > end:
        msg = (
            f"topic {t!r} partition {p}: starting offset {start} is after the ending offset {end} "
            f"(log range [{earliest}, {latest}))"
        )
        if fail:
            raise DataLossError(f"{msg}; {_DATA_LOSS_HINT}")
        log.warning("%s; reading nothing from it (failOnDataLoss=false)", msg)
        start = end
    return start, end


def _fmt_tps(tps: Iterable[TopicPartition]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None
) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: drop empty ranges, cap records per range, then, only when there are
    fewer ranges than ``minPartitions``, split by size: a range whose share ``round(size / total *
    minPartitions)`` is at most 1 stays whole (Spark's "unsplit" ranges, every range of its topic-partition too),
    the others get ``max(round(size / split_total * (minPartitions - unsplit)), 1)`` parts, rounded half up as
    Scala's ``math.round`` (Python's ``round`` rounds half to even: 2.5 would give 2 parts where Spark makes 3)."""
    out = [r for r in ranges if r[3] > r[2]]
    if max_records is not None:
        capped = []
        for t, p, s, e in out:
            capped.extend(_even(t, p, s, e, -(-(e - s) // max_records)))
        out = capped
    if min_partitions is None or len(out) >= min_partitions or not out:
        return out
    total = sum(e - s for _, _, s, e in out)
    unsplit = [r for r in out if _part_count(r[3] - r[2], total, min_partitions) == 1]
    unsplit_tps = {(t, p) for t, p, _, _ in unsplit}
    split_total = total - sum(e - s for _, _, s, e in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    split = []
    for t, p, s, e in out:
        parts = 1 if (t, p) in unsplit_tps else _part_count(e - s, split_total, split_min)
        split.extend(_even(t, p, s, e, parts))
    return split


def _part_count(size: int, total: int, min_parts: int) -> int:
    """Spark's getPartCount: ``max(math.round(size / total * min_parts), 1)``, half up as Scala rounds."""
    return max(math.floor(size / total * min_parts + 0.5), 1) if total > 0 else 1


def _even(t: str, p: int, s: int, e: int, parts: int) -> list[OffsetRange]:
    """[s, e) in ``parts`` ranges whose sizes differ by at most one."""
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
