"""The console's read of the Spark-write provenance records (format and topic:
:mod:`broker_runtime.protocol.spark_writes`, written by the connector's driver after each committed write).

The read (:func:`writes_of`) is bounded: the newest :data:`MAX_SCAN_RECORDS` records of the topic at most, and at
most :data:`MAX_SCAN_BYTES` of them, in Fetches of :data:`FETCH_BYTES`; it keeps the newest :data:`MAX_SHOWN`
writes that touched the topic asked for (a write recorded twice is shown once). Records that do not parse are
counted, never an error. Synchronous reads on the caller's client (the console's worker thread); no threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from broker_runtime.protocol.records import read_batches
from broker_runtime.protocol.spark_writes import TOPIC, SparkWrite

__all__ = [
    "FETCH_BYTES",
    "MAX_SCAN_BYTES",
    "MAX_SCAN_RECORDS",
    "MAX_SHOWN",
    "TOPIC",
    "SparkWrites",
    "writes_of",
]

#: The console reads at most the newest MAX_SCAN_RECORDS records (the newest writes of the whole cluster), and
#: at most MAX_SCAN_BYTES of them (a record is ~300 bytes; a write to many partitions is longer).
MAX_SCAN_RECORDS = 10000
MAX_SCAN_BYTES = 8 * 1048576
FETCH_BYTES = 1048576
MAX_SHOWN = 50


@dataclass(frozen=True)
class SparkWrites:
    """The writes that touched one topic, newest first, and what the scan saw."""

    topic: str
    writes: list[SparkWrite]
    #: False when :data:`TOPIC` does not exist (nothing was ever recorded on this cluster)
    recorded: bool
    #: offsets of the provenance topic scanned, and whether older ones were left unread (the byte bound)
    scanned_from: int = 0
    scanned_to: int = 0
    truncated: bool = False
    #: records that could not be read (not JSON, a later version)
    unreadable: int = 0
    error: str | None = None
    notes: list[str] = field(default_factory=list)


def writes_of(client: KafkaClient, topic: str) -> SparkWrites:
    """The newest writes recorded for ``topic`` (see the module docstring's bounds). A missing provenance topic
    is an answer (``recorded`` False); a refused one is kept as :attr:`SparkWrites.error`."""
    md = client.metadata([TOPIC])
    found = md.topics.get(TOPIC)
    if found is None or found.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return SparkWrites(topic, [], recorded=False)
    if found.error:
        return SparkWrites(topic, [], recorded=True, error=str(KafkaError(found.error, f"topic {TOPIC}")))
    tps = [(TOPIC, p) for p in sorted(found.partitions)]
    try:
        starts = client.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP))
        ends = client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP))
    except KafkaError as exc:
        return SparkWrites(topic, [], recorded=True, error=str(exc))
    by_id: dict[str, SparkWrite] = {}
    unreadable = 0
    truncated = False
    low = high = 0
    per_partition = MAX_SCAN_BYTES // max(1, len(tps))
    for tp in tps:
        start, end = starts[tp][0], ends[tp][0]
        high = max(high, end)
        # The newest MAX_SCAN_RECORDS records, read forward within the byte bound; older ones are not scanned
        # (the page says so).
        position = max(start, end - MAX_SCAN_RECORDS)
        truncated = truncated or position > start
        low = position
        scanned = 0
        while position < end and scanned < per_partition:
            try:
                answer = client.fetch(
                    {tp: position}, max_bytes=FETCH_BYTES, partition_max_bytes=FETCH_BYTES, max_wait_ms=0
                )[tp]
            except KafkaError as exc:
                return SparkWrites(topic, [], recorded=True, error=str(exc))
            if answer.error:
                return SparkWrites(
                    topic, [], recorded=True, error=str(KafkaError(answer.error, f"fetch {TOPIC}-{tp[1]}"))
                )
            data = answer.records or b""
            scanned += len(data)
            after = position
            for batch in read_batches(data, allow_partial_tail=True):
                after = max(after, batch.next_offset)
                if batch.is_control:
                    continue
                for record in batch:
                    if record.offset < position or record.value is None:
                        continue
                    try:
                        write = SparkWrite.from_value(bytes(record.value))
                    except ValueError:
                        unreadable += 1
                        continue
                    if write.touches(topic):
                        by_id[write.write_id] = write
            if after <= position:
                break
            position = after
        truncated = truncated or position < end
    writes = sorted(by_id.values(), key=lambda w: (w.committed_ms, w.write_id), reverse=True)[:MAX_SHOWN]
    return SparkWrites(topic, writes, True, low, high, truncated, unreadable)
