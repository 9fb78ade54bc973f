"""MurmurHash2 exactly as Kafka's Java client computes it (``Utils.murmur2``), scalar and vectorized.

Algorithm (32-bit, all arithmetic wrapping modulo 2**32, result read as a signed int32)::

    seed = 0x9747b28c, m = 0x5bd1e995, r = 24
    h = seed ^ len(data)
    for each whole 4-byte block k (little-endian uint32), in order:
        k *= m; k ^= k >>> r; k *= m
        h *= m; h ^= k
    tail (len % 4 bytes at the end), falling through:
        3: h ^= tail[2] << 16
        2: h ^= tail[1] << 8
        1: h ^= tail[0]; h *= m
    h ^= h >>> 13; h *= m; h ^= h >>> 15

Kafka's default partitioner places a keyed record on ``(murmur2(key) & 0x7fffffff) % num_partitions``
(``Utils.toPositive``). Pinned by Kafka's tests: murmur2(b"21") == -973932308, murmur2(b"foobar") == -790332482.

Vectorized form: the keys of a pyarrow binary/string column are hashed with numpy uint32 arithmetic, one
numpy operation per 4-byte block column (never a Python loop per key). Blocks are read through a
"uint32 at every byte position" strided view of the column's data buffer, so no per-key copies are
made; keys are ordered by block count so the keys that still have block ``j`` form a prefix. Pure
functions; thread-safe.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from broker_runtime.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "M",
    "R",
    "SEED",
    "murmur2",
    "murmur2_array",
    "partition_for_key",
    "partitions_for_keys",
    "to_positive",
]

SEED = 0x9747B28C
M = 0x5BD1E995
R = 24
_MASK32 = 0xFFFFFFFF

_M_U32 = np.uint32(M)
_SEED_U32 = np.uint32(SEED)


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 of ``data`` as a signed int32 (same value Java's ``Utils.murmur2`` returns)."""
    mv = memoryview(data).cast("B")
    length = len(mv)
    h = (SEED ^ length) & _MASK32
    nblocks = length >> 2
    if nblocks:
        for k in mv[: nblocks * 4].cast("I") if _LITTLE else _blocks_be(mv, nblocks):
            k = (k * M) & _MASK32
            k ^= k >> R
            k = (k * M) & _MASK32
            h = ((h * M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        base = nblocks * 4
        if tail == 3:
            h ^= mv[base + 2] << 16
        if tail >= 2:
            h ^= mv[base + 1] << 8
        h ^= mv[base]
        h = (h * M) & _MASK32
    h ^= h >> 13
    h = (h * M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


_LITTLE = memoryview(b"\x01\x00\x00\x00").cast("I")[0] == 1


def _blocks_be(mv: memoryview, nblocks: int) -> list[int]:  # pragma: no cover - big-endian hosts only
    return [int.from_bytes(mv[i * 4 : i * 4 + 4], "little") for i in range(nblocks)]


def to_positive(x: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return x & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    if num_partitions <= 0:
        raise InvalidArgumentError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# ------------------------------------------------------------------------------------------ vectorized


def _layout(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(data uint8, starts int64, lengths int64, null mask or None) of a binary-like array."""
    t = arr.type
    if pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        arr = arr.cast(pa.large_binary())
        t = arr.type
    n = len(arr)
    nulls = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
    buffers = arr.buffers()
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        data = _as_u8(buffers[1])
        starts = (np.arange(n, dtype=np.int64) + arr.offset) * width
        lengths = np.full(n, width, dtype=np.int64)
        return data, starts, lengths, nulls
    if pa.types.is_binary(t) or pa.types.is_string(t):
        off_dtype: type[np.signedinteger] = np.int32
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        off_dtype = np.int64
    else:
        raise InvalidTypeError(f"murmur2 keys must be binary, large_binary, string or large_string, not {t}")
    offsets = np.frombuffer(buffers[1], dtype=off_dtype)[arr.offset : arr.offset + n + 1].astype(np.int64)
    first = int(offsets[0])
    data = _as_u8(buffers[2])[first : int(offsets[-1])]
    starts = offsets[:-1] - first
    lengths = offsets[1:] - offsets[:-1]
    if nulls is not None:
        lengths = np.where(nulls, 0, lengths)
    return data, starts, lengths, nulls


def _u32_at_every_byte(data: np.ndarray) -> np.ndarray:
    """A read-only view whose element ``i`` is the little-endian uint32 at byte ``i`` of ``data``."""
    count = max(len(data) - 3, 0)
    return np.ndarray(shape=(count,), dtype="<u4", buffer=data, offset=0, strides=(1,))


def _finish(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint32(13)
    h *= _M_U32
    h ^= h >> np.uint32(15)
    return h.view(np.int32)


def _hash_equal_length(data: np.ndarray, start: int, n: int, length: int) -> np.ndarray:
    """Hashes of ``n`` keys of ``length`` bytes packed back to back from byte ``start`` of ``data``.

    The blocks form an (n, length // 4) strided uint32 matrix over the buffer: all blocks are mixed in
    three whole-matrix operations, then folded into ``h`` column by column.
    """
    nblocks = length >> 2
    h = np.full(n, (SEED ^ length) & _MASK32, dtype=np.uint32)
    if nblocks and n:
        blocks = np.ndarray(shape=(n, nblocks), dtype="<u4", buffer=data, offset=start, strides=(length, 4))
        k = blocks * _M_U32
        k ^= k >> np.uint32(R)
        k *= _M_U32
        for j in range(nblocks):
            h *= _M_U32
            h ^= k[:, j]
    tail = length & 3
    if tail and n:

        def column(i: int) -> np.ndarray:
            return np.ndarray(
                shape=(n,), dtype=np.uint8, buffer=data, offset=start + nblocks * 4 + i, strides=(length,)
            )

        if tail == 3:
            h ^= column(2).astype(np.uint32) << np.uint32(16)
        if tail >= 2:
            h ^= column(1).astype(np.uint32) << np.uint32(8)
        h ^= column(0)
        h *= _M_U32
    return _finish(h)


def _hash_layout(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Hashes of the keys ``data[starts[i] : starts[i] + lengths[i]]`` of any lengths."""
    n = len(starts)
    h = lengths.astype(np.uint32) ^ _SEED_U32
    if n == 0:
        return h.view(np.int32)
    nblocks = lengths >> 2
    max_blocks = int(nblocks.max())
    # Three zero bytes of padding let every key's tail be read as one (masked) little-endian word.
    padded = np.zeros(len(data) + 4, dtype=np.uint8)
    padded[: len(data)] = data
    words = _u32_at_every_byte(padded)
    if max_blocks and not (nblocks == max_blocks).all():
        # Order keys by block count, descending: the keys still having block j are a prefix.
        key_dtype = np.uint8 if max_blocks < 256 else np.uint16 if max_blocks < 65536 else np.int64
        order: np.ndarray | None = np.argsort((max_blocks - nblocks).astype(key_dtype), kind="stable")
        s = starts[order]
        h = h[order]
        lengths = lengths[order]
        counts = np.bincount(nblocks, minlength=max_blocks + 1)
        have = n - np.cumsum(counts)  # have[j] = number of keys with more than j blocks
    else:
        order = None
        s = starts
        have = np.full(max_blocks, n)
    k = np.empty(n, dtype=np.uint32)
    for j in range(max_blocks):
        c = int(have[j])
        _mix_block(h[:c], words[s[:c] + 4 * j], k[:c])
    # Tail: XOR-ing bytes 2, 1, 0 (falling through) is XOR-ing the tail's little-endian word.
    tail = lengths & 3
    tail_word = words[s + (lengths - tail)] & _TAIL_MASKS[tail]
    h ^= tail_word
    np.multiply(h, _M_U32, out=h, where=tail != 0)
    h = _finish(h).view(np.uint32)
    if order is not None:
        out = np.empty_like(h)
        out[order] = h
        h = out
    return h.view(np.int32)


_TAIL_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)


def _mix_block(h: np.ndarray, block: np.ndarray, k: np.ndarray) -> None:
    """h = (h * m) ^ mix(block), in place; ``k`` is scratch of h's length."""
    np.multiply(block, _M_U32, out=k)
    k ^= k >> np.uint32(R)
    k *= _M_U32
    h *= _M_U32
    h ^= k


def murmur2_array(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Kafka's murmur2 of every key (int32, same values as :func:`murmur2`); null slots give 0.

    Accepts binary, large_binary, string, large_string (also their view types and fixed_size_binary),
    as an Array or ChunkedArray. Strings are hashed as their UTF-8 bytes, as Kafka's StringSerializer sends.
    """
    if isinstance(keys, pa.ChunkedArray):
        if keys.num_chunks == 0:
            return np.zeros(0, dtype=np.int32)
        return np.concatenate([murmur2_array(c) for c in keys.chunks])
    if keys.null_count == 0:
        packed = _packed_equal_length(keys)
        if packed is not None:
            data, first, length = packed
            return _hash_equal_length(data, first, len(keys), length)
    data, starts, lengths, nulls = _layout(keys)
    out = _hash_layout(data, starts, lengths)  # null slots have length 0 here
    if nulls is not None:
        out[nulls] = 0
    return out


def _packed_equal_length(arr: pa.Array) -> tuple[np.ndarray, int, int] | None:
    """(data, first key's start, key length) when every key of ``arr`` has the same length, else None."""
    t = arr.type
    n = len(arr)
    buffers = arr.buffers()
    if n == 0:
        return None
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        return _as_u8(buffers[1]), arr.offset * width, width
    if pa.types.is_binary(t) or pa.types.is_string(t):
        off_dtype: type[np.signedinteger] = np.int32
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        off_dtype = np.int64
    else:
        return None
    offsets = np.frombuffer(buffers[1], dtype=off_dtype)[arr.offset : arr.offset + n + 1]
    first, last = int(offsets[0]), int(offsets[-1])
    length, rem = divmod(last - first, n)
    if rem or not (offsets[1:] - offsets[:-1] == length).all():
        return None
    return _as_u8(buffers[2]), first, length


def _as_u8(buf: pa.Buffer | None) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.uint8) if buf is not None else np.zeros(0, np.uint8)


def partitions_for_keys(keys: pa.Array | pa.ChunkedArray, num_partitions: int) -> np.ndarray:
    """Kafka's default-partitioner partition of every key (int32); null keys give -1 (sticky: caller's choice)."""
    if num_partitions <= 0:
        raise InvalidArgumentError(f"num_partitions must be positive, got {num_partitions}")
    hashes = murmur2_array(keys)
    parts = (hashes & np.int32(0x7FFFFFFF)) % np.int32(num_partitions)
    parts = parts.astype(np.int32, copy=False)
    if keys.null_count:
        nulls = keys.is_null()
        if isinstance(nulls, pa.ChunkedArray):
            nulls = pa.concat_arrays(nulls.chunks) if nulls.num_chunks else pa.array([], pa.bool_())
        parts[nulls.to_numpy(zero_copy_only=False)] = -1
    return parts
