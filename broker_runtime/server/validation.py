"""Validation of the records of one produce partition, per batch header only (never a loop per record).

Checks run in Kafka's order (``ProduceRequest.validateRecords``, then ``UnifiedLog.analyzeAndValidateRecords``,
then ``LogValidator.validateBatch`` and its timestamp check, then ``UnifiedLog.append``'s segment-size check),
first failure wins:

  1. Produce v3+: the data holds exactly one complete record batch          -> INVALID_RECORD
  2. magic 2                                                               -> INVALID_RECORD
  3. zstd only from Produce v7                                             -> UNSUPPORTED_COMPRESSION_TYPE
  4. baseOffset 0 (clients never assign offsets)                           -> INVALID_RECORD
  5. batch size <= max.message.bytes                                       -> MESSAGE_TOO_LARGE
  6. CRC-32C over [attributes, end) matches                                -> CORRUPT_MESSAGE
  7. recordsCount == lastOffsetDelta + 1 and > 0                           -> INVALID_RECORD
  8. not a control batch                                                   -> INVALID_RECORD
  9. a producer id comes with a sequence >= 0                              -> INVALID_RECORD
 10. CreateTime topics: baseTimestamp and maxTimestamp within
     [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms];
     LogAppendTime topics: the client must not set the LogAppendTime bit  -> INVALID_TIMESTAMP
 11. the record set fits one segment (size <= segment.bytes)              -> RECORD_LIST_TOO_LARGE
     (not retriable, unlike a storage error: a client must not resend it)
 12. a transactional batch carries a producer id                          -> INVALID_RECORD
     (whether the producer's transaction is open is the partition's producer state's check: a
     non-transactional batch during an open transaction is INVALID_TXN_STATE there; KIP-890's
     server-side verification of AddPartitionsToTxn is not done)

Kafka checks timestamps per record; the per-batch rule (first record's and the batch maximum) is the
documented approximation that keeps this path free of per-record work. A rejection carries the Kafka error
code and a message naming the partition and the value found. Pure functions: thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from broker_runtime.errors import ErrorCode
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
)

__all__ = [
    "BatchPolicy",
    "Rejection",
    "validate_produce_records",
]

_ZSTD = 4
_INT64_MAX = (1 << 63) - 1


class Rejection(NamedTuple):
    """Why one partition's records were refused: the Kafka error code and a message for the client."""

    code: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """The topic settings that validation needs.

    ``timestamp_type`` is 0 for CreateTime, 1 for LogAppendTime. The ``*_max_ms`` bounds use Kafka's
    default of Long.MAX_VALUE for "no bound". ``segment_bytes`` is the topic's ``segment.bytes``.
    """

    max_message_bytes: int = 1048588
    timestamp_type: int = 0
    timestamp_before_max_ms: int = _INT64_MAX
    timestamp_after_max_ms: int = _INT64_MAX
    segment_bytes: int = 1024 * 1024 * 1024


def validate_produce_records(
    records: bytes | bytearray | memoryview | None,
    *,
    partition_name: str,
    api_version: int,
    policy: BatchPolicy,
    now_ms: int,
) -> BatchHeader | Rejection:
    """Validate the records of one produce partition (Produce v3+); return the batch header or a Rejection."""
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
    if header.compression == _ZSTD and api_version < 7:
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
    rejection = _check_timestamps(header, partition_name, policy, now_ms)
    if rejection is not None:
        return rejection
    if len(records) > policy.segment_bytes:
        return Rejection(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"The record set of {len(records)} bytes appended to {partition_name} is larger than the topic's "
            f"segment.bytes of {policy.segment_bytes}, so it can never be stored.",
        )
    if header.is_transactional and header.producer_id < 0:
        return Rejection(
            ErrorCode.INVALID_RECORD,
            f"transactional record batch without a producer id in {partition_name}",
        )
    return header


def _check_timestamps(
    header: BatchHeader, partition_name: str, policy: BatchPolicy, now_ms: int
) -> Rejection | None:
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
