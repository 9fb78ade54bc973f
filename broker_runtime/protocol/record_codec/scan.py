"""Validation of one batch's records on the produce path: :func:`scan_records`; sans-IO.

What it checks (what Kafka's ``DefaultRecord.readFrom`` and the batch's record iterator enforce, plus what the
decoder needs to read the batch back): exactly ``recordsCount`` records filling the (decompressed) records
section, every varint at most 5 bytes (varlong 10), lengths >= -1 (record, header key >= 0) and inside their
record, offsetDelta of record i equal to i, header counts >= 0, header keys valid UTF-8, each record's fields
ending exactly at its declared length (the record format: :mod:`.format`). What it reports
(:class:`RecordsScan`): what a broker's policy checks need (max timestamp, null keys, timestamps out of range).

Errors: :class:`~broker_runtime.errors.CorruptRecordError` whose ``record_index`` names the first bad record
(None when no one record is to blame), identical on both record walks (:mod:`.walks`): the compiled walk checks
record by record, field by field; the Python walk (:func:`.pywalk.scan`) runs in chunks of
:data:`~.pywalk.SCAN_CHUNK` records and names the first bad one by walking its chunk again record by record.

Pure; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from broker_runtime.errors import CorruptRecordError
from broker_runtime.protocol.batch_header import NO_TIMESTAMP, BatchHeader
from broker_runtime.protocol.record_codec import walks
from broker_runtime.protocol.record_codec.format import MIN_RECORD_SIZE, walk_error

__all__ = ["RecordsScan", "scan_records"]


@dataclass(frozen=True, slots=True)
class RecordsScan:
    """What :func:`scan_records` found in the records of one batch that a broker's policy checks need.

    ``max_timestamp`` is the largest record timestamp (NO_TIMESTAMP -1 when every record has -1 or the batch
    is LogAppendTime). ``null_keys``: indexes of the records with a null key. ``out_of_range`` /
    ``out_of_range_timestamps``: indexes and timestamps of the records whose timestamp (not -1) lies outside
    the ``[timestamp_low, timestamp_high]`` asked for.
    """

    max_timestamp: int
    null_keys: np.ndarray
    out_of_range: np.ndarray
    out_of_range_timestamps: np.ndarray


def scan_records(
    header: BatchHeader,
    section: bytes | bytearray | memoryview,
    *,
    position: int = 0,
    timestamp_low: int | None = None,
    timestamp_high: int | None = None,
) -> RecordsScan:
    """Walk every record of one batch whose (decompressed) records section is ``section`` (``position``: where
    the batch lies, for the errors), with every check of this module's docstring; report what
    :class:`RecordsScan` holds. Timestamps are checked against ``[timestamp_low, timestamp_high]`` when either
    is given."""
    data = section
    count = header.records_count
    end = len(data)
    if count < 0 or count * MIN_RECORD_SIZE > end:
        raise CorruptRecordError(
            f"batch at position {position}: recordsCount {count} cannot fit in a records section of {end} bytes"
        )
    log_append = bool(header.timestamp_type)
    check_ts = timestamp_low is not None or timestamp_high is not None
    # bounds such as now + Long.MAX_VALUE ("no bound") are clamped to the int64 range of the timestamps
    low = -(1 << 63) if timestamp_low is None else max(timestamp_low, -(1 << 63))
    high = (1 << 63) - 1 if timestamp_high is None else min(timestamp_high, (1 << 63) - 1)
    cwalk = walks.compiled
    if cwalk is not None:
        out = np.empty(3 * count, dtype=np.int64)
        try:
            max_ts, n_null, n_bad = cwalk.scan(
                data, count, header.base_timestamp, low, high, log_append, check_ts, out
            )
        except cwalk.WalkError as exc:
            _, index, message = exc.args
            raise walk_error(position, index, message) from None
        null_keys = out[:n_null]
        bad_idx = out[count : count + n_bad]
        bad_ts = out[2 * count : 2 * count + n_bad]
    else:
        from broker_runtime.protocol.record_codec import pywalk  # pyarrow: only without the compiled walk

        max_ts, null_keys, bad_idx, bad_ts = pywalk.scan(header, data, position, low, high, check_ts)
    # Kafka reads every record of a LogAppendTime batch at the batch's maxTimestamp (the walks report no record
    # timestamps for such a batch).
    lat_ts = header.max_timestamp
    if log_append and check_ts and lat_ts != NO_TIMESTAMP and not low <= lat_ts <= high:
        bad_idx = np.arange(count, dtype=np.int64)
        bad_ts = np.full(count, lat_ts, dtype=np.int64)
    return RecordsScan(
        max_timestamp=max_ts, null_keys=null_keys, out_of_range=bad_idx, out_of_range_timestamps=bad_ts
    )
