"""The record format inside a magic-2 RecordBatch, the decoded Arrow schema and the varint math every part of
the codec shares; sans-IO.

Format. The batch header layout comes from :mod:`broker_runtime.protocol.batch_header`; each record inside the
(possibly compressed) records section is, in order::

    length          varint   bytes of the record after this field
    attributes      int8     0 (not interpreted on read; Kafka ignores it too)
    timestampDelta  varlong  timestamp - baseTimestamp of the batch
    offsetDelta     varint   offset - baseOffset of the batch
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value
    value           bytes
    headersCount    varint
    headers         headersCount x [keyLength varint, key UTF-8 (never null),
                                    valueLength varint (-1 = null), value]

varint/varlong = zigzag, then unsigned LEB128 (:mod:`broker_runtime.protocol.primitives.varint`): at most 5 bytes, the
value wrapped to 32 bits as Java's int arithmetic (varlong: 10 bytes). The smallest record takes 7 bytes
(:data:`MIN_RECORD_SIZE`), so a records count above ``section bytes / 7`` is corrupt before any record is read.

Decoded schema (:data:`DECODED_SCHEMA`): offset int64, timestamp int64 (ms; for LogAppendTime batches the
batch's maxTimestamp, as Kafka's readers report), timestampType int32 (0 CreateTime, 1 LogAppendTime), key
binary (nullable), value binary (nullable), headers list<struct<key: string NOT NULL, value: binary>> (an empty
list when a record has none; header keys are non-null because Kafka's format has no null header key). offset,
timestamp, timestampType and headers are non-nullable.

Errors. Both record walks (:mod:`.walks`) word what they find as ``batch at position P, record I: what``
(:func:`walk_error`); the error's ``record_index`` is I, or None when no one record is to blame.

Constants and pure functions over immutable inputs; thread-safe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from broker_runtime.errors import CorruptRecordError

if TYPE_CHECKING:
    import pyarrow as pa

    #: One record header: key (UTF-8, never null in Kafka's format) and value (nullable bytes).
    HEADER_STRUCT_TYPE: pa.StructType
    #: The headers column: one list per record, empty when the record has none.
    HEADERS_TYPE: pa.ListType
    #: Schema of :func:`~broker_runtime.protocol.record_codec.decode.decode_batches`' result.
    DECODED_SCHEMA: pa.Schema

__all__ = [
    "DECODED_SCHEMA",
    "HEADERS_TYPE",
    "HEADER_STRUCT_TYPE",
    "INT32_MAX",
    "MAX_VARINT_BYTES",
    "MAX_VARLONG_BYTES",
    "MIN_RECORD_SIZE",
    "pieces",
    "unzigzag",
    "uvarint_sizes",
    "walk_error",
    "zigzag",
]

INT32_MAX = (1 << 31) - 1
#: The smallest possible record: length, attributes, timestampDelta, offsetDelta, keyLength,
#: valueLength, headersCount, one byte each.
MIN_RECORD_SIZE = 7
MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

_THRESHOLDS = [np.uint64(1) << np.uint64(7 * k) for k in range(1, 10)]


def zigzag(v: np.ndarray) -> np.ndarray:
    """int64 -> zigzag-mapped uint64 ((v << 1) ^ (v >> 63)); for int32 values identical to the 32-bit map."""
    v = v.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def unzigzag(u: np.ndarray) -> np.ndarray:
    """zigzag-mapped uint64 -> int64 (the inverse of :func:`zigzag`)."""
    return (u >> np.uint64(1)).view(np.int64) ^ -(u & np.uint64(1)).view(np.int64)


def uvarint_sizes(u: np.ndarray) -> np.ndarray:
    """Bytes of the LEB128 encoding of each uint64 (1..10)."""
    size = np.ones(len(u), dtype=np.int64)
    if len(u) == 0:
        return size
    top = u.max()
    for threshold in _THRESHOLDS:
        if top < threshold:
            break
        size += u >= threshold
    return size


def walk_error(position: int, index: int | None, message: str) -> CorruptRecordError:
    """The CorruptRecordError of a record walk's finding (both walks word them alike)."""
    where = (
        f"batch at position {position}" if index is None else f"batch at position {position}, record {index}"
    )
    exc = CorruptRecordError(f"{where}: {message}")
    exc.record_index = index
    return exc


def __getattr__(name: str) -> Any:
    """The Arrow types above, made (and pyarrow imported) at their first use: the broker's produce path uses
    this module's varint math and :func:`walk_error` only, and a broker that never decodes records into Arrow
    does not pay pyarrow's import (about 0.1 s and 30 MB)."""
    if name not in ("HEADER_STRUCT_TYPE", "HEADERS_TYPE", "DECODED_SCHEMA"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import pyarrow as pa

    header = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
    headers = pa.list_(header)
    schema = pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.int64(), nullable=False),
            pa.field("timestampType", pa.int32(), nullable=False),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("headers", headers, nullable=False),
        ]
    )
    globals().update(HEADER_STRUCT_TYPE=header, HEADERS_TYPE=headers, DECODED_SCHEMA=schema)
    return globals()[name]


def pieces(arena_buf: pa.Buffer, bounds: np.ndarray) -> pa.Array:
    """A binary array over the arena whose element k is arena[bounds[k]:bounds[k+1]] (zero copy).

    The walks place every bound inside the arena; one outside it (a walk that missed a check) raises
    CorruptRecordError here rather than pyarrow's ArrowInvalid, so a damaged batch never escapes as a traceback."""
    if len(bounds) and (bounds[0] < 0 or bounds[-1] > len(arena_buf)):
        raise CorruptRecordError(
            f"a record field [{int(bounds[0])}, {int(bounds[-1])}) lies outside the {len(arena_buf)} bytes of "
            "the records"
        )
    import pyarrow as pa

    if len(arena_buf) <= INT32_MAX:
        return pa.Array.from_buffers(
            pa.binary(), len(bounds) - 1, [None, pa.py_buffer(bounds.astype(np.int32)), arena_buf]
        )
    return pa.Array.from_buffers(pa.large_binary(), len(bounds) - 1, [None, pa.py_buffer(bounds), arena_buf])
