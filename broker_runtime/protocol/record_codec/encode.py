"""Vectorized RecordBatch (magic 2) builder over Apache Arrow arrays; sans-IO.

The writer's hot path: :func:`build_batches` turns pyarrow columns (values, keys, headers, timestamps) into
Kafka record batches ready to produce, without a Python loop per record. The record format is that of
:mod:`.format`; the batch header that of :mod:`broker_runtime.protocol.batch_header`.

Builder conventions (those of Kafka's Java ``MemoryRecordsBuilder``): baseOffset 0, partitionLeaderEpoch -1,
baseTimestamp = the FIRST record's timestamp, timestampDelta relative to it (may be negative),
maxTimestamp = the largest timestamp, offsetDelta = index within the batch, record attributes 0,
lastOffsetDelta = count - 1, CRC-32C over [attributes, end). ``max_batch_bytes`` bounds the UNCOMPRESSED
size of each batch (header included) like the producer's ``batch.size``: a record joins the current batch
while 61 + the records' sizes stays within the bound; a record that does not fit even alone gets a batch of
its own. The requested codec is always used (Java does not fall back to "none" when compression does not
pay off). With a base sequence, each batch starts at the previous one's plus its record count, wrapping
after int32 max to 0 as Kafka does.

Two encoders, byte-identical (tests/protocol/test_record_codec.py compares them), chosen by :mod:`.walks`:
  * compiled (``_recordwalk.split`` and ``_recordwalk.encode``): sizes and splits the rows in one pass and
    writes every record in a second pass straight from the Arrow offsets and data buffers into one bytes
    object;
  * numpy (the fallback): every varint field is computed with numpy (zigzag, then LEB128 into an (n, width)
    uint8 matrix plus a byte-count vector, compacted with a boolean mask into one buffer + offsets, i.e. an
    Arrow binary array made with ``pa.Array.from_buffers``); Arrow's C++ ``binary_join_element_wise`` then
    concatenates [varint prefix, key, valueLength, value, headersCount, header blob] per record. The joined
    array's data buffer, sliced by its offsets, IS the records section of each batch (zero copy).
Headers are encoded with Arrow on both (joined per header, then per record with ``binary_join``). Only
batches are iterated in Python (header, compression, CRC).

Bad input (a wrong type, a length mismatch, a null header key, an unknown codec) raises
:class:`~broker_runtime.errors.InvalidArgumentError` or :class:`~broker_runtime.errors.InvalidTypeError`
naming it.

Pure functions over immutable inputs; thread-safe (the compiled encoder releases the GIL while it writes).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_runtime.errors import InvalidArgumentError, InvalidTypeError
from broker_runtime.protocol import compression as _compression
from broker_runtime.protocol.batch_header import (
    ATTR_COMPRESSION_MASK,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    NO_SEQUENCE,
)
from broker_runtime.protocol.record_codec import walks
from broker_runtime.protocol.record_codec.format import INT32_MAX, unzigzag, uvarint_sizes, zigzag
from broker_runtime.protocol.records import assemble_batch, batch_header

__all__ = ["BuiltBatch", "build_batch", "build_batches"]

_PARTITION_LEADER_EPOCH_NONE = -1


@functools.cache
def _empty() -> pa.Scalar:
    """The empty large_binary separator of the joins, made on first use: building a pyarrow scalar or array
    imports pandas (pyarrow's pandas shim), which a process that only imports this module should not pay."""
    return pa.scalar(b"", pa.large_binary())


_LIST_TYPES = (pa.types.is_list, pa.types.is_large_list)


@dataclass(frozen=True, slots=True)
class BuiltBatch:
    """One encoded RecordBatch: ``data`` (header + possibly compressed records), ready to produce.

    ``first_row`` indexes the builder's input arrays; the batch holds rows
    ``[first_row, first_row + record_count)``. ``uncompressed_size`` = 61 + the records' bytes before
    compression (what ``max_batch_bytes`` bounds). ``group``: the index of the row group the batch belongs
    to (``group_starts`` of :func:`build_batches`; 0 without groups). ``data`` is a memoryview into one buffer
    shared by the call's batches when :func:`build_batches` ran with ``in_place``.
    """

    data: bytes | memoryview
    record_count: int
    first_row: int
    base_sequence: int
    uncompressed_size: int
    group: int = 0


class _Varints:
    """A column of zigzagged varint values and their encoded sizes (a builder field)."""

    __slots__ = ("sizes", "u")

    def __init__(self, values: np.ndarray) -> None:
        self.u = zigzag(values)
        self.sizes = uvarint_sizes(self.u)


def _varint_blob(fields: Sequence[_Varints], n: int, *, allow_scalar: bool = True) -> pa.Array | pa.Scalar:
    """One large_binary array whose element i is the concatenated LEB128 encodings of ``fields[*][i]``.

    Filled column by column into an (n, total width) uint8 matrix, then compacted with a boolean mask
    when some field has fewer bytes than its widest value. When every field holds one value in all rows
    (e.g. equal-length values, no headers) the result is a scalar, which the join broadcasts.
    """
    if allow_scalar and n and all(f.u[0] == f.u.min() == f.u.max() for f in fields):
        one = _varint_blob([_Varints(unzigzag(f.u[:1])) for f in fields], 1, allow_scalar=False)
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
    per_header = pc.binary_join_element_wise(
        *columns, _empty(), null_handling="replace", null_replacement=b""
    )
    list_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=list_offsets[1:])
    lists = pa.LargeListArray.from_arrays(pa.array(list_offsets), per_header)
    blob = pc.binary_join(lists, _empty())
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
    delta_sizes = uvarint_sizes(zigzag(np.arange(window, dtype=np.int64)))
    while start < n:
        while True:
            end = min(n, start + window)
            if len(delta_sizes) < end - start:
                delta_sizes = uvarint_sizes(zigzag(np.arange(2 * (end - start), dtype=np.int64)))
            body = per_row[start:end] + delta_sizes[: end - start]
            if not const_ts:
                body += uvarint_sizes(zigzag(ts[start:end] - ts[start]))
            # body > 0, so its zigzag is body << 1
            sizes = body + uvarint_sizes((body << 1).view(np.uint64))
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
    in_place: bool = False,
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

    ``in_place`` (uncompressed, compiled encoder; otherwise ignored): every batch is written where it ends up,
    its header in front of its records in one buffer from Arrow's memory pool, and returned as a memoryview
    of it, instead of header and records being joined into a fresh bytes object per batch. That saves a copy
    of every byte and, above all, the fresh pages: large transient bytes objects are mapped and unmapped by
    the C allocator, so each one is faulted in again (the writer's task spent as much system time on those
    faults as on encoding). The bytes are identical; the buffer lives as long as any of its batches.
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

    cwalk = walks.compiled
    rows = _Rows(ts, keys_arr, klen, vals, vlen, hblob, hcount, hbytes)
    in_place = in_place and cwalk is not None and compression == 0
    if cwalk is not None:
        gap = HEADER_SIZE if in_place else 0
        bounds, offsets, data = _encode_compiled(cwalk, starts, max_batch_bytes, rows, gap)
    else:
        bounds, offsets, data = _encode_numpy(starts, max_batch_bytes, rows)
    assemble = _assemble_in_place if in_place else _assemble
    attrs = compression | (ATTR_TRANSACTIONAL if is_transactional else 0)
    return assemble(offsets, data, bounds, ts, starts, sequences, attrs, producer_id, producer_epoch)


def _buffers(arr: pa.Array | None, n: int) -> tuple[np.ndarray, pa.Buffer | bytes]:
    """(the n + 1 offsets, the data buffer) of a large_binary array; empty ones for None."""
    if arr is None:
        return _NO_OFFSETS, b""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    return np.ascontiguousarray(offsets), (bufs[2] if bufs[2] is not None else b"")


_NO_OFFSETS = np.zeros(0, dtype=np.int64)


class _Rows(NamedTuple):
    """The encoders' input, one row a record: timestamps (int64 ms), keys and values (large_binary arrays or None
    when all null) with their lengths (-1 null), the encoded headers of each record (a large_binary array or
    None), their counts and bytes."""

    ts: np.ndarray
    keys: pa.Array | None
    klen: np.ndarray
    values: pa.Array | None
    vlen: np.ndarray
    hblob: pa.Array | None
    hcount: np.ndarray
    hbytes: np.ndarray


def _encode_compiled(
    cwalk: Any,
    starts: list[int],
    max_batch_bytes: int | None,
    rows: _Rows,
    gap: int = 0,
) -> tuple[np.ndarray, np.ndarray, memoryview]:
    """(batch bounds, n + 1 record offsets, records sections) by the compiled ``_recordwalk.split`` and
    ``encode``: two passes over the rows (sizes and split, then the bytes) straight from the Arrow buffers.
    With ``gap``: that many free bytes before each batch's records, in a buffer of Arrow's memory pool."""
    ts, keys_arr, klen, vals, vlen, hblob, hcount, hbytes = rows
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
    nb = cwalk.split(
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
    pooled = (gap, _pool_buffer) if gap else ()  # the records in Arrow's pool, a gap before each batch's
    data = cwalk.encode(
        bounds, ts, klen, koff, kdata, vlen, voff, vdata, hcount, hoff, hdata, offsets, *pooled
    )
    return bounds, offsets, memoryview(data)


def _pool_buffer(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes from Arrow's memory pool (unsigned bytes, so slices compare to bytes)."""
    return memoryview(pa.allocate_buffer(size)).cast("B")


def _encode_numpy(
    starts: list[int],
    max_batch_bytes: int | None,
    rows: _Rows,
) -> tuple[np.ndarray, np.ndarray, memoryview]:
    """(batch bounds, n + 1 record offsets, records sections) by numpy and Arrow compute (the fallback)."""
    ts, keys_arr, klen, vals, vlen, hblob, hcount, hbytes = rows
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
        joined = pc.binary_join_element_wise(
            *columns, _empty(), null_handling="replace", null_replacement=b""
        )
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64)[joined.offset : joined.offset + n + 1]
    data = memoryview(joined.buffers()[2])
    expected = int((lfield.sizes + body).sum())
    if int(offsets[-1] - offsets[0]) != expected:  # pragma: no cover - internal consistency
        raise AssertionError(
            f"joined records hold {int(offsets[-1] - offsets[0])} bytes, computed {expected}"
        )
    return bounds, offsets, data


def _spans(
    bounds: np.ndarray,
    ts: np.ndarray,
    starts: list[int],
    sequences: list[int],
    attrs: int,
    producer_id: int,
    producer_epoch: int,
) -> Iterator[tuple[int, int, int, int, dict[str, int]]]:
    """Per batch ``b``: its rows ``[s, e)``, its group, its base sequence and its header's fields (all but the
    records); sequences run on per group, wrapping at int32 as Kafka's producer's do."""
    max_ts = np.maximum.reduceat(ts, bounds[:-1])
    group = 0
    sequence = sequences[0]
    for b in range(len(bounds) - 1):
        s = int(bounds[b])
        e = int(bounds[b + 1])
        count = e - s
        if group + 1 < len(starts) and s >= starts[group + 1]:
            group += 1
            sequence = sequences[group]
        yield (
            s,
            e,
            group,
            sequence,
            {
                "base_offset": 0,
                "partition_leader_epoch": _PARTITION_LEADER_EPOCH_NONE,
                "attributes": attrs,
                "last_offset_delta": count - 1,
                "base_timestamp": int(ts[s]),
                "max_timestamp": int(max_ts[b]),
                "producer_id": producer_id,
                "producer_epoch": producer_epoch,
                "base_sequence": sequence,
                "records_count": count,
            },
        )
        if sequence != NO_SEQUENCE:
            sequence = (
                count - (INT32_MAX - sequence) - 1 if sequence > INT32_MAX - count else sequence + count
            )


def _assemble(
    offsets: np.ndarray,
    data: memoryview,
    bounds: np.ndarray,
    ts: np.ndarray,
    starts: list[int],
    sequences: list[int],
    attrs: int,
    producer_id: int,
    producer_epoch: int,
) -> list[BuiltBatch]:
    """Cut the records sections into batches: compression, header, CRC-32C (one loop step per batch)."""
    compression = attrs & ATTR_COMPRESSION_MASK
    out: list[BuiltBatch] = []
    for s, e, group, sequence, fields in _spans(
        bounds, ts, starts, sequences, attrs, producer_id, producer_epoch
    ):
        records = data[int(offsets[s]) : int(offsets[e])]
        payload: bytes | memoryview = (
            records if compression == 0 else _compression.compress(compression, records)
        )
        batch = assemble_batch(payload, **fields)
        out.append(BuiltBatch(batch, e - s, s, sequence, HEADER_SIZE + len(records), group))
    return out


def _assemble_in_place(
    offsets: np.ndarray,
    data: memoryview,
    bounds: np.ndarray,
    ts: np.ndarray,
    starts: list[int],
    sequences: list[int],
    attrs: int,
    producer_id: int,
    producer_epoch: int,
) -> list[BuiltBatch]:
    """:func:`_assemble` for uncompressed records written with a header-sized gap before each batch's records
    (``_recordwalk.encode``'s ``gap``): each header goes into its gap, each batch is a view of ``data``."""
    out: list[BuiltBatch] = []
    for b, (s, e, group, sequence, fields) in enumerate(
        _spans(bounds, ts, starts, sequences, attrs, producer_id, producer_epoch)
    ):
        at = int(offsets[s]) + b * HEADER_SIZE
        end = int(offsets[e]) + (b + 1) * HEADER_SIZE
        data[at : at + HEADER_SIZE] = batch_header(data[at + HEADER_SIZE : end], **fields)
        out.append(BuiltBatch(data[at:end].toreadonly(), e - s, s, sequence, end - at, group))
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
    return bytes(batches[0].data)  # the same object: in_place is off here
