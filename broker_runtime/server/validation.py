"""Validation of the records of one produce partition: Kafka's ``LogValidator``, vectorized per batch.

Checks run in Kafka's order (``ProduceRequest.validateRecords``, then ``UnifiedLog.analyzeAndValidateRecords``,
then ``LogValidator.validateBatch`` / ``validateRecord``, then ``UnifiedLog.append``'s size checks), first
failure wins:

  1. Produce v3+: the data holds exactly one complete record batch          -> INVALID_RECORD
  2. magic 2                                                               -> INVALID_RECORD
  3. a known codec id (attributes bits 0-2 are 0-4)                        -> INVALID_RECORD
     zstd only from Produce v7                                             -> UNSUPPORTED_COMPRESSION_TYPE
  4. baseOffset 0 (clients never assign offsets)                           -> INVALID_RECORD
  5. batch size <= max.message.bytes                                       -> MESSAGE_TOO_LARGE
  6. CRC-32C over [attributes, end) matches                                -> CORRUPT_MESSAGE
  7. recordsCount == lastOffsetDelta + 1 and > 0                           -> INVALID_RECORD
  8. not a control batch                                                   -> INVALID_RECORD
  9. a producer id comes with a sequence >= 0                              -> INVALID_RECORD
 10. the records section decompresses within the bound (below)             -> MESSAGE_TOO_LARGE
     and is a well-formed stream of its codec                              -> CORRUPT_MESSAGE
 11. every record is well formed (``scan_records``: exactly recordsCount
     records filling the section, varints, lengths, offsetDelta i for
     record i, header counts and lengths, UTF-8 header keys)               -> INVALID_RECORD, RecordErrors
                                                                              [the record to blame]
 12. per record: a key on compacted topics (cleanup.policy holds compact)  -> INVALID_RECORD
     CreateTime topics: each timestamp (but -1) within [now -
     message.timestamp.before.max.ms, now + message.timestamp.after.max.ms];
     LogAppendTime topics: the client must not set the LogAppendTime bit   -> INVALID_TIMESTAMP
     (RecordErrors lists every bad record with its message; the partition's error is INVALID_TIMESTAMP when
     any timestamp failed, else INVALID_RECORD, as Kafka's ``processRecordErrors``)
 13. the record set fits one segment (size <= segment.bytes)              -> RECORD_LIST_TOO_LARGE
     (not retriable, unlike a storage error: a client must not resend it)
 14. a transactional batch carries a producer id                          -> INVALID_RECORD
     (whether the producer's transaction is open is the partition's producer state's check)

Accepted batches may be rewritten before the append: maxTimestamp set to the largest record timestamp when
the producer's header says otherwise (Kafka rewrites it too), and with a topic ``compression.type`` other than
``producer`` whose codec differs from the batch's, the records section is recompressed with the topic's codec
(producer id, epoch, base sequence, transactional flag and base timestamp kept; offsets assigned by the log as
usual) and must then still fit ``max.message.bytes`` (MESSAGE_TOO_LARGE).

Decompression bound: a records section may expand to at most ``DECOMPRESSION_FACTOR`` (32) times the topic's
``max.message.bytes`` (32 MiB with the default), checked while decompressing, so a bomb is refused after at
most that much output. MESSAGE_TOO_LARGE makes Kafka's Java producer split the batch and retry.

Where pylog differs from Kafka: structural record errors also name the record in RecordErrors (Kafka answers
INVALID_RECORD without them); an offsetDelta other than the record's index is refused (Kafka rewrites such
batches when compressed and ignores the deltas otherwise); an unknown codec id is INVALID_RECORD (Kafka fails
the request while parsing it); header keys must be UTF-8 (pylog's readers decode them as strings).

``BatchPolicy.header_only`` (the test-only broker key ``pylog.test.validation.header.only``) skips steps 10-12
and checks the timestamps of the header only (baseTimestamp and maxTimestamp): the benchmark's baseline.

A rejection carries the Kafka error code, a message naming the partition and the value found, and the
RecordErrors (batch index, message). Pure functions: thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from broker_runtime.errors import CorruptRecordError, DecompressionLimitError, ErrorCode
from broker_runtime.protocol import compression as _compression
from broker_runtime.protocol.batch_header import (
    ATTR_LOG_APPEND_TIME,
    BATCH_HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    BatchHeader,
    compute_crc,
    set_compression,
    set_max_timestamp,
)
from broker_runtime.protocol.record_codec.scan import scan_records

__all__ = [
    "DECOMPRESSION_FACTOR",
    "BatchPolicy",
    "Rejection",
    "ValidBatch",
    "validate_produce_records",
]

_INT64_MAX = (1 << 63) - 1
#: A records section may decompress to at most this many times ``max.message.bytes``.
DECOMPRESSION_FACTOR = 32
#: Kafka's ``processRecordErrors`` shows at most this many record errors in the partition's message.
_SHOWN_ERRORS = 3


class Rejection(NamedTuple):
    """Why one partition's records were refused: the Kafka error code, a message for the client, and the
    RecordErrors (KIP-467: batch index, message) naming the records to blame."""

    code: ErrorCode
    message: str
    record_errors: tuple[tuple[int, str | None], ...] = ()


class ValidBatch(NamedTuple):
    """An accepted batch: its header and the bytes to append (the producer's, or rewritten: see above)."""

    header: BatchHeader
    records: bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """The topic settings that validation needs.

    ``timestamp_type`` is 0 for CreateTime, 1 for LogAppendTime. The ``*_max_ms`` bounds use Kafka's
    default of Long.MAX_VALUE for "no bound". ``segment_bytes`` is the topic's ``segment.bytes``.
    ``compact``: cleanup.policy holds compact (keys required). ``target_codec``: the topic's compression.type
    as a codec id, None for ``producer``; ``levels`` the codec levels by codec id (absent: the codec's
    default). ``header_only``: the benchmark's baseline (see the module docstring).
    """

    max_message_bytes: int = 1048588
    timestamp_type: int = 0
    timestamp_before_max_ms: int = _INT64_MAX
    timestamp_after_max_ms: int = _INT64_MAX
    segment_bytes: int = 1024 * 1024 * 1024
    compact: bool = False
    target_codec: int | None = None
    levels: tuple[tuple[int, int], ...] = ()
    header_only: bool = False


def validate_produce_records(
    records: bytes | bytearray | memoryview | None,
    *,
    partition_name: str,
    api_version: int,
    policy: BatchPolicy,
    now_ms: int,
) -> ValidBatch | Rejection:
    """Validate the records of one produce partition (Produce v3+); return the batch to append or a Rejection."""
    if records is None or len(records) < HEADER_SIZE:
        size = 0 if records is None else len(records)
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {api_version} must have at least one record batch per partition; "
            f"{partition_name} got {size} bytes",
        )
    magic = records[MAGIC_OFFSET]
    if magic != MAGIC:
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {api_version} are only allowed to contain record batches with "
            f"magic version 2; {partition_name} got magic {magic}",
        )
    header = BatchHeader._make(BATCH_HEADER.unpack_from(records, 0))
    size = header.batch_length + LOG_OVERHEAD
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return Rejection(
            ErrorCode.CORRUPT_MESSAGE,
            f"record batch in {partition_name} declares batchLength {header.batch_length}, less than the "
            f"{HEADER_SIZE - LOG_OVERHEAD}-byte minimum",
        )
    if size > len(records):
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {api_version} must have at least one record batch per partition; "
            f"{partition_name} got a batch of {size} bytes truncated to {len(records)}",
        )
    if size < len(records):
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {api_version} are only allowed to contain exactly one record batch "
            f"per partition; {partition_name} got {len(records) - size} bytes after the first batch",
        )
    codec = header.compression
    if codec > _compression.ZSTD:
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"Invalid attributes {header.attributes:#06x} of the record batch in {partition_name}: compression "
            f"codec id {codec} is unknown (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)",
        )
    if codec == _compression.ZSTD and api_version < 7:
        return Rejection(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {api_version} are not allowed to use ZStandard compression",
        )
    if header.base_offset != 0:
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"The baseOffset of the record batch in the append to {partition_name} should be 0, "
            f"but it is {header.base_offset}",
        )
    if size > policy.max_message_bytes:
        return Rejection(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The record batch size in the append to {partition_name} is {size} bytes which exceeds the "
            f"maximum configured value of {policy.max_message_bytes}.",
        )
    computed = compute_crc(records, 0, size)
    if computed != header.crc:
        return Rejection(
            ErrorCode.CORRUPT_MESSAGE,
            f"Record is corrupt (stored crc = {header.crc}, computed crc = {computed}) in topic partition "
            f"{partition_name}.",
        )
    count = header.records_count
    if header.last_offset_delta + 1 <= 0 or count <= 0 or count != header.last_offset_delta + 1:
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"Inconsistent batch offset range [0, {header.last_offset_delta}] and count of records {count} "
            f"in topic partition {partition_name}",
        )
    if header.is_control:
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"Clients are not allowed to write control records in topic partition {partition_name}",
        )
    if header.producer_id >= 0 and header.base_sequence < 0:
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"Invalid sequence number {header.base_sequence} in record batch with producerId "
            f"{header.producer_id} in topic partition {partition_name}",
        )
    valid: ValidBatch | Rejection
    if policy.header_only:
        rejection = _check_header_timestamps(header, partition_name, policy, now_ms)
        valid = ValidBatch(header, records) if rejection is None else rejection
    else:
        valid = _validate_records(records, header, partition_name, policy, now_ms)
    if isinstance(valid, Rejection):
        return valid
    if len(valid.records) > policy.segment_bytes:
        return Rejection(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"The record set of {len(valid.records)} bytes appended to {partition_name} is larger than the "
            f"topic's segment.bytes of {policy.segment_bytes}, so it can never be stored.",
        )
    if header.is_transactional and header.producer_id < 0:
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"transactional record batch without a producer id in {partition_name}",
        )
    return valid


def _validate_records(
    records: bytes | bytearray | memoryview,
    header: BatchHeader,
    partition_name: str,
    policy: BatchPolicy,
    now_ms: int,
) -> ValidBatch | Rejection:
    """Steps 10-12 and the rewrites of the module docstring."""
    codec = header.compression
    section = memoryview(records)[HEADER_SIZE:]
    bound = DECOMPRESSION_FACTOR * policy.max_message_bytes
    try:
        plain = _compression.decompress(codec, section, max_size=bound) if codec else section
    except DecompressionLimitError:
        return Rejection(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The records of the {_compression.codec_name(codec)} record batch in the append to {partition_name} "
            f"decompress to more than {bound} bytes ({DECOMPRESSION_FACTOR} x max.message.bytes "
            f"{policy.max_message_bytes}); refused without decompressing the rest.",
        )
    except CorruptRecordError as exc:
        return Rejection(
            ErrorCode.CORRUPT_MESSAGE,
            f"Record is corrupt: the {_compression.codec_name(codec)} records section of the batch in topic "
            f"partition {partition_name} cannot be decompressed: {exc}",
        )
    create_time = policy.timestamp_type == 0
    try:
        scan = scan_records(
            header,
            plain,
            timestamp_low=now_ms - policy.timestamp_before_max_ms if create_time else None,
            timestamp_high=now_ms + policy.timestamp_after_max_ms if create_time else None,
        )
    except CorruptRecordError as exc:
        index = exc.record_index
        errors = () if index is None else ((index, str(exc)),)
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"Found invalid record structure in topic partition {partition_name}: {exc}",
            errors,
        )
    rejection = _record_errors(
        header,
        scan.null_keys,
        scan.out_of_range,
        scan.out_of_range_timestamps,
        partition_name,
        policy,
        now_ms,
    )
    if rejection is not None:
        return rejection
    out: bytes | bytearray | memoryview = records
    target = policy.target_codec
    if target is not None and target != codec:
        levels = dict(policy.levels)
        payload = _compression.compress(target, plain, level=levels.get(target))
        rebuilt = bytearray(HEADER_SIZE + len(payload))
        rebuilt[:HEADER_SIZE] = memoryview(records)[:HEADER_SIZE]
        rebuilt[HEADER_SIZE:] = payload
        set_compression(rebuilt, 0, target, len(payload))
        out = rebuilt
        if len(out) > policy.max_message_bytes:
            return Rejection(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"Message batch size is {len(out)} bytes in append to partition {partition_name} which exceeds "
                f"the maximum configured size of {policy.max_message_bytes} after recompressing it with the "
                f"topic's compression.type {_compression.codec_name(target)}.",
            )
    if (
        create_time
        and not header.attributes & ATTR_LOG_APPEND_TIME
        and scan.max_timestamp != header.max_timestamp
    ):
        if out is records:
            out = bytearray(records)
        assert isinstance(out, bytearray)
        set_max_timestamp(out, 0, len(out), scan.max_timestamp)
    if out is records:
        return ValidBatch(header, records)
    return ValidBatch(BatchHeader._make(BATCH_HEADER.unpack_from(out, 0)), out)


def _record_errors(
    header: BatchHeader,
    null_keys: np.ndarray,
    bad_ts: np.ndarray,
    bad_ts_values: np.ndarray,
    partition_name: str,
    policy: BatchPolicy,
    now_ms: int,
) -> Rejection | None:
    """Kafka's ``validateKey`` / ``validateTimestamp`` per record and ``processRecordErrors``, over arrays."""
    errors: dict[int, str] = {}
    if policy.compact and len(null_keys):
        message = f"Compacted topic cannot accept message without key in topic partition {partition_name}"
        errors.update((int(i), message) for i in null_keys)
    timestamp_failed = False
    if policy.timestamp_type == 0 and len(bad_ts):
        low = now_ms - policy.timestamp_before_max_ms
        high = now_ms + policy.timestamp_after_max_ms
        for i, ts in zip(bad_ts.tolist(), bad_ts_values.tolist(), strict=True):
            if i not in errors:  # a key error wins, as in Kafka's validateRecord
                timestamp_failed = True
                errors[i] = (
                    f"Timestamp {ts} of message with offset {i} is out of range. The timestamp should be within "
                    f"[{low}, {high}]"
                )
    elif policy.timestamp_type == 1 and header.attributes & ATTR_LOG_APPEND_TIME:
        message = (
            "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime."
        )
        for i in range(header.records_count):
            if i not in errors:
                timestamp_failed = True
                errors[i] = message
    if not errors:
        return None
    ordered = tuple(sorted(errors.items()))
    if timestamp_failed:
        return Rejection(
            ErrorCode.INVALID_TIMESTAMP,
            f"One or more records have been rejected due to invalid timestamp in topic partition {partition_name}",
            ordered,
        )
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in ordered[:_SHOWN_ERRORS])
    return Rejection(
        ErrorCode.INVALID_RECORD,
        f"One or more records have been rejected due to {len(ordered)} record errors in total, and only showing "
        f"the first three errors at most: [{shown}]",
        ordered,
    )


def _check_header_timestamps(
    header: BatchHeader, partition_name: str, policy: BatchPolicy, now_ms: int
) -> Rejection | None:
    """The header-only baseline: baseTimestamp and maxTimestamp stand for the records' timestamps."""
    if policy.timestamp_type == 0:
        low = now_ms - policy.timestamp_before_max_ms
        high = now_ms + policy.timestamp_after_max_ms
        for ts in (header.base_timestamp, header.max_timestamp):
            if ts != NO_TIMESTAMP and (ts < low or ts > high):
                return Rejection(
                    ErrorCode.INVALID_TIMESTAMP,
                    f"Timestamp {ts} of a record batch in {partition_name} is out of range. The timestamp "
                    f"should be within [{low}, {high}]",
                )
        return None
    if header.attributes & ATTR_LOG_APPEND_TIME:
        return Rejection(
            ErrorCode.INVALID_TIMESTAMP,
            f"Invalid timestamp type in a record batch for {partition_name}. Producer should not set "
            "timestamp type to LogAppendTime.",
        )
    return None
