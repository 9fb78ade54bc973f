"""Vectorized RecordBatch (magic 2) builder and decoder over Apache Arrow arrays; sans-IO.

This is the hot path of the Spark connector: the writer turns pyarrow columns into Kafka record batches
(:func:`build_batches`), the reader turns fetched or on-disk batches back into one pyarrow RecordBatch
(:func:`decode_batches`). The batch header layout comes from :mod:`broker_runtime.protocol.batch_header`;
each record inside the (possibly compressed) records section is, in order::

    length          varint   bytes of the record after this field
    attributes      int8     0
    timestampDelta  varlong  timestamp - baseTimestamp of the batch
    offsetDelta     varint   offset - baseOffset of the batch
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value
    value           bytes
    headersCount    varint
    headers         headersCount x [keyLength varint, key UTF-8 (never null),
                                    valueLength varint (-1 = null), value]

(varint/varlong = zigzag, then unsigned LEB128; see :mod:`broker_runtime.protocol.varint`.)

Builder conventions (those of Kafka's Java ``MemoryRecordsBuilder``): baseOffset 0, partitionLeaderEpoch -1,
baseTimestamp = the FIRST record's timestamp, timestampDelta relative to it (may be negative),
maxTimestamp = the largest timestamp, offsetDelta = index within the batch, record attributes 0,
lastOffsetDelta = count - 1, CRC-32C over [attributes, end). ``max_batch_bytes`` bounds the UNCOMPRESSED
size of each batch (header included) like the producer's ``batch.size``: a record joins the current batch
while 61 + the records' sizes stays within the bound; a record that does not fit even alone gets a batch of
its own. The requested codec is always used (Java does not fall back to "none" when compression does not
pay off).

How the builder avoids a Python loop per record: the compiled encoder (``_recordwalk.split`` and
``_recordwalk.encode``, the same C extension and the same switch as the record walk below) sizes and splits
the rows in one pass and writes every record in a second pass straight from the Arrow offsets and data
buffers into one bytes object. The numpy encoder (the fallback, byte-identical): every varint field is computed with numpy (zigzag, then
LEB128 into an (n, width) uint8 matrix plus a byte-count vector, compacted with a boolean mask into one
buffer + offsets, i.e. an Arrow binary array made with ``pa.Array.from_buffers``); Arrow's C++
``binary_join_element_wise`` then concatenates [varint prefix, key, valueLength, value, headersCount,
header blob] per record. Headers are joined per header and then per record with ``binary_join``. The
joined array's data buffer, sliced by its offsets, IS the records section of each batch (zero copy).
Only batches are iterated in Python (header, compression, CRC).

How the decoder avoids per-record Python work: record boundaries form a sequential chain (each record
starts with its length), so the records are walked by the compiled record walk (the C extension
``_recordwalk``, built at install; its header comment states its contract), one pass that checks every field
and fills numpy arrays of positions, lengths and deltas; the key and value columns are then copied out by the
extension's ``gather`` (one memcpy per record into a fresh buffer), header columns (and, on the numpy walk,
keys and values) are gathered by Arrow's ``filter`` from one "pieces" binary array laid over the records bytes
(zero-copy offsets [keyStart, keyEnd, valueStart, valueEnd, ...], which are monotone within the records).

Without the extension (no C compiler at install, or ``PYLOG_RECORD_WALK=numpy``; :func:`record_walk` says
which runs) the numpy walk gives the same results: a minimal Python walk reads only the length varint of each
record (about 80 ns a record) or :func:`_record_chain` finds the starts by verified speculation, and every
field is decoded with numpy at the known positions. Its checks run field by field over many records, so when
they find a bad record, :func:`_scan_reference` walks that stretch record by record to name the first bad one
with the compiled walk's message (the errors of ``scan_records`` are identical on both walks; the decoder's
may be worded differently, both raise).

:func:`record_layout` is the first half of the decoder on its own: where every record, key and value lies,
as numpy arrays over the (decompressed) records bytes. The log cleaner filters records with it and copies the
kept records' bytes without decoding them further.

Decoded schema (:data:`DECODED_SCHEMA`): offset int64, timestamp int64 (ms; for LogAppendTime batches the
batch's maxTimestamp, as Kafka's readers report), timestampType int32 (0 CreateTime, 1 LogAppendTime),
key binary (nullable), value binary (nullable), headers list<struct<key: string NOT NULL, value: binary>>
(an empty list when a record has none; header keys are non-null because Kafka's format has no null
header key). offset, timestamp, timestampType and headers are non-nullable.

Corrupt input (bad CRC, impossible lengths, overlong varints, a records count that does not match the
records section, invalid UTF-8 in a header key) raises :class:`~broker_runtime.errors.CorruptRecordError`
naming the batch position; never garbage.

Pure functions over immutable inputs; thread-safe.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c as _crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_runtime.errors import CorruptRecordError, InvalidArgumentError, InvalidTypeError, PylogError
from broker_runtime.protocol import compression as _compression
from broker_runtime.protocol.batch_header import (
    ATTR_COMPRESSION_MASK,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    compute_crc,
    parse_header,
)

__all__ = [
    "DECODED_SCHEMA",
    "HEADERS_TYPE",
    "HEADER_STRUCT_TYPE",
    "BuiltBatch",
    "build_batch",
    "RecordLayout",
    "build_batches",
    "decode_batches",
    "RecordsScan",
    "SCAN_CHUNK",
    "scan_records",
    "record_layout",
    "numpy_walk",
    "record_walk",
]

#: One record header: key (UTF-8, never null in Kafka's format) and value (nullable bytes).
HEADER_STRUCT_TYPE = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
#: The headers column: one list per record, empty when the record has none.
HEADERS_TYPE = pa.list_(HEADER_STRUCT_TYPE)

#: Schema of :func:`decode_batches`' result.
DECODED_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("timestampType", pa.int32(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE, nullable=False),
    ]
)

_PARTITION_LEADER_EPOCH_NONE = -1
_INT32_MAX = (1 << 31) - 1
#: The smallest possible record: length, attributes, timestampDelta, offsetDelta, keyLength,
#: valueLength, headersCount, one byte each.
_MIN_RECORD_SIZE = 7
_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10
_EMPTY = pa.scalar(b"", pa.large_binary())
_LIST_TYPES = (pa.types.is_list, pa.types.is_large_list)

#: Setting this environment variable to ``numpy`` (read once, at import) forces the numpy walk even when the
#: compiled one is installed, for a whole process (a broker, a test run); within a process the tests and the
#: benchmark switch with :func:`numpy_walk` or by setting ``_cwalk``.
RECORD_WALK_ENV = "PYLOG_RECORD_WALK"


def _load_compiled_walk() -> tuple[Any, str]:
    if os.environ.get(RECORD_WALK_ENV, "").strip().lower() == "numpy":
        return None, f"{RECORD_WALK_ENV}=numpy"
    try:
        return importlib.import_module("broker_runtime.protocol._recordwalk"), ""
    except ImportError as exc:
        return None, f"broker_runtime.protocol._recordwalk cannot be imported ({exc})"


#: The compiled record walk (the C extension ``_recordwalk``), or None: then the numpy walk runs. Tests switch
#: paths by setting this attribute.
_cwalk: Any
_cwalk, _CWALK_MISSING = _load_compiled_walk()


def record_walk() -> tuple[str, str]:
    """Which record walk runs: ("compiled", "") or ("numpy", why the compiled one does not)."""
    return ("compiled", "") if _cwalk is not None else ("numpy", _CWALK_MISSING or "switched off")


@contextlib.contextmanager
def numpy_walk() -> Iterator[None]:
    """Run the numpy record walk inside the block (the benchmark's comparison). A switch of this module: not
    for use while other threads decode."""
    global _cwalk
    saved, _cwalk = _cwalk, None
    try:
        yield
    finally:
        _cwalk = saved


@dataclass(frozen=True, slots=True)
class BuiltBatch:
    """One encoded RecordBatch: ``data`` (header + possibly compressed records), ready to produce.

    ``first_row`` indexes the builder's input arrays; the batch holds rows
    ``[first_row, first_row + record_count)``. ``uncompressed_size`` = 61 + the records' bytes before
    compression (what ``max_batch_bytes`` bounds). ``group``: the index of the row group the batch belongs
    to (``group_starts`` of :func:`build_batches`; 0 without groups).
    """

    data: bytes
    record_count: int
    first_row: int
    base_sequence: int
    uncompressed_size: int
    group: int = 0


# ------------------------------------------------------------------------------------------ varint math


_THRESHOLDS = [np.uint64(1) << np.uint64(7 * k) for k in range(1, 10)]


def _zigzag(v: np.ndarray) -> np.ndarray:
    """int64 -> zigzag-mapped uint64 ((v << 1) ^ (v >> 63)); for int32 values identical to the 32-bit map."""
    v = v.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _unzigzag(u: np.ndarray) -> np.ndarray:
    return (u >> np.uint64(1)).view(np.int64) ^ -(u & np.uint64(1)).view(np.int64)


def _uvarint_sizes(u: np.ndarray) -> np.ndarray:
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


class _Varints:
    """A column of zigzagged varint values and their encoded sizes (a builder field)."""

    __slots__ = ("sizes", "u")

    def __init__(self, values: np.ndarray) -> None:
        self.u = _zigzag(values)
        self.sizes = _uvarint_sizes(self.u)


def _varint_blob(fields: Sequence[_Varints], n: int, *, allow_scalar: bool = True) -> pa.Array | pa.Scalar:
    """One large_binary array whose element i is the concatenated LEB128 encodings of ``fields[*][i]``.

    Filled column by column into an (n, total width) uint8 matrix, then compacted with a boolean mask
    when some field has fewer bytes than its widest value. When every field holds one value in all rows
    (e.g. equal-length values, no headers) the result is a scalar, which the join broadcasts.
    """
    if allow_scalar and n and all(f.u[0] == f.u.min() == f.u.max() for f in fields):
        one = _varint_blob([_Varints(_unzigzag(f.u[:1])) for f in fields], 1, allow_scalar=False)
        return pa.scalar(one[0].as_py(), pa.large_binary())
    widths = [int(f.sizes.max()) if n else 1 for f in fields]
    matrix = np.empty((n, sum(widths)), dtype=np.uint8)
    mask: np.ndarray | None = None
    total = np.zeros(n, dtype=np.int64)
    col = 0
    for field, width in zip(fields, widths, strict=True):
        u = field.u.astype(np.uint32) if width <= 4 else field.u
        variable = width > 1 and int(field.sizes.min()) != width
        for k in range(width):
            group = (u >> (7 * k)) if k else u
            if k < width - 1:
                more = field.sizes > k + 1
                matrix[:, col] = (group & 0x7F).astype(np.uint8) | (more.view(np.uint8) << 7)
            else:
                matrix[:, col] = group  # the top group is < 0x80
            if variable and k > 0:
                if mask is None:
                    mask = np.ones(matrix.shape, dtype=bool)
                mask[:, col] = field.sizes > k
            col += 1
        total += field.sizes
    data = matrix.ravel() if mask is None else matrix[mask]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(total, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


# -------------------------------------------------------------------------------------- input columns


def _combine(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks()
    return arr


def _binary_column(
    arr: pa.Array | pa.ChunkedArray | None, n: int, what: str
) -> tuple[pa.Array | None, np.ndarray]:
    """(large_binary array or None when every element is null, lengths with -1 for null)."""
    if arr is None:
        return None, np.full(n, -1, dtype=np.int64)
    arr = _combine(arr)
    if len(arr) != n:
        raise InvalidArgumentError(f"{what} has {len(arr)} elements, values has {n}")
    t = arr.type
    if pa.types.is_null(t) or arr.null_count == n:
        return None, np.full(n, -1, dtype=np.int64)
    if not (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_string_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        raise InvalidTypeError(f"{what} must be a binary, string or null array, got {t}")
    if not pa.types.is_large_binary(t):
        arr = arr.cast(pa.large_binary())
    lengths = pc.binary_length(arr).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return arr, lengths


def _timestamps_ms(
    timestamps: pa.Array | pa.ChunkedArray | np.ndarray | None, n: int, default: int | None
) -> np.ndarray:
    """Record timestamps as int64 milliseconds; nulls and an absent column take ``default`` (or now)."""
    fill = int(time.time() * 1000) if default is None else int(default)
    if timestamps is None:
        return np.full(n, fill, dtype=np.int64)
    if isinstance(timestamps, np.ndarray):
        if len(timestamps) != n:
            raise InvalidArgumentError(f"timestamps has {len(timestamps)} elements, values has {n}")
        if np.issubdtype(timestamps.dtype, np.datetime64):
            ms = timestamps.astype("datetime64[ms]")
            out = ms.astype(np.int64)
            return np.where(np.isnat(ms), np.int64(fill), out)
        if not np.issubdtype(timestamps.dtype, np.integer):
            raise InvalidTypeError(
                f"timestamps must be int64 milliseconds or datetime64, got dtype {timestamps.dtype}"
            )
        return timestamps.astype(np.int64)
    arr = _combine(timestamps)
    if len(arr) != n:
        raise InvalidArgumentError(f"timestamps has {len(arr)} elements, values has {n}")
    t = arr.type
    if pa.types.is_timestamp(t):
        raw = arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        per_ms = {"s": -1000, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        out = raw * -per_ms if per_ms < 0 else raw // per_ms  # floor, as Java's Instant.toEpochMilli
    elif pa.types.is_integer(t):
        out = arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    else:
        raise InvalidTypeError(f"timestamps must be int64 milliseconds or a timestamp array, got {t}")
    out = out.astype(np.int64, copy=True)
    if arr.null_count:
        out[arr.is_null().to_numpy(zero_copy_only=False)] = fill
    return out


def _header_column(
    headers: pa.Array | pa.ChunkedArray | None, n: int
) -> tuple[pa.Array | None, np.ndarray, np.ndarray]:
    """(per-record header blob or None, header counts, header bytes per record)."""
    zeros = np.zeros(n, dtype=np.int64)
    if headers is None:
        return None, zeros, zeros
    arr = _combine(headers)
    if len(arr) != n:
        raise InvalidArgumentError(f"headers has {len(arr)} elements, values has {n}")
    if pa.types.is_null(arr.type):
        return None, zeros, zeros
    if not any(test(arr.type) for test in _LIST_TYPES) or not pa.types.is_struct(arr.type.value_type):
        raise InvalidTypeError(f"headers must be list<struct<key: string, value: binary>>, got {arr.type}")
    struct_type = arr.type.value_type
    names = [struct_type.field(i).name for i in range(struct_type.num_fields)]
    if "key" not in names or "value" not in names:
        raise InvalidTypeError(f"headers struct must have fields 'key' and 'value', got {names}")
    counts = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    total = int(counts.sum())
    if total == 0:
        return None, zeros, zeros
    flat = arr.flatten()  # skips the children of null lists
    children = dict(zip(names, flat.flatten(), strict=True))  # applies the struct's offset and nulls
    hkey, hkey_len = _binary_column(children["key"], total, "header keys")
    if hkey is None or (hkey_len < 0).any():
        bad = int(np.flatnonzero(hkey_len < 0)[0])
        raise InvalidArgumentError(
            f"header {bad} (in row order) has a null key; Kafka header keys cannot be null"
        )
    hval, hval_len = _binary_column(children["value"], total, "header values")
    kfield = _Varints(hkey_len)
    vfield = _Varints(hval_len)
    columns: list[pa.Array | pa.Scalar] = [
        _varint_blob([kfield], total, allow_scalar=False),
        hkey,
        _varint_blob([vfield], total),
    ]
    if hval is not None:
        columns.append(hval)
    per_header = pc.binary_join_element_wise(*columns, _EMPTY, null_handling="replace", null_replacement=b"")
    list_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=list_offsets[1:])
    lists = pa.LargeListArray.from_arrays(pa.array(list_offsets), per_header)
    blob = pc.binary_join(lists, _EMPTY)
    sizes = kfield.sizes + hkey_len + vfield.sizes + np.maximum(hval_len, 0)
    cum = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(sizes, out=cum[1:])
    header_bytes = cum[list_offsets[1:]] - cum[list_offsets[:-1]]
    return blob, counts, header_bytes


# ----------------------------------------------------------------------------------------------- build


def _split(fixed: np.ndarray, ts: np.ndarray, max_batch_bytes: int | None) -> np.ndarray:
    """Batch boundaries (row indexes, first 0, last n) so each batch's uncompressed size <= the bound.

    A record's size depends on its batch (offsetDelta, timestampDelta), so each batch is sized exactly
    on a window of candidate rows: vectorized per batch, never per record.
    """
    n = len(fixed)
    if max_batch_bytes is None:
        return np.array([0, n], dtype=np.int64)
    limit = max_batch_bytes - HEADER_SIZE
    bounds = [0]
    start = 0
    window = 256
    # Loop invariants hoisted out of the per-batch windows: the offsetDelta sizes of 0, 1, 2, ... (grown on
    # demand) and, when every row has the same timestamp, its 1-byte timestampDelta (zigzag(0)).
    const_ts = bool(ts[0] == ts.min() == ts.max())
    per_row = fixed + 1 if const_ts else fixed
    delta_sizes = _uvarint_sizes(_zigzag(np.arange(window, dtype=np.int64)))
    while start < n:
        while True:
            end = min(n, start + window)
            if len(delta_sizes) < end - start:
                delta_sizes = _uvarint_sizes(_zigzag(np.arange(2 * (end - start), dtype=np.int64)))
            body = per_row[start:end] + delta_sizes[: end - start]
            if not const_ts:
                body += _uvarint_sizes(_zigzag(ts[start:end] - ts[start]))
            # body > 0, so its zigzag is body << 1
            sizes = body + _uvarint_sizes((body << 1).view(np.uint64))
            fit = int(np.searchsorted(np.cumsum(sizes), limit, side="right"))
            if fit < end - start or end == n:
                break
            window *= 2
        fit = max(fit, 1)
        start += fit
        bounds.append(start)
        window = max(256, fit + fit // 2 + 16)
    return np.array(bounds, dtype=np.int64)


def build_batches(
    values: pa.Array | pa.ChunkedArray,
    keys: pa.Array | pa.ChunkedArray | None = None,
    headers: pa.Array | pa.ChunkedArray | None = None,
    timestamps: pa.Array | pa.ChunkedArray | np.ndarray | None = None,
    *,
    compression: int = 0,
    max_batch_bytes: int | None = None,
    timestamp_ms: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int | Sequence[int] = -1,
    is_transactional: bool = False,
    group_starts: Sequence[int] | None = None,
) -> list[BuiltBatch]:
    """Encode rows into magic-2 RecordBatches (CreateTime), split by ``max_batch_bytes``.

    ``values``/``keys``: binary, large_binary, string, large_string (or view) or null-typed arrays; nulls
    are encoded with length -1. ``headers``: list<struct<key: string, value: binary>> (a null list = no
    headers; null header values allowed, null header keys are not). ``timestamps``: int64 milliseconds,
    a pyarrow timestamp array of any unit, or a numpy int64/datetime64 array; absent or null =
    ``timestamp_ms`` (default: now). ``compression``: codec id 0-4. With ``base_sequence >= 0`` each
    successive batch starts at the previous one's base sequence plus its record count, wrapping after
    int32 max to 0 as Kafka does. Returns ``[]`` for zero rows.

    ``group_starts`` (increasing row indexes, the first 0): the rows from each start to the next form a group
    whose rows get batches of their own (no batch spans two groups), e.g. the rows of several partitions
    encoded in one pass, which costs far less than one call per partition (the per-call numpy work is
    about 50 steps whatever the row count). ``base_sequence`` is then one base sequence per group (or one
    value for every group), and each batch names its group (:attr:`BuiltBatch.group`).
    """
    if compression & ~ATTR_COMPRESSION_MASK or compression > _compression.ZSTD or compression < 0:
        raise InvalidArgumentError(
            f"compression codec id {compression} is not one of 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd"
        )
    if max_batch_bytes is not None and max_batch_bytes <= 0:
        raise InvalidArgumentError(f"max_batch_bytes must be positive, got {max_batch_bytes}")
    if is_transactional and producer_id < 0:
        raise InvalidArgumentError("a transactional batch needs a producer id (producer_id is -1)")
    values = _combine(values)
    n = len(values)
    starts = [0] if group_starts is None else [int(g) for g in group_starts]
    if not starts or starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:], strict=False)):
        raise InvalidArgumentError(f"group_starts must increase from 0, got {list(starts)[:10]}")
    if starts[-1] >= n and n:
        raise InvalidArgumentError(f"group_starts {starts[-1]} is beyond the {n} rows")
    sequences = [base_sequence] * len(starts) if isinstance(base_sequence, int) else list(base_sequence)
    if len(sequences) != len(starts):
        raise InvalidArgumentError(f"{len(sequences)} base sequences for {len(starts)} row groups")
    if any(seq < NO_SEQUENCE for seq in sequences):
        raise InvalidArgumentError(f"base_sequence {min(sequences)} is negative (use -1 for none)")
    if n == 0:
        return []
    vals, vlen = _binary_column(values, n, "values")
    keys_arr, klen = _binary_column(keys, n, "keys")
    ts = _timestamps_ms(timestamps, n, timestamp_ms)
    hblob, hcount, hbytes = _header_column(headers, n)

    if _cwalk is not None:
        bounds, offsets, data = _encode_compiled(
            starts, max_batch_bytes, ts, keys_arr, klen, vals, vlen, hblob, hcount, hbytes
        )
    else:
        bounds, offsets, data = _encode_numpy(
            starts, max_batch_bytes, ts, keys_arr, klen, vals, vlen, hblob, hcount, hbytes
        )
    counts = np.diff(bounds)
    return _assemble(
        offsets,
        data,
        bounds,
        counts,
        ts,
        starts,
        sequences,
        compression | (ATTR_TRANSACTIONAL if is_transactional else 0),
        producer_id,
        producer_epoch,
    )


def _buffers(arr: pa.Array | None, n: int) -> tuple[np.ndarray, pa.Buffer | bytes]:
    """(the n + 1 offsets, the data buffer) of a large_binary array; empty ones for None."""
    if arr is None:
        return _NO_OFFSETS, b""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    return np.ascontiguousarray(offsets), (bufs[2] if bufs[2] is not None else b"")


_NO_OFFSETS = np.zeros(0, dtype=np.int64)


def _encode_compiled(
    starts: list[int],
    max_batch_bytes: int | None,
    ts: np.ndarray,
    keys_arr: pa.Array | None,
    klen: np.ndarray,
    vals: pa.Array | None,
    vlen: np.ndarray,
    hblob: pa.Array | None,
    hcount: np.ndarray,
    hbytes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, memoryview]:
    """(batch bounds, n + 1 record offsets, records sections) by the compiled ``_recordwalk.split`` and
    ``encode``: two passes over the rows (sizes and split, then the bytes) straight from the Arrow buffers."""
    n = len(ts)
    if hblob is not None and not pa.types.is_large_binary(
        hblob.type
    ):  # pragma: no cover - binary_join's type
        hblob = hblob.cast(pa.large_binary())
    ts = np.ascontiguousarray(ts, dtype=np.int64)
    klen = np.ascontiguousarray(klen, dtype=np.int64)
    vlen = np.ascontiguousarray(vlen, dtype=np.int64)
    hcount = np.ascontiguousarray(hcount, dtype=np.int64)
    bounds = np.empty(n + 1, dtype=np.int64)
    limit = -1 if max_batch_bytes is None else max(0, max_batch_bytes - HEADER_SIZE)
    nb = _cwalk.split(
        klen,
        vlen,
        hcount,
        np.ascontiguousarray(hbytes, dtype=np.int64),
        ts,
        np.array(starts, np.int64),
        limit,
        bounds,
    )
    bounds = bounds[:nb]
    koff, kdata = _buffers(keys_arr, n)
    voff, vdata = _buffers(vals, n)
    hoff, hdata = _buffers(hblob, n)
    offsets = np.empty(n + 1, dtype=np.int64)
    data = _cwalk.encode(bounds, ts, klen, koff, kdata, vlen, voff, vdata, hcount, hoff, hdata, offsets)
    return bounds, offsets, memoryview(data)


def _encode_numpy(
    starts: list[int],
    max_batch_bytes: int | None,
    ts: np.ndarray,
    keys_arr: pa.Array | None,
    klen: np.ndarray,
    vals: pa.Array | None,
    vlen: np.ndarray,
    hblob: pa.Array | None,
    hcount: np.ndarray,
    hbytes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, memoryview]:
    """(batch bounds, n + 1 record offsets, records sections) by numpy and Arrow compute (the fallback)."""
    n = len(ts)
    kfield = _Varints(klen)
    vfield = _Varints(vlen)
    hfield = _Varints(hcount)
    fixed = (
        1 + kfield.sizes + np.maximum(klen, 0) + vfield.sizes + np.maximum(vlen, 0) + hfield.sizes + hbytes
    )
    if len(starts) == 1:
        bounds = _split(fixed, ts, max_batch_bytes)
    else:
        ends = [*starts[1:], n]
        bounds = np.concatenate(
            [[0]]
            + [
                _split(fixed[a:b], ts[a:b], max_batch_bytes)[1:] + a
                for a, b in zip(starts, ends, strict=True)
            ]
        ).astype(np.int64)
    counts = np.diff(bounds)
    first = np.repeat(bounds[:-1], counts)
    ofield = _Varints(np.arange(n, dtype=np.int64) - first)
    tfield = _Varints(ts - ts[first])
    body = fixed + tfield.sizes + ofield.sizes
    lfield = _Varints(body)
    attributes = _Varints(np.zeros(n, dtype=np.int64))

    # [length attributes timestampDelta offsetDelta keyLength] key [valueLength] value [headersCount] headers
    # with runs of varints merged into one blob and all-null data columns dropped.
    layout: list[_Varints | pa.Array | None] = [
        lfield,
        attributes,
        tfield,
        ofield,
        kfield,
        keys_arr,
        vfield,
        vals,
        hfield,
        hblob,
    ]
    columns: list[pa.Array | pa.Scalar] = []
    run: list[_Varints] = []
    for item in layout:
        if isinstance(item, _Varints):
            run.append(item)
            continue
        if item is None:
            continue
        columns.append(_varint_blob(run, n, allow_scalar=bool(columns)))  # the first is an array
        run = []
        columns.append(item)
    if run:
        columns.append(_varint_blob(run, n, allow_scalar=bool(columns)))
    if len(columns) == 1:
        joined = columns[0]
    else:
        joined = pc.binary_join_element_wise(*columns, _EMPTY, null_handling="replace", null_replacement=b"")
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64)[joined.offset : joined.offset + n + 1]
    data = memoryview(joined.buffers()[2])
    expected = int((lfield.sizes + body).sum())
    if int(offsets[-1] - offsets[0]) != expected:  # pragma: no cover - internal consistency
        raise AssertionError(
            f"joined records hold {int(offsets[-1] - offsets[0])} bytes, computed {expected}"
        )
    return bounds, offsets, data


def _assemble(
    offsets: np.ndarray,
    data: memoryview,
    bounds: np.ndarray,
    counts: np.ndarray,
    ts: np.ndarray,
    starts: list[int],
    sequences: list[int],
    attrs: int,
    producer_id: int,
    producer_epoch: int,
) -> list[BuiltBatch]:
    """Cut the records sections into batches: compression, header, CRC-32C (one loop step per batch)."""
    max_ts = np.maximum.reduceat(ts, bounds[:-1])
    compression = attrs & ATTR_COMPRESSION_MASK
    out: list[BuiltBatch] = []
    group = 0
    sequence = sequences[0]
    for b in range(len(counts)):
        s = int(bounds[b])
        e = int(bounds[b + 1])
        count = e - s
        if group + 1 < len(starts) and s >= starts[group + 1]:
            group += 1
            sequence = sequences[group]
        records = data[int(offsets[s]) : int(offsets[e])]
        payload: bytes | memoryview = (
            records if compression == 0 else _compression.compress(compression, records)
        )
        header = bytearray(
            BATCH_HEADER.pack(
                0,
                HEADER_SIZE - LOG_OVERHEAD + len(payload),
                _PARTITION_LEADER_EPOCH_NONE,
                MAGIC,
                0,
                attrs,
                count - 1,
                int(ts[s]),
                int(max_ts[b]),
                producer_id,
                producer_epoch,
                sequence,
                count,
            )
        )
        crc = _crc32c.crc32c(payload, _crc32c.crc32c(memoryview(header)[CRC_OFFSET + 4 :]))
        header[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
        out.append(
            BuiltBatch(b"".join((header, payload)), count, s, sequence, HEADER_SIZE + len(records), group)
        )
        if sequence != NO_SEQUENCE:
            sequence = (
                count - (_INT32_MAX - sequence) - 1 if sequence > _INT32_MAX - count else sequence + count
            )
    return out


def build_batch(
    values: pa.Array | pa.ChunkedArray,
    keys: pa.Array | pa.ChunkedArray | None = None,
    headers: pa.Array | pa.ChunkedArray | None = None,
    timestamps: pa.Array | pa.ChunkedArray | np.ndarray | None = None,
    *,
    compression: int = 0,
    timestamp_ms: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """All rows as exactly one RecordBatch (see :func:`build_batches`); at least one row is required."""
    batches = build_batches(
        values,
        keys,
        headers,
        timestamps,
        compression=compression,
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
    )
    if not batches:
        raise InvalidArgumentError("a record batch needs at least one record; values is empty")
    return batches[0].data


# ---------------------------------------------------------------------------------------------- decode


class _Selected:
    """A batch chosen for decoding and where its records section lies in the arena."""

    __slots__ = ("begin", "end", "header", "position")

    def __init__(self, position: int, header: BatchHeader, begin: int, end: int) -> None:
        self.position = position
        self.header = header
        self.begin = begin
        self.end = end


def _walk(mv: memoryview, allow_partial_tail: bool) -> list[tuple[int, BatchHeader]]:
    total = len(mv)
    spans: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < total:
        left = total - pos
        if left < HEADER_SIZE:
            if allow_partial_tail:
                break
            raise CorruptRecordError(
                f"batch at position {pos}: {left} bytes left at the end of the input, a batch header needs "
                f"{HEADER_SIZE}"
            )
        header = parse_header(mv, pos)
        if header.size > left:
            if allow_partial_tail:
                break
            raise CorruptRecordError(
                f"batch at position {pos}: batchLength {header.batch_length} needs {header.size} bytes, "
                f"only {left} are left"
            )
        spans.append((pos, header))
        pos += header.size
    return spans


def _check_records_count(sel: _Selected) -> None:
    """The records count of ``sel`` must fit its offset range and its records section (both walks)."""
    count = sel.header.records_count
    if sel.header.last_offset_delta < 0 or count > sel.header.last_offset_delta + 1:
        raise CorruptRecordError(
            f"batch at position {sel.position}: recordsCount {count} does not fit the offset range "
            f"lastOffsetDelta {sel.header.last_offset_delta} + 1"
        )
    if count < 0 or count * _MIN_RECORD_SIZE > sel.end - sel.begin:
        raise CorruptRecordError(
            f"batch at position {sel.position}: recordsCount {count} cannot fit in a records section of "
            f"{sel.end - sel.begin} bytes"
        )


def _record_starts(arena: bytes | bytearray | memoryview, sel: _Selected, out: list[int]) -> None:
    """Append the start of each record of ``sel``: the one sequential (per-record) step of decoding."""
    _check_records_count(sel)
    count = sel.header.records_count
    begin = sel.begin
    end = sel.end
    append = out.append
    pos = begin
    try:
        for _ in range(count):
            append(pos)
            b = arena[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)
                continue
            u = b & 0x7F
            shift = 7
            q = pos + 1
            while True:
                b = arena[q]
                q += 1
                u |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift >= 7 * _MAX_VARINT_BYTES:
                    raise CorruptRecordError(
                        f"batch at position {sel.position}: record length varint at byte {pos - begin} of "
                        f"the records section is longer than {_MAX_VARINT_BYTES} bytes"
                    )
            pos = q + (u >> 1)
    except IndexError:
        pos = len(arena) + 1
    if pos != end:
        raise CorruptRecordError(
            f"batch at position {sel.position}: recordsCount {count} records do not end at the end of the "
            f"{end - begin}-byte records section (they end at byte {pos - begin})"
        )


class _Arena:
    """The bytes every selected records section lives in, as numpy for vectorized varint reads."""

    __slots__ = ("a", "last")

    def __init__(self, arena: bytes | bytearray | memoryview) -> None:
        self.a = np.frombuffer(arena, dtype=np.uint8)
        self.last = len(self.a) - 1

    def byte(self, pos: np.ndarray) -> np.ndarray:
        return self.a.take(pos, mode="clip")  # a corrupt length may point past the end: caught later

    def varints(
        self, pos: np.ndarray, max_bytes: int, fail: _Fail, what: str
    ) -> tuple[np.ndarray, np.ndarray | int]:
        """Zigzag varints at ``pos``: (int64 values, encoded sizes); overlong ones raise.

        The sizes are the int 1 when every varint is one byte (the common case for most fields); varints of
        at most two bytes are read without index arrays (fewer numpy steps)."""
        first = self.byte(pos)
        if not len(first) or first.max() < 0x80:
            v = first.astype(np.int64)
            return (v >> 1) ^ -(v & 1), 1
        second = self.byte(pos + 1)
        more = first >= 0x80
        if not (more & (second >= 0x80)).any():  # at most two bytes each: no index arrays
            v = (first & 0x7F).astype(np.int64) | ((second & 0x7F).astype(np.int64) << 7) * more
            return (v >> 1) ^ -(v & 1), 1 + more.view(np.uint8).astype(np.int64)
        b = first.astype(np.uint64)
        u = b & np.uint64(0x7F)
        size = np.ones(len(pos), dtype=np.int64)
        idx = np.flatnonzero(b >= 0x80)
        k = 1
        while len(idx):
            if k == max_bytes:
                fail(idx[0], f"{what} varint is longer than {max_bytes} bytes")
            b = self.byte(pos[idx] + k).astype(np.uint64)
            u[idx] |= (b & np.uint64(0x7F)) << np.uint64(7 * k)
            size[idx] += 1
            idx = idx[b >= 0x80]
            k += 1
        values = _unzigzag(u)
        if max_bytes == _MAX_VARINT_BYTES:
            values = values.astype(np.int32).astype(np.int64)  # 32-bit wrap, as Java's int arithmetic
        return values, size


class _Fail:
    """Raises CorruptRecordError for record ``i`` (or header ``i``) naming its batch and index."""

    __slots__ = ("first_record", "positions", "rows")

    def __init__(
        self, positions: np.ndarray, first_record: np.ndarray, rows: np.ndarray | None = None
    ) -> None:
        self.positions = positions
        self.first_record = first_record
        self.rows = rows  # header index -> record index, when failing on headers

    def __call__(self, i: int | np.integer, message: str) -> None:
        record = int(i) if self.rows is None else int(self.rows[int(i)])
        b = int(np.searchsorted(self.first_record, record, side="right")) - 1
        index = record - int(self.first_record[b])
        exc = CorruptRecordError(f"batch at position {int(self.positions[b])}, record {index}: {message}")
        exc.record_index = index
        raise exc

    def check(self, bad: np.ndarray, message: str) -> None:
        if bad.any():
            self(int(np.flatnonzero(bad)[0]), message)

    def for_headers(self, rows: np.ndarray) -> _Fail:
        return _Fail(self.positions, self.first_record, rows)


def _pieces(arena_buf: pa.Buffer, bounds: np.ndarray) -> pa.Array:
    """A binary array over the arena whose element k is arena[bounds[k]:bounds[k+1]] (zero copy).

    The walks place every bound inside the arena; one outside it (a walk that missed a check) raises
    CorruptRecordError here rather than pyarrow's ArrowInvalid, so a damaged batch never escapes as a traceback."""
    if len(bounds) and (bounds[0] < 0 or bounds[-1] > len(arena_buf)):
        raise CorruptRecordError(
            f"a record field [{int(bounds[0])}, {int(bounds[-1])}) lies outside the {len(arena_buf)} bytes of "
            "the records"
        )
    if len(arena_buf) <= _INT32_MAX:
        return pa.Array.from_buffers(
            pa.binary(), len(bounds) - 1, [None, pa.py_buffer(bounds.astype(np.int32)), arena_buf]
        )
    return pa.Array.from_buffers(pa.large_binary(), len(bounds) - 1, [None, pa.py_buffer(bounds), arena_buf])


def _with_validity(arr: pa.Array, valid: np.ndarray, typ: pa.DataType) -> pa.Array:
    """``arr`` (binary-like, no nulls) re-typed as ``typ`` with nulls where ``valid`` is False."""
    if arr.type != pa.binary() and typ == pa.binary():
        arr = arr.cast(pa.binary())
    bufs = arr.buffers()
    if valid.all():
        return pa.Array.from_buffers(typ, len(arr), [None, bufs[1], bufs[2]], offset=arr.offset)
    if arr.offset:
        arr = pa.concat_arrays([arr])  # normalize to offset 0 before attaching a bitmap
        bufs = arr.buffers()
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, len(arr), [bitmap, bufs[1], bufs[2]], null_count=int((~valid).sum()))


def _gather_pairs(
    arena_buf: pa.Buffer,
    a_start: np.ndarray,
    a_len: np.ndarray,
    b_start: np.ndarray,
    b_len: np.ndarray,
) -> tuple[pa.Array, pa.Array]:
    """Two binary columns gathered from the arena; segments a_i, b_i, a_{i+1}... must be in arena order."""
    m = len(a_start)
    if m == 0:
        empty = pa.array([], pa.binary())
        return empty, empty
    bounds = np.empty(4 * m, dtype=np.int64)
    bounds[0::4] = a_start
    bounds[1::4] = a_start + a_len
    bounds[2::4] = b_start
    bounds[3::4] = b_start + b_len
    pieces = _pieces(arena_buf, bounds)
    pick = np.zeros(4 * m - 1, dtype=bool)
    pick[0::4] = True
    first = pieces.filter(pa.array(pick))  # filter copies binary faster than take
    pick[0::4] = False
    pick[2::4] = True
    return first, pieces.filter(pa.array(pick))


def _gather_compiled(
    arena: bytes | bytearray | memoryview, start: np.ndarray, length: np.ndarray
) -> pa.Array:
    """A binary column of the arena slices ``[start, start + length)`` (null where ``length`` is -1), copied by
    the compiled walk's ``gather`` into a fresh buffer: one memcpy per record (about 7x cheaper than the
    filter of :func:`_gather_pairs` for 16-byte keys and 100-byte values). The arena is at most 2 GiB."""
    m = len(start)
    total = int(length.sum()) + int(np.count_nonzero(length < 0))  # a null (-1) takes no bytes
    offsets = np.empty(m + 1, dtype=np.int32)
    data = np.empty(total, dtype=np.uint8)
    _cwalk.gather(arena, start, length, offsets, data)
    valid = length >= 0
    nulls = m - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        pa.binary(), m, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _empty_result() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in DECODED_SCHEMA], schema=DECODED_SCHEMA)


@dataclass(slots=True)
class RecordLayout:
    """The records of some batches as numpy arrays over one byte *arena* (see :func:`record_layout`).

    ``selected[b]`` is batch ``b`` (its position in the input, header, and records section
    ``[begin, end)`` in the arena: the input itself when nothing was compressed, else the decompressed
    sections laid end to end). Record ``i`` (of ``counts.sum()``, batch by batch) spans arena bytes
    ``[starts[i], ends[i])``; its key is ``[key_start[i], key_start[i] + key_len[i])`` (``key_len`` -1 for a
    null key), likewise the value; ``headers_pos[i]`` is where its headers start. The records of a batch
    tile its section exactly. ``first_record[b]`` is the index of batch ``b``'s first record.
    """

    selected: list[_Selected]
    arena: bytes | bytearray | memoryview
    counts: np.ndarray
    first_record: np.ndarray
    fail: _Fail
    starts: np.ndarray
    ends: np.ndarray
    ts_delta: np.ndarray
    offset_delta: np.ndarray
    key_start: np.ndarray
    key_len: np.ndarray
    value_start: np.ndarray
    value_len: np.ndarray
    header_count: np.ndarray
    headers_pos: np.ndarray
    #: The compiled walk checked every header's lengths and each record's end (see :func:`_layout`).
    headers_checked: bool = False

    @property
    def offsets(self) -> np.ndarray:
        """The absolute offset of every record."""
        base = np.array([s.header.base_offset for s in self.selected], dtype=np.int64)
        return np.repeat(base, self.counts) + self.offset_delta

    def keys(self) -> pa.Array:
        """The key of every record as a binary array (nulls for null keys), zero copy over the arena."""
        raw, _ = _gather_pairs(
            pa.py_buffer(self.arena),
            self.key_start,
            np.maximum(self.key_len, 0),
            self.value_start,
            np.maximum(self.value_len, 0),
        )
        return _with_validity(raw, self.key_len >= 0, pa.binary())


def record_layout(
    buf: bytes | bytearray | memoryview,
    *,
    start_offset: int | None = None,
    end_offset: int | None = None,
    include_control: bool = False,
    verify_crc: bool = True,
    allow_partial_tail: bool = True,
) -> RecordLayout | None:
    """Where every record of the selected batches of ``buf`` lies, and its fixed fields, decoded with numpy
    (the first half of :func:`decode_batches`, shared with the log cleaner, which filters records by these
    arrays and copies the kept records' bytes). Batch selection and errors as :func:`decode_batches`; None
    when no batch (or no record) is selected. Header fields are located but not validated.
    """
    return _layout(
        buf,
        start_offset=start_offset,
        end_offset=end_offset,
        include_control=include_control,
        verify_crc=verify_crc,
        allow_partial_tail=allow_partial_tail,
        walk_headers=False,
    )


def _layout(
    buf: bytes | bytearray | memoryview,
    *,
    start_offset: int | None,
    end_offset: int | None,
    include_control: bool,
    verify_crc: bool,
    allow_partial_tail: bool,
    walk_headers: bool,
) -> RecordLayout | None:
    """:func:`record_layout`; ``walk_headers`` (the compiled walk only) also checks every header's lengths and
    that each record's fields end at its end, as :func:`decode_batches` needs (``RecordLayout.headers_checked``).
    """
    mv = memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    selected: list[_Selected] = []
    for position, header in _walk(mv, allow_partial_tail):
        if header.is_control and not include_control:
            continue
        if start_offset is not None and header.last_offset < start_offset:
            continue
        if end_offset is not None and header.base_offset >= end_offset:
            continue
        if verify_crc:
            crc = compute_crc(mv, position, header.size)
            if crc != header.crc:
                raise CorruptRecordError(
                    f"batch at position {position}: CRC-32C 0x{header.crc:08x} does not match computed "
                    f"0x{crc:08x}"
                )
        selected.append(_Selected(position, header, position + HEADER_SIZE, position + header.size))
    if not selected:
        return None

    # The arena: the input itself when nothing is compressed, else every section laid end to end.
    arena: bytes | bytearray | memoryview
    if all(s.header.compression == 0 for s in selected):
        arena = buf if isinstance(buf, bytes | bytearray) and mv.contiguous else mv
    else:
        parts: list[bytes | memoryview] = []
        cursor = 0
        for s in selected:
            codec = s.header.compression
            section = mv[s.begin : s.end]
            if codec:
                try:
                    section = memoryview(_compression.decompress(codec, section))
                except PylogError as exc:
                    raise CorruptRecordError(f"batch at position {s.position}: {exc}") from exc
            parts.append(section)
            s.begin = cursor
            cursor += len(section)
            s.end = cursor
        arena = b"".join(parts)

    if _cwalk is not None:
        return _layout_compiled(selected, arena, walk_headers)
    starts_list: list[int] = []
    for s in selected:
        _record_starts(arena, s, starts_list)
    n = len(starts_list)
    counts = np.array([s.header.records_count for s in selected], dtype=np.int64)
    positions = np.array([s.position for s in selected], dtype=np.int64)
    first_record = np.zeros(len(selected), dtype=np.int64)
    np.cumsum(counts[:-1], out=first_record[1:])
    if n == 0:
        return None
    fail = _Fail(positions, first_record)
    ar = _Arena(arena)
    starts = np.array(starts_list, dtype=np.int64)

    length, size = ar.varints(starts, _MAX_VARINT_BYTES, fail, "record length")
    fail.check(length < 0, "negative record length")
    rec_end = starts + size + length
    pos = starts + size + 1  # the attributes byte is not interpreted (Kafka ignores it too)
    ts_delta, size = ar.varints(pos, _MAX_VARLONG_BYTES, fail, "timestampDelta")
    pos += size
    offset_delta, size = ar.varints(pos, _MAX_VARINT_BYTES, fail, "offsetDelta")
    pos += size
    last_delta = np.repeat(np.array([s.header.last_offset_delta for s in selected], dtype=np.int64), counts)
    fail.check((offset_delta < 0) | (offset_delta > last_delta), "offsetDelta outside [0, lastOffsetDelta]")
    if n > 1:
        not_first = np.ones(n - 1, dtype=bool)
        boundaries = first_record[1:]
        not_first[boundaries[(boundaries > 0) & (boundaries < n)] - 1] = False
        fail.check(
            np.concatenate([[False], (np.diff(offset_delta) <= 0) & not_first]),
            "offsetDelta does not increase",
        )
    key_len, size = ar.varints(pos, _MAX_VARINT_BYTES, fail, "key length")
    fail.check(key_len < -1, "key length below -1")
    key_start = pos + size
    pos = key_start + np.maximum(key_len, 0)
    fail.check(pos > rec_end, "key runs past the end of the record")
    value_len, size = ar.varints(pos, _MAX_VARINT_BYTES, fail, "value length")
    fail.check(value_len < -1, "value length below -1")
    value_start = pos + size
    pos = value_start + np.maximum(value_len, 0)
    fail.check(pos > rec_end, "value runs past the end of the record")
    header_count, size = ar.varints(pos, _MAX_VARINT_BYTES, fail, "headers count")
    pos += size
    fail.check(
        (header_count < 0) | (header_count * 2 > rec_end - pos),
        "headers count is negative or larger than the record can hold",
    )

    return RecordLayout(
        selected=selected,
        arena=arena,
        counts=counts,
        first_record=first_record,
        fail=fail,
        starts=starts,
        ends=rec_end,
        ts_delta=ts_delta,
        offset_delta=offset_delta,
        key_start=key_start,
        key_len=key_len,
        value_start=value_start,
        value_len=value_len,
        header_count=header_count,
        headers_pos=pos,
    )


def _layout_compiled(
    selected: list[_Selected], arena: bytes | bytearray | memoryview, walk_headers: bool
) -> RecordLayout | None:
    """The record walk of :func:`record_layout` by the compiled ``_recordwalk.layout``: the same checks, in
    record order (the first bad record is the one named)."""
    for s in selected:
        _check_records_count(s)
    counts = np.array([s.header.records_count for s in selected], dtype=np.int64)
    n = int(counts.sum())
    batches = np.empty((len(selected), 4), dtype=np.int64)
    batches[:, 0] = [s.begin for s in selected]
    batches[:, 1] = [s.end for s in selected]
    batches[:, 2] = counts
    batches[:, 3] = [s.header.last_offset_delta for s in selected]
    rows = np.empty((10, n), dtype=np.int64)
    try:
        _cwalk.layout(arena, batches, rows, walk_headers)
    except _cwalk.WalkError as exc:
        b, index, message = exc.args
        raise _walk_error(selected[b].position, index, message) from None
    if n == 0:  # (after the walk: a batch of no records must still have an empty records section)
        return None
    positions = np.array([s.position for s in selected], dtype=np.int64)
    first_record = np.zeros(len(selected), dtype=np.int64)
    np.cumsum(counts[:-1], out=first_record[1:])
    return RecordLayout(
        selected=selected,
        arena=arena,
        counts=counts,
        first_record=first_record,
        fail=_Fail(positions, first_record),
        starts=rows[0],
        ends=rows[1],
        ts_delta=rows[2],
        offset_delta=rows[3],
        key_start=rows[4],
        key_len=rows[5],
        value_start=rows[6],
        value_len=rows[7],
        header_count=rows[8],
        headers_pos=rows[9],
        headers_checked=walk_headers,
    )


def _walk_error(position: int, index: int | None, message: str) -> CorruptRecordError:
    """The CorruptRecordError of a record walk's finding (both walks word them alike)."""
    where = (
        f"batch at position {position}" if index is None else f"batch at position {position}, record {index}"
    )
    exc = CorruptRecordError(f"{where}: {message}")
    exc.record_index = index
    return exc


def decode_batches(
    buf: bytes | bytearray | memoryview,
    *,
    start_offset: int | None = None,
    end_offset: int | None = None,
    include_control: bool = False,
    verify_crc: bool = True,
    allow_partial_tail: bool = True,
) -> pa.RecordBatch:
    """Decode concatenated magic-2 batches into one RecordBatch of :data:`DECODED_SCHEMA`.

    Records with offset < ``start_offset`` or >= ``end_offset`` are dropped; batches entirely outside
    that range are skipped without CRC check or decompression. Control batches (transaction markers)
    are skipped unless ``include_control``. A trailing incomplete batch (a fetch may end mid-batch) is
    ignored when ``allow_partial_tail``, else it raises. Corrupt input raises CorruptRecordError.
    """
    layout = _layout(
        buf,
        start_offset=start_offset,
        end_offset=end_offset,
        include_control=include_control,
        verify_crc=verify_crc,
        allow_partial_tail=allow_partial_tail,
        walk_headers=True,
    )
    if layout is None:
        return _empty_result()
    selected = layout.selected
    arena = layout.arena
    counts = layout.counts
    fail = layout.fail
    ar = _Arena(arena)
    n = len(layout.starts)
    rec_end = layout.ends
    ts_delta = layout.ts_delta
    offset_delta = layout.offset_delta
    key_start, key_len = layout.key_start, layout.key_len
    value_start, value_len = layout.value_start, layout.value_len
    header_count = layout.header_count
    pos = layout.headers_pos if layout.headers_checked else layout.headers_pos.copy()

    arena_buf = pa.py_buffer(arena)
    total_headers = int(header_count.sum())
    header_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(header_count, out=header_offsets[1:])
    if total_headers and layout.headers_checked:
        spans = np.empty((4, total_headers), dtype=np.int64)
        _cwalk.header_spans(arena, layout.headers_pos, header_count, spans)
        hk_start, hk_len, hv_start, hv_len = spans
    elif total_headers:
        hk_start = np.empty(total_headers, dtype=np.int64)
        hk_len = np.empty(total_headers, dtype=np.int64)
        hv_start = np.empty(total_headers, dtype=np.int64)
        hv_len = np.empty(total_headers, dtype=np.int64)
        rows = np.flatnonzero(header_count > 0)
        j = 0
        while len(rows):
            slot = header_offsets[rows] + j
            hfail = fail.for_headers(rows)
            p = pos[rows]
            kl, sz = ar.varints(p, _MAX_VARINT_BYTES, hfail, "header key length")
            hfail.check(kl < 0, "negative header key length")
            hk_start[slot] = p + sz
            hk_len[slot] = kl
            p = p + sz + kl
            hfail.check(p > rec_end[rows], "header key runs past the end of the record")
            vl, sz = ar.varints(p, _MAX_VARINT_BYTES, hfail, "header value length")
            hfail.check(vl < -1, "header value length below -1")
            hv_start[slot] = p + sz
            hv_len[slot] = vl
            pos[rows] = p + sz + np.maximum(vl, 0)
            j += 1
            rows = rows[header_count[rows] > j]
    if not layout.headers_checked:
        fail.check(pos != rec_end, "record length does not match the fields it holds")

    # Columns.
    if _cwalk is not None and len(arena) <= _INT32_MAX:
        keys = _gather_compiled(arena, key_start, key_len)
        values = _gather_compiled(arena, value_start, value_len)
    else:
        keys_raw, values_raw = _gather_pairs(
            arena_buf, key_start, np.maximum(key_len, 0), value_start, np.maximum(value_len, 0)
        )
        keys = _with_validity(keys_raw, key_len >= 0, pa.binary())
        values = _with_validity(values_raw, value_len >= 0, pa.binary())
    if total_headers:
        hk_raw, hv_raw = _gather_pairs(arena_buf, hk_start, hk_len, hv_start, np.maximum(hv_len, 0))
        hkeys = _with_validity(hk_raw.cast(pa.binary()), np.ones(total_headers, dtype=bool), pa.string())
        try:
            hkeys.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise CorruptRecordError(f"a record header key is not valid UTF-8: {exc}") from exc
        hvals = _with_validity(hv_raw, hv_len >= 0, pa.binary())
        structs = pa.StructArray.from_arrays([hkeys, hvals], fields=list(HEADER_STRUCT_TYPE))
    else:
        structs = pa.StructArray.from_arrays(
            [pa.array([], pa.string()), pa.array([], pa.binary())], fields=list(HEADER_STRUCT_TYPE)
        )
    header_col = pa.ListArray.from_arrays(
        pa.array(header_offsets.astype(np.int32)), structs, type=HEADERS_TYPE
    )

    base_offset = np.repeat(np.array([s.header.base_offset for s in selected], dtype=np.int64), counts)
    offsets = base_offset + offset_delta
    log_append = np.array([s.header.timestamp_type for s in selected], dtype=np.int32)
    base_ts = np.array([s.header.base_timestamp for s in selected], dtype=np.int64)
    max_ts = np.array([s.header.max_timestamp for s in selected], dtype=np.int64)
    ts_type = np.repeat(log_append, counts)
    timestamps = np.where(ts_type == 1, np.repeat(max_ts, counts), np.repeat(base_ts, counts) + ts_delta)

    result = pa.RecordBatch.from_arrays(
        [pa.array(offsets), pa.array(timestamps), pa.array(ts_type), keys, values, header_col],
        schema=DECODED_SCHEMA,
    )
    if start_offset is not None or end_offset is not None:
        keep = np.ones(n, dtype=bool)
        if start_offset is not None:
            keep &= offsets >= start_offset
        if end_offset is not None:
            keep &= offsets < end_offset
        if not keep.all():
            result = result.filter(pa.array(keep))
    return result


# --------------------------------------------------------------------------------------------- validate

#: Records checked per vectorized step of :func:`scan_records`: bounds its memory (about 150 bytes a record
#: of numpy arrays) whatever the records count of the batch.
SCAN_CHUNK = 65536


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
    """Walk every record of one batch whose (decompressed) records section is ``section``.

    Structure (what Kafka's ``DefaultRecord.readFrom`` and the batch's record iterator enforce, plus what this
    module's decoder needs to read the batch back): exactly ``recordsCount`` records filling the section,
    every varint at most 5 bytes (varlong 10), lengths >= -1 (record, header key >= 0) and inside their record,
    offsetDelta of record i equal to i, header counts >= 0, header keys valid UTF-8, each record's fields
    ending exactly at its declared length. A violation raises :class:`CorruptRecordError` whose
    ``record_index`` names the record (None when no one record is to blame). The record attributes byte is not
    interpreted (Kafka ignores it too).

    The compiled walk checks record by record, field by field: the first bad record is named. The numpy walk
    (without the extension) runs in chunks of :data:`SCAN_CHUNK` records; record starts come from
    :func:`_record_chain` (numpy-verified speculation, the per-record Python walk only where record sizes vary
    or a chunk is small). Pure; thread-safe.
    """
    data = section
    count = header.records_count
    end = len(data)
    if count < 0 or count * _MIN_RECORD_SIZE > end:
        raise CorruptRecordError(
            f"batch at position {position}: recordsCount {count} cannot fit in a records section of {end} bytes"
        )
    log_append = bool(header.timestamp_type)
    check_ts = timestamp_low is not None or timestamp_high is not None
    # bounds such as now + Long.MAX_VALUE ("no bound") are clamped to the int64 range of the timestamps
    low = -(1 << 63) if timestamp_low is None else max(timestamp_low, -(1 << 63))
    high = (1 << 63) - 1 if timestamp_high is None else min(timestamp_high, (1 << 63) - 1)
    if _cwalk is not None:
        out = np.empty(3 * count, dtype=np.int64)
        try:
            max_ts, n_null, n_bad = _cwalk.scan(
                data, count, header.base_timestamp, low, high, log_append, check_ts, out
            )
        except _cwalk.WalkError as exc:
            _, index, message = exc.args
            raise _walk_error(position, index, message) from None
        null_keys = out[:n_null]
        bad_idx = out[count : count + n_bad]
        bad_ts = out[2 * count : 2 * count + n_bad]
    else:
        max_ts, null_keys, bad_idx, bad_ts = _scan_numpy(header, data, position, low, high, check_ts)
    # Kafka reads every record of a LogAppendTime batch at the batch's maxTimestamp (the walks report no record
    # timestamps for such a batch).
    lat_ts = header.max_timestamp
    if log_append and check_ts and lat_ts != NO_TIMESTAMP and not low <= lat_ts <= high:
        bad_idx = np.arange(count, dtype=np.int64)
        bad_ts = np.full(count, lat_ts, dtype=np.int64)
    return RecordsScan(
        max_timestamp=max_ts, null_keys=null_keys, out_of_range=bad_idx, out_of_range_timestamps=bad_ts
    )


def _scan_numpy(
    header: BatchHeader,
    data: bytes | bytearray | memoryview,
    position: int,
    low_bound: int,
    high_bound: int,
    check_ts: bool,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`scan_records`' numpy walk: (max timestamp, null-key indexes, out-of-range indexes and timestamps).

    The vectorized checks of a chunk find *that* it holds a bad record; :func:`_scan_reference` then walks it
    record by record to name the first bad one, as the compiled walk does."""
    count = header.records_count
    end = len(data)
    ar = _Arena(data)
    arena_buf = pa.py_buffer(data)
    positions = np.array([position], dtype=np.int64)
    log_append = bool(header.timestamp_type)
    low = np.int64(low_bound)
    high = np.int64(high_bound)
    max_ts = NO_TIMESTAMP
    null_keys: list[np.ndarray] = []
    bad_idx: list[np.ndarray] = []
    bad_ts: list[np.ndarray] = []
    pos = 0
    first = 0
    chunk_pos = chunk_first = 0  # where the chunk being checked starts
    try:
        while first < count:
            chunk_pos, chunk_first = pos, first
            k = min(SCAN_CHUNK, count - first)
            starts, pos = _record_chain(ar.a, data, pos, k, first, position)
            fail = _Fail(positions, np.array([-first], dtype=np.int64))
            length, size = ar.varints(starts, _MAX_VARINT_BYTES, fail, "record length")
            fail.check(length < 0, "negative record length")
            rec_end = starts + size + length
            # every field bound below is checked against rec_end: it must lie inside the section (the chain
            # can end past it) before any bound reaches pyarrow (the header keys' UTF-8 check)
            fail.check(rec_end > end, "the record runs past the end of the records section")
            p = starts + size + 1  # the attributes byte
            ts_delta, size = ar.varints(p, _MAX_VARLONG_BYTES, fail, "timestampDelta")
            p += size
            index_size = _index_varint_matches(ar.a, p, first, k)
            if (
                index_size is None
            ):  # not the indexes' shortest encodings: decode (a longer one is still valid)
                offset_delta, size = ar.varints(p, _MAX_VARINT_BYTES, fail, "offsetDelta")
                fail.check(
                    offset_delta != np.arange(first, first + k, dtype=np.int64),
                    "offsetDelta is not the record's index in the batch",
                )
                p += size
            else:
                p += index_size
            key_len, size = ar.varints(p, _MAX_VARINT_BYTES, fail, "key length")
            fail.check(key_len < -1, "key length below -1")
            p = p + size + np.maximum(key_len, 0)
            fail.check(p > rec_end, "key runs past the end of the record")
            value_len, size = ar.varints(p, _MAX_VARINT_BYTES, fail, "value length")
            fail.check(value_len < -1, "value length below -1")
            p = p + size + np.maximum(value_len, 0)
            fail.check(p > rec_end, "value runs past the end of the record")
            header_count, size = ar.varints(p, _MAX_VARINT_BYTES, fail, "headers count")
            p += size
            fail.check(
                (header_count < 0) | (header_count * 2 > rec_end - p),
                "headers count is negative or larger than the record can hold",
            )
            rows = np.flatnonzero(header_count > 0)
            key_bounds: list[np.ndarray] = []
            j = 0
            while len(rows):
                hfail = fail.for_headers(rows)
                q = p[rows]
                kl, sz = ar.varints(q, _MAX_VARINT_BYTES, hfail, "header key length")
                hfail.check(kl < 0, "negative header key length")
                key_bounds.append(np.stack([q + sz, q + sz + kl], axis=1))
                q = q + sz + kl
                hfail.check(q > rec_end[rows], "header key runs past the end of the record")
                vl, sz = ar.varints(q, _MAX_VARINT_BYTES, hfail, "header value length")
                hfail.check(vl < -1, "header value length below -1")
                p[rows] = q + sz + np.maximum(vl, 0)
                hfail.check(p[rows] > rec_end[rows], "header value runs past the end of the record")
                j += 1
                rows = rows[header_count[rows] > j]
            fail.check(p != rec_end, "record length does not match the fields it holds")
            if key_bounds:
                _check_utf8_keys(arena_buf, np.concatenate(key_bounds), position)
            null_keys.append(np.flatnonzero(key_len < 0) + first)
            if not log_append:
                ts = header.base_timestamp + ts_delta
                max_ts = max(max_ts, int(ts.max()))
                if check_ts:
                    bad = (ts != NO_TIMESTAMP) & ((ts < low) | (ts > high))
                    if bad.any():
                        idx = np.flatnonzero(bad)
                        bad_idx.append(idx + first)
                        bad_ts.append(ts[idx])
            first += k
        if pos != end:
            what = (
                f"{end - pos} bytes remain"
                if pos < end
                else f"the last record runs {pos - end} bytes past the end"
            )
            exc = CorruptRecordError(
                f"batch at position {position}, record {count - 1}: {what} of the records section after its "
                f"{count} records (recordsCount or a record length is wrong)"
            )
            exc.record_index = count - 1 if count else None
            raise exc
    except CorruptRecordError:
        # name the first bad record from this chunk on, as the compiled walk does
        _scan_reference(data, chunk_pos, chunk_first, count, position)
        raise  # not reached unless the walks disagree (a bug): then the vectorized finding stands
    empty = np.zeros(0, dtype=np.int64)
    return (
        max_ts,
        np.concatenate(null_keys) if null_keys else empty,
        np.concatenate(bad_idx) if bad_idx else empty,
        np.concatenate(bad_ts) if bad_ts else empty,
    )


def _scan_reference(
    data: bytes | bytearray | memoryview, pos: int, first: int, count: int, position: int
) -> None:
    """Walk records ``first ..`` from ``pos`` one by one, in field order, with every check of
    :func:`scan_records`; raise for the first bad record (the compiled walk's order and wording). The numpy
    path's error reporting only: about 2 us a record."""
    end = len(data)
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data

    def varint(p: int, limit: int, max_bytes: int, what: str, i: int) -> tuple[int, int]:
        u = 0
        for k in range(max_bytes):
            if p + k >= limit:
                raise _walk_error(position, i, f"{what} runs past the end of the record")
            b = view[p + k]
            u |= (b & 0x7F) << (7 * k)
            if b < 0x80:
                u &= (1 << 64) - 1
                v = (u >> 1) ^ -(u & 1)
                if max_bytes == _MAX_VARINT_BYTES:
                    v = ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)  # 32-bit wrap, as Java's int
                return v, p + k + 1
        raise _walk_error(position, i, f"{what} varint is longer than {max_bytes} bytes")

    for i in range(first, count):
        if pos >= end:
            raise _walk_error(
                position,
                i,
                "the record starts past the end of the records section (recordsCount or a record length is wrong)",
            )
        try:
            length, p = varint(pos, end, _MAX_VARINT_BYTES, "record length", i)
        except CorruptRecordError as exc:
            if "runs past" not in str(exc):
                raise
            raise _walk_error(
                position,
                i,
                "the record runs past the end of the records section (recordsCount or a record length is wrong)",
            ) from None
        if length < 0:
            raise _walk_error(position, i, "negative record length")
        if length > end - p:
            raise _walk_error(
                position,
                i,
                f"the record runs {length - (end - p)} bytes past the end of the records section (recordsCount "
                "or a record length is wrong)",
            )
        rec_end = p + length
        if p >= rec_end:
            raise _walk_error(position, i, "attributes run past the end of the record")
        p += 1
        _, p = varint(p, rec_end, _MAX_VARLONG_BYTES, "timestampDelta", i)
        offset_delta, p = varint(p, rec_end, _MAX_VARINT_BYTES, "offsetDelta", i)
        for what in ("key", "value"):
            n, p = varint(p, rec_end, _MAX_VARINT_BYTES, f"{what} length", i)
            if n < -1:
                raise _walk_error(position, i, f"{what} length below -1")
            if n > rec_end - p:
                raise _walk_error(position, i, f"{what} runs past the end of the record")
            p += max(n, 0)
        headers, p = varint(p, rec_end, _MAX_VARINT_BYTES, "headers count", i)
        if headers < 0 or headers * 2 > rec_end - p:
            raise _walk_error(position, i, "headers count is negative or larger than the record can hold")
        for _ in range(headers):
            n, p = varint(p, rec_end, _MAX_VARINT_BYTES, "header key length", i)
            if n < 0:
                raise _walk_error(position, i, "negative header key length")
            if n > rec_end - p:
                raise _walk_error(position, i, "header key runs past the end of the record")
            try:
                bytes(view[p : p + n]).decode()
            except UnicodeDecodeError:
                raise _walk_error(position, None, "a record header key is not valid UTF-8") from None
            p += n
            n, p = varint(p, rec_end, _MAX_VARINT_BYTES, "header value length", i)
            if n < -1:
                raise _walk_error(position, i, "header value length below -1")
            if n > rec_end - p:
                raise _walk_error(position, i, "header value runs past the end of the record")
            p += max(n, 0)
        if p != rec_end:
            raise _walk_error(position, i, "record length does not match the fields it holds")
        if offset_delta != i:
            raise _walk_error(position, i, "offsetDelta is not the record's index in the batch")
        pos = rec_end
    if pos != end:
        raise _walk_error(
            position,
            count - 1 if count else None,
            f"{end - pos} bytes remain of the records section after its {count} records (recordsCount or a "
            "record length is wrong)",
        )


@functools.lru_cache(maxsize=8)
def _index_varints(first: int, k: int) -> tuple[np.ndarray, tuple[tuple[int, np.ndarray], ...]]:
    """The varint encodings of the record indexes ``first .. first + k - 1`` (what each offsetDelta must be):
    (sizes, and per byte m of the encodings the first row that has such a byte with the bytes from there).
    Sizes grow with the index, so the rows with an m-th byte are a suffix. Cached: batches of one records
    count share them. Read-only arrays."""
    u = _zigzag(np.arange(first, first + k, dtype=np.int64))
    sizes = _uvarint_sizes(u)
    sizes.flags.writeable = False
    columns = []
    for m in range(int(sizes.max()) if k else 0):
        row = int(np.searchsorted(sizes, m + 1))  # first row whose encoding has byte m
        group = (u[row:] >> np.uint64(7 * m)) & np.uint64(0x7F)
        col = (group | (sizes[row:] > m + 1).astype(np.uint64) << np.uint64(7)).astype(np.uint8)
        col.flags.writeable = False
        columns.append((row, col))
    return sizes, tuple(columns)


def _index_varint_matches(a: np.ndarray, pos: np.ndarray, first: int, k: int) -> np.ndarray | None:
    """The sizes of the offsetDelta varints at ``pos`` when they are exactly the encodings of the record indexes
    ``first ..`` (compared byte for byte with :func:`_index_varints`, no decoding), else None."""
    sizes, columns = _index_varints(first, k)
    for m, (row, col) in enumerate(columns):
        if not np.array_equal(a.take(pos[row:] + m, mode="clip"), col):
            return None
    return sizes


#: :func:`_record_chain`: a speculative round guesses at most this many starts at first, four times more after
#: a round whose guesses all held; one that keeps fewer than :data:`_SPECULATE_MIN` (sizes vary) hands the next
#: records to the Python walk, in runs that grow with each such round in a row (:data:`_WALK_RUNS`).
_SPECULATE_WINDOW = 64
_SPECULATE_MIN = 32
_WALK_RUNS = (1, 16, 4096)
#: Chunks of fewer records are walked in Python at once: a speculative round costs about as much as walking
#: a few hundred records.
_SPECULATE_FROM = 256


def _record_chain(
    a: np.ndarray, data: bytes | bytearray | memoryview, pos: int, k: int, first: int, position: int
) -> tuple[np.ndarray, int]:
    """The starts of the next ``k`` records from ``pos`` (record ``first`` onwards) and the end of the last.

    Record boundaries are a chain (each record starts with its length), so they are found by speculation that
    numpy verifies: from a known start whose length varint is read (size s, record size ``stride``), guess that
    the following records have the same size, and keep the guesses while the s bytes at each guessed start are
    the very bytes of that varint (compared over strided views of the data): a record whose length varint is
    byte for byte the same has the same size, so every kept start follows from a verified one and the result
    is exact whatever the data. Records of one size -- most batches -- cost a few rounds per chunk; when a
    round keeps few records, :func:`_walk_lengths` reads the next ones in Python (see :data:`_WALK_RUNS`).
    Any anomaly (a varint longer than 5 bytes, a start past the end) is left to the walk, whose errors name
    the record. A length is read as the walk reads it: unsigned, the record size being ``s + (u >> 1)``
    (a negative length is caught by the vectorized checks afterwards).
    """
    end = len(a)
    out = np.empty(k, dtype=np.int64)
    done = 0
    walk_next = 0  # records for the Python walk before the next speculative round
    walk_bytes: bytes | None = None
    window = _SPECULATE_WINDOW
    poor = 0  # speculative rounds in a row that kept few records
    while done < k:
        left = k - done
        if k >= _SPECULATE_FROM and left >= _SPECULATE_MIN and not walk_next:
            # The length varint of the record at pos, read as the walk reads it; anomalies go to the walk.
            size = 0
            u = 0
            while size < _MAX_VARINT_BYTES and pos + size < end:
                byte = int(a[pos + size])
                u |= (byte & 0x7F) << (7 * size)
                size += 1
                if byte < 0x80:
                    break
            else:
                walk_next = 1
                continue
            stride = size + (u >> 1)
            guesses = min(left, window, (end - size - pos) // stride + 1)
            # Record j of the round starts at pos + j * stride if every record before it has the very bytes
            # of this length varint (the same size): compare them over strided views (no index arrays).
            stop = pos + stride * (guesses - 1) + 1
            same = a[pos:stop:stride] == a[pos]
            for m in range(1, size):
                same &= a[pos + m : stop + m : stride] == a[pos + m]
            kept = guesses if same.all() else int(np.argmin(same))  # >= 1: record 0 matches itself
            out[done : done + kept] = pos + stride * np.arange(kept, dtype=np.int64)
            done += kept
            pos += stride * kept
            if kept == guesses:
                window *= 4
                poor = 0
            elif kept < _SPECULATE_MIN:
                walk_next = _WALK_RUNS[min(poor, len(_WALK_RUNS) - 1)]  # sizes vary: read on in Python
                poor += 1
                window = _SPECULATE_WINDOW
            else:
                poor = 0
            continue
        n_walk = (
            min(left, walk_next) if walk_next and k >= _SPECULATE_FROM and left >= _SPECULATE_MIN else left
        )
        if walk_bytes is None:
            walk_bytes = data if isinstance(data, bytes) else bytes(data)
        run: list[int] = []
        pos = _walk_lengths(walk_bytes, pos, n_walk, first + done, position, run)
        out[done : done + n_walk] = run
        done += n_walk
        walk_next = 0
    return out, pos


def _walk_lengths(data: bytes, pos: int, k: int, first: int, position: int, out: list[int]) -> int:
    """Append the starts of the next ``k`` records from ``pos`` (record ``first`` onwards); return the end.

    The hot loop of :func:`scan_records`: only the length varint of each record is read (as unsigned: a
    negative length is caught by the vectorized checks), and reading past the section raises IndexError.
    """
    i = first
    try:
        for i in range(first, first + k):
            out.append(pos)
            b = data[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)
                continue
            u = b & 0x7F
            shift = 7
            q = pos + 1
            while True:
                b = data[q]
                q += 1
                u |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift >= 7 * _MAX_VARINT_BYTES:
                    exc = CorruptRecordError(
                        f"batch at position {position}, record {i}: record length varint is longer than "
                        f"{_MAX_VARINT_BYTES} bytes"
                    )
                    exc.record_index = i
                    raise exc
            pos = q + (u >> 1)
    except IndexError:
        exc = CorruptRecordError(
            f"batch at position {position}, record {i}: the record starts past the end of the records section "
            "(recordsCount or a record length is wrong)"
        )
        exc.record_index = i
        raise exc from None
    return pos


def _check_utf8_keys(arena_buf: pa.Buffer, bounds: np.ndarray, position: int) -> None:
    """Header keys (rows of [start, end) in the arena) must be valid UTF-8: this module's decoder reads them as
    strings."""
    flat = bounds[np.argsort(bounds[:, 0], kind="stable")].ravel()  # keys in arena order: monotone offsets
    pieces = _pieces(arena_buf, flat)
    pick = np.zeros(len(flat) - 1, dtype=bool)
    pick[0::2] = True
    keys = pieces.filter(pa.array(pick)).cast(pa.binary())
    as_text = pa.Array.from_buffers(pa.string(), len(keys), keys.buffers(), offset=keys.offset)
    try:
        as_text.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise CorruptRecordError(
            f"batch at position {position}: a record header key is not valid UTF-8"
        ) from exc
