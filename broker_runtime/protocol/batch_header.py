"""The fixed 61-byte header of a Kafka RecordBatch, magic 2 (``DefaultRecordBatch`` in Kafka's clients).

On-disk and on-wire layout (big-endian)::

    offset  field                 type    notes
    0       baseOffset            int64   producers send 0; the broker assigns it
    8       batchLength           int32   bytes after this field (total size - 12)
    12      partitionLeaderEpoch  int32   not covered by the CRC; -1 = none
    16      magic                 int8    2
    17      crc                   uint32  CRC-32C over bytes [21, end of batch)
    21      attributes            int16   bits 0-2 codec, bit 3 LogAppendTime, bit 4 transactional,
                                          bit 5 control, bit 6 delete horizon set
    23      lastOffsetDelta       int32
    27      baseTimestamp         int64
    35      maxTimestamp          int64
    43      producerId            int64   -1 = not idempotent
    51      producerEpoch         int16
    53      baseSequence          int32
    57      recordsCount          int32
    61      records ...                   compressed as one stream when the codec is not 0

Everything here is sans-IO: functions take ``bytes``/``bytearray``/``memoryview`` and never touch files or
sockets. This module is the single source of these byte offsets for the rest of the project.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c as _crc32c

from broker_runtime.errors import CorruptRecordError, UnsupportedVersionError

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_LOG_APPEND_TIME",
    "ATTR_TRANSACTIONAL",
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BATCH_HEADER",
    "BATCH_LENGTH_OFFSET",
    "CRC_OFFSET",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "BatchHeader",
    "compute_crc",
    "iter_batch_spans",
    "parse_header",
    "set_base_offset",
    "set_compression",
    "set_log_append_time",
    "set_max_timestamp",
    "set_partition_leader_epoch",
]

# Byte offsets of the fields the broker reads or rewrites in place.
BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
RECORDS_COUNT_OFFSET = 57
HEADER_SIZE = 61
#: baseOffset + batchLength: the bytes not counted by batchLength.
LOG_OVERHEAD = 12

MAGIC = 2

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

#: The whole 61-byte header: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
#: lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
assert BATCH_HEADER.size == HEADER_SIZE

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    """The decoded fixed header of one RecordBatch (magic 2)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime (Spark's ``timestampType`` column uses the same numbers)."""
        return 1 if self.attributes & ATTR_LOG_APPEND_TIME else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the header of the batch starting at ``position``.

    Checks only what the header alone can show: enough bytes for a header, magic 2, a batchLength that
    covers at least the header. Raises :class:`CorruptRecordError` (or :class:`UnsupportedVersionError` for
    another magic) naming the position and the bad value. Does not verify the CRC (see :func:`compute_crc`).
    """
    available = len(buf) - position
    if available < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch at position {position}: {available} bytes left, a batch header needs {HEADER_SIZE}"
        )
    header = BatchHeader._make(BATCH_HEADER.unpack_from(buf, position))
    if header.magic != MAGIC:
        if header.magic in (0, 1):
            raise UnsupportedVersionError(
                f"batch at position {position}: magic {header.magic} (legacy message set) is not supported; "
                "only magic 2 record batches are"
            )
        raise CorruptRecordError(f"batch at position {position}: magic byte {header.magic}, expected 2")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch at position {position}: batchLength {header.batch_length} is smaller than the "
            f"{HEADER_SIZE - LOG_OVERHEAD} bytes of the header after it"
        )
    return header


def compute_crc(buf: bytes | bytearray | memoryview, position: int, size: int) -> int:
    """CRC-32C of the batch at ``position`` of total ``size`` bytes, over [attributes, end)."""
    mv = memoryview(buf)
    return _crc32c.crc32c(mv[position + ATTRIBUTES_OFFSET : position + size])


def iter_batch_spans(
    buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None
) -> list[tuple[int, BatchHeader]]:
    """(position, header) of each complete batch in ``buf[start:end]``, by header walk only (no CRC check).

    A trailing partial batch is ignored (a fetch may end mid-batch, as Kafka's does); a header that is
    itself invalid raises :class:`CorruptRecordError`.
    """
    stop = len(buf) if end is None else end
    spans: list[tuple[int, BatchHeader]] = []
    pos = start
    while stop - pos >= HEADER_SIZE:
        header = parse_header(buf, pos)
        if pos + header.size > stop:
            break
        spans.append((pos, header))
        pos += header.size
    return spans


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite baseOffset in place (the CRC does not cover it)."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place (the CRC does not cover it)."""
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, position: int, size: int, timestamp_ms: int) -> None:
    """Stamp a batch with LogAppendTime: set the attribute bit and maxTimestamp, then recompute the CRC.

    Record timestamps inside the batch stay as written; readers use maxTimestamp for every record of a
    LogAppendTime batch, as Kafka's do.
    """
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes | ATTR_LOG_APPEND_TIME)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _UINT32.pack_into(buf, position + CRC_OFFSET, compute_crc(buf, position, size))


def set_max_timestamp(buf: bytearray | memoryview, position: int, size: int, timestamp_ms: int) -> None:
    """Rewrite maxTimestamp (a CreateTime batch's largest record timestamp), then recompute the CRC."""
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _UINT32.pack_into(buf, position + CRC_OFFSET, compute_crc(buf, position, size))


def set_compression(buf: bytearray | memoryview, position: int, codec: int, payload_size: int) -> None:
    """Mark the batch at ``position`` as compressed with ``codec`` holding a ``payload_size``-byte records
    section after its header (attributes bits 0-2 and batchLength), then recompute the CRC."""
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, (attributes & ~ATTR_COMPRESSION_MASK) | codec)
    _INT32.pack_into(buf, position + BATCH_LENGTH_OFFSET, HEADER_SIZE - LOG_OVERHEAD + payload_size)
    _UINT32.pack_into(buf, position + CRC_OFFSET, compute_crc(buf, position, HEADER_SIZE + payload_size))
