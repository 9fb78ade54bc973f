"""Streaming read planning: the source offsets of Spark's Kafka source, rate limits and micro-batch ranges.

Runs on: driver (planning).

Where this runs: the **driver**, inside the stream reader's long-lived Python worker (one per query run; PySpark
keeps it for the query's life and calls ``initialOffset`` / ``latestOffset`` / ``partitions`` on one reader
object, one call at a time). The functions here are pure; the I/O (Metadata, ListOffsets) is done by
:mod:`spark_kafka_log.stream.stream_reader` through :mod:`spark_kafka_log.read.read_plan`.

Offset format (Spark's ``KafkaSourceOffset``, what Spark writes to ``<checkpoint>/offsets/<batchId>``):
``{"topic": {"partition": offset, ...}, ...}`` with partition numbers as strings and the NEXT offset to read per
partition (exclusive end of the batch). :func:`to_json` emits topics and partitions in sorted order, so two
equal offsets serialize to the same text (Spark compares them to decide whether there is a new batch).

Rules taken from Spark's ``KafkaMicroBatchStream`` / ``KafkaOffsetReader``:

* :func:`rate_limit` -- ``maxOffsetsPerTrigger`` spread over the partitions in proportion to how many offsets
  each has available; a partition whose share is below one record still gets one (so none starves), the others
  are rounded down; never beyond the latest offset.
* :func:`should_delay` -- ``minOffsetsPerTrigger``: no batch while fewer offsets are available, unless
  ``maxTriggerDelay`` has passed since the last batch.
* :func:`batch_ranges` -- a micro-batch reads ``[start, end)`` per partition of the end offsets; a partition
  only in the end offsets is new (discovered since the start) and is read from its earliest offset; a partition
  only in the start offsets is gone; an end below its start means the log was reset. The last three are data
  loss when the new partition does not start at 0 or the offsets went missing: with ``failOnDataLoss=true``
  :class:`~broker_runtime.errors.DataLossError` names the partition and range, with ``false`` a WARNING on the
  logger ``spark_kafka_log.stream_plan`` says what is skipped.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

from broker_runtime.errors import ConfigError, DataLossError
from broker_runtime.protocol.topic_partition import TopicPartition

__all__ = [
    "OffsetMap",
    "batch_ranges",
    "from_json",
    "rate_limit",
    "should_delay",
    "to_json",
]

log = logging.getLogger("spark_kafka_log.stream_plan")

#: (topic, partition) -> offset.
OffsetMap = dict[TopicPartition, int]
OffsetRange = tuple[str, int, int, int]

_DATA_LOSS_HINT = 'set the source option "failOnDataLoss" to "false" to skip the missing offsets instead'


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` -> ``{"t": {"p": o}}`` in sorted order (Spark's ``KafkaSourceOffset`` JSON)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def from_json(value: object) -> OffsetMap:
    """Spark's ``KafkaSourceOffset`` JSON (as a dict) -> ``{(t, p): o}``; anything else fails naming it."""
    if not isinstance(value, dict):
        raise ConfigError(
            f"pylog source offsets {value!r} are not a JSON object of topics (a checkpoint of another source?)"
        )
    out: OffsetMap = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            raise ConfigError(
                f"pylog source offsets: topic {topic!r} maps to {parts!r}, not partition -> offset"
            )
        for part, offset in parts.items():
            try:
                out[(str(topic), int(part))] = int(offset)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"pylog source offsets: {topic}-{part} -> {offset!r} is not partition -> offset"
                ) from None
    return out


def rate_limit(limit: int, start: OffsetMap, latest: OffsetMap, earliest_of_new: OffsetMap) -> OffsetMap:
    """At most about ``limit`` offsets past ``start`` (Spark's ``KafkaMicroBatchStream.rateLimit``).

    ``latest``: every partition's latest offset; a partition missing from ``start`` is new and starts at
    ``earliest_of_new``. Each partition with offsets available gets ``limit * its share of them``, rounded down
    (a share below 1 is rounded up, so small partitions are not starved: the sum may exceed ``limit`` by at most
    one per such partition); never past ``latest``."""
    sizes: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, earliest_of_new.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out: OffsetMap = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        begin = start.get(tp, earliest_of_new.get(tp, 0))
        prorate = limit * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin + share)
    return out


def available(start: OffsetMap, latest: OffsetMap, earliest_of_new: OffsetMap) -> int:
    """How many offsets lie between ``start`` and ``latest`` (new partitions from ``earliest_of_new``)."""
    return sum(max(0, end - start.get(tp, earliest_of_new.get(tp, end))) for tp, end in latest.items())


def should_delay(
    min_offsets: int, pending: int, now_ms: float, last_trigger_ms: float, max_trigger_delay_ms: int
) -> bool:
    """``minOffsetsPerTrigger``: skip this trigger while fewer than ``min_offsets`` are pending, until
    ``maxTriggerDelay`` has passed since the last batch (Spark's ``delayBatch``)."""
    if now_ms - last_trigger_ms >= max_trigger_delay_ms:
        return False
    return pending < min_offsets


def batch_ranges(
    start: OffsetMap, end: OffsetMap, earliest_of_new: OffsetMap, fail_on_data_loss: bool
) -> list[OffsetRange]:
    """The ranges ``[from, until)`` of one micro-batch (Spark's ``getOffsetRangesFromResolvedOffsets``).

    ``earliest_of_new``: the earliest offset of each partition in ``end`` but not in ``start``. Data loss (see
    the module docstring) raises or is logged per ``fail_on_data_loss``; the ranges never go backwards."""
    gone = sorted(set(start) - set(end))
    if gone:
        _data_loss(
            f"partitions {', '.join(f'{t}-{p}' for t, p in gone)} are gone (the topic was deleted or no longer "
            "matches); offsets read from them so far are kept, nothing more is read from them",
            fail_on_data_loss,
        )
    ranges: list[OffsetRange] = []
    for (t, p), until in sorted(end.items()):
        if (t, p) in start:
            frm = start[(t, p)]
        else:
            frm = earliest_of_new.get((t, p), 0)
            if frm != 0:
                _data_loss(
                    f"topic {t!r} partition {p} was added and starts from offset {frm} instead of 0: offsets "
                    f"[0, {frm}) were removed before the query saw them",
                    fail_on_data_loss,
                )
        if until < frm:
            _data_loss(
                f"topic {t!r} partition {p}: its offset went from {frm} back to {until} (the topic was "
                "recreated or its log truncated); some data may have been missed",
                fail_on_data_loss,
            )
            continue
        ranges.append((t, p, frm, until))
    return ranges


def _data_loss(message: str, fail: bool) -> None:
    if fail:
        raise DataLossError(f"{message}; {_DATA_LOSS_HINT}")
    log.warning("%s (failOnDataLoss=false)", message)
