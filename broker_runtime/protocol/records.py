"""RecordBatch (magic 2) reader and reference builder, record by record (``DefaultRecordBatch`` /
``DefaultRecord`` / ``MemoryRecordsBuilder`` in Kafka's clients). Sans-IO.

Batch layout: the 61-byte header of :mod:`broker_runtime.protocol.batch_header`, then ``recordsCount``
records, compressed as one stream when attribute bits 0-2 name a codec (:mod:`.compression`).

Record layout (lengths are zigzag varints, the timestamp delta a zigzag varlong; :mod:`.varint`)::

    length            varint   bytes of the record after this field
    attributes        int8     0 (unused)
    timestampDelta    varlong  timestamp - baseTimestamp
    offsetDelta       varint   offset - baseOffset
    keyLength         varint   -1 = null key
    key               bytes
    valueLength       varint   -1 = null value
    value             bytes
    headersCount      varint
    headers           [headerKeyLength varint (never null), UTF-8 key,
                       headerValueLength varint (-1 = null), value]

Invariants the reader checks (each failure raises :class:`CorruptRecordError` naming the batch position
and the field; an unknown codec raises :class:`UnsupportedVersionError`):
  * the batch lies wholly inside the buffer and batchLength covers at least the header;
  * (on request) the stored CRC-32C equals the CRC over [attributes, end);
  * every record length is >= 0 and stays inside the records section; every field stays inside its
    record; the fields consume exactly ``length`` bytes; varints are at most 5 bytes (varlong 10);
  * key/value lengths are >= -1, header key lengths >= 0, header counts >= 0, header keys valid UTF-8;
  * exactly ``recordsCount`` records and no bytes after the last one;
  * offset deltas strictly increase and stay within [0, lastOffsetDelta]; a fresh batch (the default,
    ``strict=True``) also needs recordsCount == lastOffsetDelta + 1 -- a compacted log legitimately
    breaks that, so readers of such logs pass ``strict=False``.

Builder conventions (Kafka's MemoryRecordsBuilder; kafka-python's DefaultRecordBatchBuilder agrees):
baseTimestamp = the first record's timestamp; timestampDelta relative to it; maxTimestamp = the largest
record timestamp; offsetDelta = append index; record attributes 0; lastOffsetDelta = count - 1;
partitionLeaderEpoch -1 unless given; the records section is compressed whenever a codec is chosen
(as Java does; kafka-python falls back to uncompressed when that is not smaller).

Thread-safety: :class:`RecordBatch` is immutable after construction (a view over the caller's buffer,
which must not change while the batch is in use); :class:`RecordBatchBuilder` is not thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import crc32c as _crc32c

from broker_runtime.errors import CorruptRecordError, InvalidArgumentError, InvalidTypeError, ProtocolError
from broker_runtime.protocol import compression as _compression
from broker_runtime.protocol.batch_header import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    compute_crc,
    parse_header,
)
from broker_runtime.protocol.primitives.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "assemble_batch",
    "batch_header",
    "build_control_batch",
    "encode_record",
    "read_batches",
]

#: Control record types (``ControlRecordType``): transaction markers.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

#: Control record key: int16 version (0), int16 type.
CONTROL_KEY = struct.Struct(">hh")
#: End-transaction marker value: int16 version (0), int32 coordinatorEpoch.
END_TXN_MARKER_VALUE = struct.Struct(">hi")
_UINT32 = struct.Struct(">I")

Buffer = bytes | bytearray | memoryview
Headers = list[tuple[str, bytes | None]]


class Record:
    """One record of a batch, with its absolute offset and timestamp resolved."""

    __slots__ = ("attributes", "headers", "key", "offset", "timestamp", "value")

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        attributes: int = 0,
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers
        self.attributes = attributes

    def _tuple(self) -> tuple[int, int, bytes | None, bytes | None, Headers, int]:
        return (self.offset, self.timestamp, self.key, self.value, self.headers, self.attributes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self._tuple() == other._tuple()

    __hash__ = None  # type: ignore[assignment]  # mutable value object

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={_short(self.value)}, headers={self.headers!r})"
        )


def _short(b: bytes | None) -> str:
    if b is None or len(b) <= 32:
        return repr(b)
    return f"{b[:32]!r}...({len(b)} bytes)"


# ------------------------------------------------------------------------------------------------ read


class RecordBatch:
    """A read-only view of one magic-2 batch starting at ``position`` of ``buf``.

    The constructor checks the header (:func:`parse_header`) and that the whole batch is present; it does
    not verify the CRC (:meth:`verify_crc`) nor decode records (:meth:`records`).
    """

    __slots__ = ("_buf", "header", "position")

    def __init__(self, buf: Buffer, position: int = 0) -> None:
        header = parse_header(buf, position)
        available = len(buf) - position
        if header.size > available:
            raise CorruptRecordError(
                f"batch at position {position}: batchLength {header.batch_length} needs "
                f"{header.size} bytes, only {available} are left"
            )
        self.header: BatchHeader = header
        self.position = position
        mv = memoryview(buf)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        self._buf = mv[position : position + header.size]

    # -- header fields ---------------------------------------------------------------------------

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def next_offset(self) -> int:
        return self.header.next_offset

    @property
    def last_offset_delta(self) -> int:
        return self.header.last_offset_delta

    @property
    def partition_leader_epoch(self) -> int:
        return self.header.partition_leader_epoch

    @property
    def attributes(self) -> int:
        return self.header.attributes

    @property
    def compression(self) -> int:
        return self.header.compression

    @property
    def timestamp_type(self) -> int:
        return self.header.timestamp_type

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def producer_id(self) -> int:
        return self.header.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.header.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self.header.base_sequence

    @property
    def last_sequence(self) -> int:
        return self.header.last_sequence

    @property
    def records_count(self) -> int:
        return self.header.records_count

    @property
    def base_timestamp(self) -> int:
        return self.header.base_timestamp

    @property
    def max_timestamp(self) -> int:
        return self.header.max_timestamp

    @property
    def crc(self) -> int:
        return self.header.crc

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.header.size

    def raw(self) -> memoryview:
        """The batch's bytes (a view into the original buffer)."""
        return self._buf

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(position={self.position}, base_offset={h.base_offset}, "
            f"last_offset_delta={h.last_offset_delta}, records_count={h.records_count}, "
            f"compression={h.compression}, attributes={h.attributes:#x}, size={h.size})"
        )

    # -- checks ----------------------------------------------------------------------------------

    def compute_crc(self) -> int:
        return compute_crc(self._buf, 0, self.header.size)

    def is_crc_valid(self) -> bool:
        return self.compute_crc() == self.header.crc

    def verify_crc(self) -> None:
        """Raise :class:`CorruptRecordError` when the stored CRC-32C does not match the bytes."""
        computed = self.compute_crc()
        if computed != self.header.crc:
            raise CorruptRecordError(
                f"batch at position {self.position} (base offset {self.header.base_offset}): stored "
                f"CRC-32C {self.header.crc:#010x} does not match computed {computed:#010x}"
            )

    # -- records ---------------------------------------------------------------------------------

    def records_bytes(self) -> bytes:
        """The uncompressed records section (decompressing when the batch has a codec)."""
        section = self._buf[HEADER_SIZE:]
        codec = self.header.attributes & ATTR_COMPRESSION_MASK
        if codec == _compression.NONE:
            return bytes(section)
        try:
            return _compression.decompress(codec, section)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"batch at position {self.position}: records section of {len(section)} bytes does not "
                f"decompress: {exc}"
            ) from None
        except ProtocolError as exc:  # UnsupportedVersionError (unknown codec id)
            raise type(exc)(f"batch at position {self.position}: {exc}") from None

    def records(self, *, strict: bool = True) -> list[Record]:
        """Decode every record (decompressing if needed), validating the structure.

        ``strict`` (the default) requires a fresh batch: recordsCount == lastOffsetDelta + 1. With
        ``strict=False`` compacted batches (fewer records than the offset range, even none) are accepted.
        Under LogAppendTime every record's timestamp is the batch's maxTimestamp.
        """
        h = self.header
        where = f"batch at position {self.position}"
        count = h.records_count
        if count < 0:
            raise CorruptRecordError(f"{where}: recordsCount {count} is negative")
        if h.last_offset_delta < 0:
            raise CorruptRecordError(f"{where}: lastOffsetDelta {h.last_offset_delta} is negative")
        if strict and count != h.last_offset_delta + 1:
            raise CorruptRecordError(
                f"{where}: recordsCount {count} != lastOffsetDelta {h.last_offset_delta} + 1"
            )
        if count > h.last_offset_delta + 1:
            raise CorruptRecordError(
                f"{where}: recordsCount {count} exceeds the offset range lastOffsetDelta "
                f"{h.last_offset_delta} + 1"
            )
        data = self.records_bytes()
        # Each record takes at least 7 bytes (length, attributes, ts, offset, key, value, headers).
        if count > len(data) // 7 + 1 and count > 0:
            raise CorruptRecordError(
                f"{where}: recordsCount {count} cannot fit in a records section of {len(data)} bytes"
            )
        log_append = bool(h.attributes & ATTR_LOG_APPEND_TIME)
        try:
            return _decode_records(
                data,
                count,
                h.base_offset,
                h.base_timestamp,
                h.max_timestamp if log_append else None,
                h.last_offset_delta,
                where,
            )
        except IndexError:  # defensive: any read past the end is corruption
            raise CorruptRecordError(f"{where}: a record runs past the end of the records section") from None

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def control_record(self) -> tuple[int, int]:
        """(type, coordinatorEpoch) of a control batch's transaction marker (0 ABORT, 1 COMMIT)."""
        where = f"batch at position {self.position}"
        if not self.is_control:
            raise CorruptRecordError(f"{where}: attributes {self.header.attributes:#x} lack the control bit")
        records = self.records()
        if len(records) != 1:
            raise CorruptRecordError(f"{where}: a control batch holds {len(records)} records, expected 1")
        rec = records[0]
        if rec.key is None or len(rec.key) < CONTROL_KEY.size:
            raise CorruptRecordError(f"{where}: control record key {rec.key!r} is shorter than 4 bytes")
        version, control_type = CONTROL_KEY.unpack_from(rec.key)
        if version < 0:
            raise CorruptRecordError(f"{where}: control record key version {version} is negative")
        if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
            raise CorruptRecordError(
                f"{where}: control record type {control_type} is not a transaction marker (0 or 1)"
            )
        if rec.value is None or len(rec.value) < END_TXN_MARKER_VALUE.size:
            raise CorruptRecordError(
                f"{where}: transaction marker value {rec.value!r} is shorter than 6 bytes"
            )
        value_version, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(rec.value)
        if value_version < 0:
            raise CorruptRecordError(f"{where}: transaction marker version {value_version} is negative")
        return control_type, coordinator_epoch


def _decode_records(
    data: Buffer,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    last_offset_delta: int,
    where: str,
) -> list[Record]:
    end = len(data)
    pos = 0
    out: list[Record] = []
    prev_delta = -1
    for index in range(count):
        if pos >= end:
            raise CorruptRecordError(f"{where}: records section ends after {index} of {count} records")
        rec_pos = pos
        b = data[pos] if pos < end else 0x80
        if b < 0x80:  # one-byte fast path
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            length, pos = decode_varint(data, pos)
        rec_end = pos + length
        if length < 6 or rec_end > end:
            raise CorruptRecordError(
                f"{where}: record {index} at records-section position {rec_pos} has length {length}, "
                f"{end - pos} bytes are left"
            )
        attributes = data[pos]
        pos += 1
        b = data[pos] if pos < end else 0x80
        if b < 0x80:  # one-byte fast path
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            ts_delta, pos = decode_varlong(data, pos)
        b = data[pos] if pos < end else 0x80
        if b < 0x80:  # one-byte fast path
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            offset_delta, pos = decode_varint(data, pos)
        if offset_delta <= prev_delta or offset_delta > last_offset_delta:
            raise CorruptRecordError(
                f"{where}: record {index} has offsetDelta {offset_delta}; expected a value above "
                f"{prev_delta} and at most lastOffsetDelta {last_offset_delta}"
            )
        prev_delta = offset_delta
        key, pos = _nullable_bytes(data, pos, end, rec_end, where, index, None, "key")
        value, pos = _nullable_bytes(data, pos, end, rec_end, where, index, None, "value")
        b = data[pos] if pos < end else 0x80
        if b < 0x80:  # one-byte fast path
            nheaders, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            nheaders, pos = decode_varint(data, pos)
        if nheaders < 0 or nheaders > rec_end - pos:
            raise CorruptRecordError(
                f"{where}: record {index} has header count {nheaders} with {rec_end - pos} bytes left"
            )
        headers: Headers = []
        for hi in range(nheaders):
            hklen, pos = decode_varint(data, pos)
            if hklen < 0 or pos + hklen > rec_end:
                raise CorruptRecordError(
                    f"{where}: record {index} header {hi} has key length {hklen} "
                    f"with {rec_end - pos} bytes left in the record"
                )
            try:
                hkey = str(data[pos : pos + hklen], "utf-8")
            except UnicodeDecodeError as exc:
                raise CorruptRecordError(
                    f"{where}: record {index} header {hi} key is not UTF-8: {exc}"
                ) from None
            pos += hklen
            hval, pos = _nullable_bytes(data, pos, end, rec_end, where, index, hi, "value")
            headers.append((hkey, hval))
        if pos != rec_end:
            raise CorruptRecordError(
                f"{where}: record {index} declares length {length} but its fields take {pos - (rec_end - length)} bytes"
            )
        timestamp = log_append_time if log_append_time is not None else base_timestamp + ts_delta
        out.append(Record(base_offset + offset_delta, timestamp, key, value, headers, attributes))
    if pos != end:
        raise CorruptRecordError(
            f"{where}: {end - pos} bytes are left after the {count} records the batch declares"
        )
    return out


def _nullable_bytes(
    data: Buffer, pos: int, end: int, rec_end: int, where: str, index: int, header: int | None, noun: str
) -> tuple[bytes | None, int]:
    """A varint length (-1 = null) and that many bytes at ``pos``, inside the record ending at ``rec_end``:
    (the bytes, the position after them). Errors name record ``index`` (and ``header``) and the ``noun``."""
    b = data[pos] if pos < end else 0x80
    if b < 0x80:  # one-byte fast path
        length, pos = (b >> 1) ^ -(b & 1), pos + 1
    else:
        length, pos = decode_varint(data, pos)
    if length < 0:
        if length != -1:
            raise CorruptRecordError(f"{where}: {_whose(index, header)} has {noun} length {length}")
        return None, pos
    if pos + length > rec_end:
        raise CorruptRecordError(
            f"{where}: {_whose(index, header)} {noun} of {length} bytes runs past the record's end"
        )
    return bytes(data[pos : pos + length]), pos + length


def _whose(index: int, header: int | None) -> str:
    return f"record {index}" if header is None else f"record {index} header {header}"


def read_batches(
    buf: Buffer, verify_crc: bool = True, *, allow_partial_tail: bool = False, start: int = 0
) -> Iterator[RecordBatch]:
    """The batches of a concatenation of batches (a segment slice, a Produce or Fetch records field).

    A trailing partial batch (fewer bytes than its header or its batchLength needs) raises
    :class:`CorruptRecordError` unless ``allow_partial_tail`` (Fetch responses may end mid-batch); then
    iteration simply stops there. ``verify_crc`` checks each batch's CRC before yielding it.
    """
    end = len(buf)
    pos = start
    while pos < end:
        remaining = end - pos
        if remaining < HEADER_SIZE:
            if allow_partial_tail:
                return
            raise CorruptRecordError(
                f"batch at position {pos}: {remaining} trailing bytes, a batch header needs {HEADER_SIZE}"
            )
        if allow_partial_tail:
            header = parse_header(buf, pos)
            if header.size > remaining:
                return
        batch = RecordBatch(buf, pos)
        if verify_crc:
            batch.verify_crc()
        yield batch
        pos += batch.size


# ----------------------------------------------------------------------------------------------- build


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[tuple[str, bytes | bytearray | memoryview | None]] = (),
) -> bytes:
    """One record's bytes, its length prefix included (attributes 0)."""
    parts = [b"\x00", encode_varlong(timestamp_delta), encode_varint(offset_delta)]
    if key is None:
        parts.append(b"\x01")  # varint -1
    else:
        parts.append(encode_varint(len(key)))
        parts.append(bytes(key))
    if value is None:
        parts.append(b"\x01")
    else:
        parts.append(encode_varint(len(value)))
        parts.append(bytes(value))
    parts.append(encode_varint(len(headers)))
    for hkey, hval in headers:
        if not isinstance(hkey, str):
            raise InvalidTypeError(f"header key must be str, not {type(hkey).__name__}")
        hk = hkey.encode("utf-8")
        parts.append(encode_varint(len(hk)))
        parts.append(hk)
        if hval is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(hval)))
            parts.append(bytes(hval))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


class RecordBatchBuilder:
    """Builds one magic-2 batch record by record (the reference the vectorized builder is checked against)."""

    __slots__ = (
        "_base_timestamp",
        "_count",
        "_max_timestamp",
        "_parts",
        "_size",
        "base_offset",
        "base_sequence",
        "compression",
        "compression_level",
        "is_transactional",
        "log_append_time",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "timestamp_type",
    )

    def __init__(
        self,
        compression: int = 0,
        *,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
        timestamp_type: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        log_append_time: int | None = None,
        compression_level: int | None = None,
    ) -> None:
        _compression.codec_name(compression)  # UnsupportedVersionError for an unknown codec id
        if timestamp_type not in (0, 1):
            raise InvalidArgumentError(
                f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}"
            )
        if is_transactional and producer_id == NO_PRODUCER_ID:
            raise InvalidArgumentError("a transactional batch needs a producer id")
        self.compression = compression
        self.compression_level = compression_level
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.timestamp_type = timestamp_type
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.log_append_time = log_append_time
        self._parts: list[bytes] = []
        self._count = 0
        self._size = 0
        self._base_timestamp: int | None = None
        self._max_timestamp = -1

    def __len__(self) -> int:
        return self._count

    @property
    def uncompressed_size(self) -> int:
        """Bytes of the batch so far without compression (header included)."""
        return HEADER_SIZE + self._size

    def append(
        self,
        timestamp: int,
        key: bytes | bytearray | memoryview | None,
        value: bytes | bytearray | memoryview | None,
        headers: Sequence[tuple[str, bytes | bytearray | memoryview | None]] = (),
    ) -> int:
        """Add a record; returns its offset delta."""
        if not isinstance(timestamp, int) or not INT64_MIN <= timestamp <= INT64_MAX:
            raise InvalidArgumentError(f"timestamp {timestamp!r} is not an int64")
        if self._count >= INT32_MAX:
            raise InvalidArgumentError(f"a batch holds at most {INT32_MAX} records")
        if self._base_timestamp is None:
            self._base_timestamp = timestamp
            self._max_timestamp = timestamp
        delta = timestamp - self._base_timestamp
        if not INT64_MIN <= delta <= INT64_MAX:
            raise InvalidArgumentError(
                f"timestamp {timestamp} is too far from the base timestamp {self._base_timestamp}"
            )
        offset_delta = self._count
        rec = encode_record(offset_delta, delta, key, value, headers)
        self._parts.append(rec)
        self._size += len(rec)
        self._count += 1
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        return offset_delta

    def build(self) -> bytes:
        """The finished batch: header, (compressed) records, CRC-32C."""
        if self._count == 0:
            raise InvalidArgumentError("cannot build a record batch without records")
        records = b"".join(self._parts)
        if self.compression != _compression.NONE:
            records = _compression.compress(self.compression, records, level=self.compression_level)
        attributes = self.compression
        if self.timestamp_type == 1:
            attributes |= ATTR_LOG_APPEND_TIME
        if self.is_transactional:
            attributes |= ATTR_TRANSACTIONAL
        max_ts = self._max_timestamp
        if self.timestamp_type == 1 and self.log_append_time is not None:
            max_ts = self.log_append_time
        assert self._base_timestamp is not None
        return _assemble(
            records,
            base_offset=self.base_offset,
            partition_leader_epoch=self.partition_leader_epoch,
            attributes=attributes,
            last_offset_delta=self._count - 1,
            base_timestamp=self._base_timestamp,
            max_timestamp=max_ts,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            records_count=self._count,
        )


def _assemble(records: bytes | memoryview, **fields: int) -> bytes:
    """:func:`_header` (every header field by keyword) followed by ``records``."""
    return b"".join((_header(records, **fields), records))


def _header(
    records: bytes | memoryview,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytearray:
    size = HEADER_SIZE + len(records)
    if size - LOG_OVERHEAD > INT32_MAX:
        raise InvalidArgumentError(f"a batch of {size} bytes exceeds the int32 batchLength")
    for name, value, lo, hi in (
        ("partition_leader_epoch", partition_leader_epoch, INT32_MIN, INT32_MAX),
        ("producer_epoch", producer_epoch, -(1 << 15), (1 << 15) - 1),
        ("base_sequence", base_sequence, INT32_MIN, INT32_MAX),
        ("producer_id", producer_id, INT64_MIN, INT64_MAX),
        ("base_offset", base_offset, INT64_MIN, INT64_MAX),
    ):
        if not lo <= value <= hi:
            raise InvalidArgumentError(f"{name} {value} is outside [{lo}, {hi}]")
    header = bytearray(
        BATCH_HEADER.pack(
            base_offset,
            size - LOG_OVERHEAD,
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
    )
    # CRC-32C over [attributes, end): the header's tail, then the records
    crc = _crc32c.crc32c(records, _crc32c.crc32c(memoryview(header)[CRC_OFFSET + 4 :]))
    _UINT32.pack_into(header, CRC_OFFSET, crc)
    return header


#: A batch from an already encoded (and, if the attributes name a codec, compressed) records section and every
#: header field given explicitly; the CRC is computed. The log cleaner rewrites batches with it, the vectorized
#: builder (record_codec.encode) assembles its batches with it.
assemble_batch = _assemble
#: The same batch's header alone (HEADER_SIZE bytes, CRC included), for a caller that keeps the records where
#: they are and writes the header in front of them (no copy of the records).
batch_header = _header


def build_control_batch(
    control_type: int,
    coordinator_epoch: int,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch: transactional|control, uncompressed, one record (key: version 0 and
    ``control_type`` 0 ABORT / 1 COMMIT; value: version 0 and ``coordinator_epoch``)."""
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise InvalidArgumentError(f"control_type must be 0 (ABORT) or 1 (COMMIT), not {control_type}")
    key = CONTROL_KEY.pack(0, control_type)
    value = END_TXN_MARKER_VALUE.pack(0, coordinator_epoch)
    return _assemble(
        encode_record(0, 0, key, value),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
        last_offset_delta=0,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        records_count=1,
    )
