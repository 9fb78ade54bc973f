"""Compression codecs of Kafka record batches (attribute bits 0-2), sans-IO: bytes in, bytes out.

The whole records section of a batch (everything after the 61-byte header) is compressed as ONE stream:

    id  name     stream format written                         read
    0   none     the bytes themselves                          same
    1   gzip     one RFC 1952 gzip member (zlib, level 6 =     one or more concatenated gzip members
                 Java's Deflater default)
    2   snappy   xerial framing, as snappy-java's              xerial framing (concatenated streams too)
                 SnappyOutputStream writes it for Kafka's      or one raw snappy block (librdkafka and
                 Java client (see below)                       some other clients write raw snappy)
    3   lz4      LZ4 frame (v1.5.1): 64 KiB independent        any LZ4 frame lz4.frame reads
                 blocks, no checksums, no content size
    4   zstd     one zstd frame (level 3, Kafka's default)     concatenated zstd frames, with or without
                                                               the content size in the frame header

Xerial snappy framing (big-endian)::

    offset  field
    0       magic     8 bytes: 0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
    8       version   int32 = 1
    12      compat    int32 = 1   (readers ignore version/compat: some writers store them little-endian)
    16      chunks    repeated [int32 compressed length][raw snappy block of <= 32 KiB uncompressed input]

Bounded decompression: :func:`decompress` takes ``max_size``, the most bytes the section may expand to. Output
is produced in pieces and the call stops with :class:`DecompressionLimitError` as soon as it would pass the
bound, so a small "bomb" (8 KiB of zstd that expands to 256 MiB) never costs more than about ``max_size`` of
memory: gzip and lz4 ask their decompressor for at most the bytes still allowed; snappy reads each raw block's
declared length (its varint preamble) before decompressing it; zstd (whose one-shot decompressor has no output
limit) first reads each frame through a bounded stream reader, which proves the frame fits, and only then
decompresses it in one call to find where the frame ends (a truncated frame, trailing bytes). Bounded
decoders are asked for at most 1 MiB per call, as lz4 and zstd allocate what is asked up front.

Errors: an unknown codec id raises :class:`UnsupportedVersionError`; any input the codec cannot decode
(bad magic, truncated stream, checksum failure, trailing bytes that are not another stream) raises
:class:`CorruptRecordError` -- never a zlib/lz4/zstd/cramjam exception. Module-level functions only;
thread-safe (no shared mutable state: compressor objects are created per call).
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame as _lz4f
import zstandard as _zstd

from broker_runtime.errors import (
    ConfigError,
    CorruptRecordError,
    DecompressionLimitError,
    UnsupportedVersionError,
)

__all__ = [
    "CODEC_NAMES",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "XERIAL_BLOCK_SIZE",
    "XERIAL_HEADER",
    "ZSTD",
    "codec_from_name",
    "codec_name",
    "compress",
    "decompress",
]

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES: dict[str, int] = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
_NAMES_BY_ID = {v: k for k, v in CODEC_NAMES.items()}

#: Default levels (gzip: Java's Deflater default 6; zstd: 3, zstd's and Kafka's default). LZ4 uses the fast
#: compressor (level 0); another level only changes the compressed bytes, never the frame format.
GZIP_DEFAULT_LEVEL = 6
ZSTD_DEFAULT_LEVEL = 3
LZ4_DEFAULT_LEVEL = 0

#: snappy-java's header: magic (8 bytes), version int32 1, minimum compatible version int32 1.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_STRUCT = struct.Struct(">8sii")
XERIAL_HEADER = XERIAL_HEADER_STRUCT.pack(_XERIAL_MAGIC, 1, 1)
#: Uncompressed bytes per xerial chunk: snappy-java's SnappyOutputStream default (32 KiB).
XERIAL_BLOCK_SIZE = 32 * 1024
_CHUNK_LENGTH = struct.Struct(">i")

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip container, no zlib header
_GZIP_MAGIC = b"\x1f\x8b"

Data = bytes | bytearray | memoryview


def codec_from_name(name: str) -> int:
    """Codec id of a ``compression.type`` value ("none", "gzip", "snappy", "lz4", "zstd"; case-insensitive)."""
    codec = CODEC_NAMES.get(name.strip().lower()) if isinstance(name, str) else None
    if codec is None:
        raise ConfigError(
            f"compression.type {name!r} is not supported; allowed values: {', '.join(CODEC_NAMES)}"
        )
    return codec


def codec_name(codec: int) -> str:
    """The name of a codec id; :class:`UnsupportedVersionError` for an unknown id."""
    try:
        return _NAMES_BY_ID[codec]
    except KeyError:
        raise UnsupportedVersionError(
            f"compression codec id {codec} is not supported; known ids: "
            + ", ".join(f"{i} {n}" for i, n in _NAMES_BY_ID.items())
        ) from None


# --------------------------------------------------------------------------------------------- compress


def compress(codec: int, data: Data, *, level: int | None = None) -> bytes:
    """Compress a records section with ``codec`` (0 returns the bytes unchanged).

    ``level`` overrides the codec's default level (gzip 1-9, lz4 0-16, zstd 1-22; ignored for snappy).
    """
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        co = zlib.compressobj(GZIP_DEFAULT_LEVEL if level is None else level, zlib.DEFLATED, _GZIP_WBITS)
        return co.compress(data) + co.flush()
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return _lz4f.compress(
            data,
            compression_level=LZ4_DEFAULT_LEVEL if level is None else level,
            block_size=_lz4f.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == ZSTD:
        return _zstd.ZstdCompressor(level=ZSTD_DEFAULT_LEVEL if level is None else level).compress(data)
    codec_name(codec)  # raises UnsupportedVersionError
    raise AssertionError("unreachable")


def _xerial_compress(data: Data) -> bytes:
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(mv), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(mv[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_CHUNK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


# ------------------------------------------------------------------------------------------- decompress

#: The most output asked of a bounded decompressor in one call (lz4.frame and zstd's reader allocate what is
#: asked before decompressing).
_PIECE = 1024 * 1024


class _Budget:
    """The output bytes still allowed (None: unbounded); :meth:`take` raises once they are exceeded."""

    __slots__ = ("codec", "left", "limit")

    def __init__(self, codec: str, limit: int | None) -> None:
        self.codec = codec
        self.limit = limit
        self.left = -1 if limit is None else limit

    def take(self, produced: int) -> None:
        if self.limit is None:
            return
        self.left -= produced
        if self.left < 0:
            raise DecompressionLimitError(
                f"{self.codec}: the records section expands beyond the {self.limit}-byte bound "
                "on decompressed records",
                limit=self.limit,
            )

    @property
    def max_length(self) -> int:
        """For decompressors that take an output limit: one byte more than allowed (0 = unlimited)."""
        return 0 if self.limit is None else self.left + 1


def decompress(codec: int, data: Data, max_size: int | None = None) -> bytes:
    """Decompress a records section written with ``codec``; :class:`CorruptRecordError` on bad input.

    With ``max_size``, output beyond that many bytes raises :class:`DecompressionLimitError` without being
    produced (see the module docstring).
    """
    if codec == NONE:
        return bytes(data)
    if max_size is not None and max_size < 0:
        raise ValueError(f"max_size {max_size} is negative")
    if codec == GZIP:
        return _gzip_decompress(data, _Budget("gzip", max_size))
    if codec == SNAPPY:
        return _snappy_decompress(data, _Budget("snappy", max_size))
    if codec == LZ4:
        return _lz4_decompress(data, _Budget("lz4", max_size))
    if codec == ZSTD:
        return _zstd_decompress(data, _Budget("zstd", max_size))
    codec_name(codec)  # raises UnsupportedVersionError
    raise AssertionError("unreachable")


def _gzip_decompress(data: Data, budget: _Budget) -> bytes:
    out: list[bytes] = []
    rest: bytes | memoryview = memoryview(data)
    member = 0
    while True:
        d = zlib.decompressobj(_GZIP_WBITS)
        try:
            piece = d.decompress(rest, budget.max_length)
            budget.take(len(piece))
            out.append(piece)
            while d.unconsumed_tail:
                piece = d.decompress(d.unconsumed_tail, budget.max_length)
                budget.take(len(piece))
                out.append(piece)
            if not d.eof:
                piece = d.flush()
                budget.take(len(piece))
                out.append(piece)
        except zlib.error as exc:
            raise CorruptRecordError(f"gzip member {member}: {exc}") from None
        if not d.eof:
            raise CorruptRecordError(f"gzip member {member}: stream is truncated (no end of member)")
        rest = d.unused_data
        if not rest:
            return b"".join(out)
        if rest[:2] != _GZIP_MAGIC:
            raise CorruptRecordError(
                f"gzip: {len(rest)} bytes after member {member} are not another gzip member"
            )
        member += 1


def _snappy_block_length(mv: memoryview, where: str) -> int:
    """The uncompressed length a raw snappy block declares (its unsigned LEB128 preamble)."""
    value = 0
    for i in range(min(5, len(mv))):
        b = mv[i]
        value |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return value
    raise CorruptRecordError(f"snappy ({where}): the block's length preamble is not a valid varint")


def _snappy_raw(block: memoryview, budget: _Budget, where: str) -> bytes:
    budget.take(_snappy_block_length(block, where))
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except Exception as exc:  # cramjam.DecompressionError and friends
        raise CorruptRecordError(f"snappy ({where}): {exc}") from None


def _snappy_decompress(data: Data, budget: _Budget) -> bytes:
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    if len(mv) >= XERIAL_HEADER_STRUCT.size and mv[:8] == _XERIAL_MAGIC:
        return _xerial_decompress(mv, budget)
    return _snappy_raw(mv, budget, f"raw block of {len(mv)} bytes")


def _xerial_decompress(mv: memoryview, budget: _Budget) -> bytes:
    out: list[bytes] = []
    pos = XERIAL_HEADER_STRUCT.size
    end = len(mv)
    while pos < end:
        # snappy-java also reads concatenated streams: a new header may follow a chunk.
        if end - pos >= XERIAL_HEADER_STRUCT.size and mv[pos : pos + 8] == _XERIAL_MAGIC:
            pos += XERIAL_HEADER_STRUCT.size
            continue
        if end - pos < 4:
            raise CorruptRecordError(
                f"snappy (xerial): {end - pos} bytes at position {pos} cannot hold a chunk length"
            )
        (length,) = _CHUNK_LENGTH.unpack_from(mv, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"snappy (xerial): chunk length {length} at position {pos - 4} exceeds the "
                f"{end - pos} bytes left"
            )
        out.append(_snappy_raw(mv[pos : pos + length], budget, f"xerial chunk at position {pos - 4}"))
        pos += length
    return b"".join(out)


def _lz4_decompress(data: Data, budget: _Budget) -> bytes:
    # lz4.frame's chunk API over slices of one memoryview: no copy of the input (the LZ4FrameDecompressor
    # wrapper copies a memoryview input and every unconsumed tail).
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    out: list[bytes] = []
    pos = 0
    end = len(mv)
    frame = 0
    while True:
        context = _lz4f.create_decompression_context()
        eof = False
        try:
            while True:
                # lz4.frame allocates max_length up front: ask in pieces of at most _PIECE.
                ask = -1 if budget.limit is None else min(budget.max_length, _PIECE)
                piece, used, eof = _lz4f.decompress_chunk(context, mv[pos:], max_length=ask)
                pos += used
                budget.take(len(piece))
                out.append(piece)
                if eof or pos >= end or not (used or piece):
                    break
        except RuntimeError as exc:  # lz4.frame reports every decoding failure as RuntimeError
            raise CorruptRecordError(f"lz4 frame {frame}: {exc}") from None
        if not eof:
            raise CorruptRecordError(f"lz4 frame {frame}: stream is truncated (no end mark)")
        if pos >= end:
            return out[0] if len(out) == 1 else b"".join(out)
        frame += 1


def _zstd_decompress(data: Data, budget: _Budget) -> bytes:
    out: list[bytes] = []
    rest: bytes | memoryview = memoryview(data)
    frame = 0
    dctx = _zstd.ZstdDecompressor()
    while True:
        try:
            if budget.limit is not None:
                # First a bounded pass over this frame (the reader stops at its end and never returns more
                # than asked): it proves the frame's output fits what is still allowed ...
                reader = dctx.stream_reader(rest, read_across_frames=False)
                while piece := reader.read(min(budget.max_length, _PIECE)):
                    budget.take(len(piece))
            # ... then the pass that finds the frame's end (truncation, trailing bytes), now bounded too.
            d = dctx.decompressobj()
            out.append(d.decompress(rest))
        except _zstd.ZstdError as exc:
            raise CorruptRecordError(f"zstd frame {frame}: {exc}") from None
        if not d.eof:
            raise CorruptRecordError(f"zstd frame {frame}: stream is truncated (frame not finished)")
        rest = d.unused_data
        if not rest:
            return b"".join(out)
        frame += 1
