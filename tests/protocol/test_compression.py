"""Compression codecs: round trips, kafka-python interop in both directions, xerial framing, corrupt input."""

from __future__ import annotations

import contextlib
import gzip
import os
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kcodec

from broker_runtime.errors import ConfigError, CorruptRecordError, UnsupportedVersionError
from broker_runtime.protocol.compression import (
    CODEC_NAMES,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    codec_from_name,
    compress,
    decompress,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED = [GZIP, SNAPPY, LZ4, ZSTD]

_RNG_DATA = os.urandom(70_000)
INPUTS = {
    "empty": b"",
    "one": b"x",
    "text": b"the quick brown fox jumps over the lazy dog " * 50,
    "random": _RNG_DATA,
    "large-repetitive": b"0123456789abcdef" * 300_000,  # 4.8 MB: many xerial chunks / lz4 blocks
    "mixed": _RNG_DATA[:40_000] + b"\x00" * 100_000,
}

KP_ENCODE = {
    GZIP: kcodec.gzip_encode,
    SNAPPY: kcodec.snappy_encode,
    LZ4: kcodec.lz4_encode,
    ZSTD: kcodec.zstd_encode,
}
KP_DECODE = {
    GZIP: kcodec.gzip_decode,
    SNAPPY: kcodec.snappy_decode,
    LZ4: kcodec.lz4_decode,
    ZSTD: kcodec.zstd_decode,
}


def test_codec_ids_and_names() -> None:
    assert (NONE, GZIP, SNAPPY, LZ4, ZSTD) == (0, 1, 2, 3, 4)
    assert CODEC_NAMES == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    for name, cid in CODEC_NAMES.items():
        assert codec_from_name(name) == cid
        assert codec_from_name(name.upper()) == cid


def test_codec_from_name_rejects_unknown_with_allowed_values() -> None:
    with pytest.raises(ConfigError, match="none, gzip, snappy, lz4, zstd"):
        codec_from_name("brotli")
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", list(INPUTS))
def test_round_trip(codec: int, name: str) -> None:
    data = INPUTS[name]
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    # memoryview / bytearray in and out
    assert decompress(codec, memoryview(compress(codec, bytearray(data)))) == data


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=5000), st.sampled_from(CODECS))
def test_round_trip_hypothesis(data: bytes, codec: int) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("name", ["one", "text", "random", "large-repetitive"])
def test_we_read_kafka_python_output(codec: int, name: str) -> None:
    data = INPUTS[name]
    assert decompress(codec, KP_ENCODE[codec](data)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("name", ["one", "text", "random", "large-repetitive"])
def test_kafka_python_reads_our_output(codec: int, name: str) -> None:
    data = INPUTS[name]
    assert KP_DECODE[codec](compress(codec, data)) == data


def test_gzip_is_a_standard_gzip_stream() -> None:
    data = INPUTS["text"]
    assert compress(GZIP, data)[:2] == b"\x1f\x8b"
    assert gzip.decompress(compress(GZIP, data)) == data


def test_gzip_concatenated_members() -> None:
    a, b = b"first member ", b"second member"
    assert decompress(GZIP, gzip.compress(a) + gzip.compress(b)) == a + b


def _xerial_reference(data: bytes, block: int = 32 * 1024) -> bytes:
    """snappy-java's SnappyOutputStream layout, built directly from the format description."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


@pytest.mark.parametrize("name", ["one", "text", "random", "large-repetitive"])
def test_snappy_writes_xerial_framing_like_snappy_java(name: str) -> None:
    data = INPUTS[name]
    packed = compress(SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    assert packed == _xerial_reference(data)
    # chunk walk: each chunk holds at most 32 KiB of input
    pos, total, chunks = 16, 0, 0
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        raw = bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n]))
        assert len(raw) <= 32 * 1024
        total += len(raw)
        chunks += 1
        pos += 4 + n
    assert total == len(data)
    assert chunks == -(-len(data) // (32 * 1024))


def test_snappy_reads_raw_blocks() -> None:
    data = INPUTS["mixed"]
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
    assert decompress(SNAPPY, kcodec.snappy_encode(data, xerial_compatible=False)) == data


def test_snappy_reads_little_endian_version_fields_and_concatenated_streams() -> None:
    data = b"abc" * 1000
    packed = bytearray(compress(SNAPPY, data))
    packed[8:16] = struct.pack("<ii", 1, 1)  # some writers store version/compat little-endian
    assert decompress(SNAPPY, bytes(packed)) == data
    assert decompress(SNAPPY, compress(SNAPPY, b"one") + compress(SNAPPY, b"two")) == b"onetwo"


def test_lz4_frame_flags_match_kafka_writer() -> None:
    packed = compress(LZ4, INPUTS["text"])
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, little-endian 0x184D2204
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 0b01  # version 1
    assert flg & 0x20  # independent blocks
    assert not flg & 0x10  # no block checksum
    assert not flg & 0x08  # no content size
    assert (bd >> 4) & 0x7 == 4  # 64 KiB max block
    assert lz4.frame.decompress(packed) == INPUTS["text"]


def test_zstd_frames_without_content_size() -> None:
    data = INPUTS["large-repetitive"]
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = cobj.compress(data) + cobj.flush()
    assert zstandard.get_frame_parameters(streamed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(ZSTD, streamed) == data
    # two frames back to back
    assert decompress(ZSTD, zstandard.ZstdCompressor().compress(b"a") + streamed) == b"a" + data


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 100])
def test_unknown_codec_id(codec: int) -> None:
    with pytest.raises(UnsupportedVersionError, match=str(codec)):
        compress(codec, b"x")
    with pytest.raises(UnsupportedVersionError, match=str(codec)):
        decompress(codec, b"x")


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("garbage", [b"", b"\xff", b"garbage!", bytes(range(256)) * 2])
def test_garbage_input_is_corrupt_record_error(codec: int, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_streams_are_corrupt(codec: int) -> None:
    packed = compress(codec, INPUTS["random"])
    for cut in (1, 5, len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:cut])


def test_gzip_trailing_garbage_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="not another gzip member"):
        decompress(GZIP, compress(GZIP, b"data") + b"junk")


def test_xerial_bad_chunk_lengths_are_corrupt() -> None:
    head = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    with pytest.raises(CorruptRecordError, match="chunk length"):
        decompress(SNAPPY, head + struct.pack(">i", 1000) + b"abc")
    with pytest.raises(CorruptRecordError, match="chunk length"):
        decompress(SNAPPY, head + struct.pack(">i", -5) + b"abc")
    with pytest.raises(CorruptRecordError, match="cannot hold a chunk length"):
        decompress(SNAPPY, head + b"\x00\x00")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(COMPRESSED), st.data())
def test_mutations_raise_only_corrupt_record_error(codec: int, data: st.DataObject) -> None:
    packed = bytearray(compress(codec, INPUTS["text"][:800]))
    i = data.draw(st.integers(0, len(packed) - 1))
    packed[i] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(CorruptRecordError):
        decompress(codec, bytes(packed))


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_bounded_decompression_stops_at_the_bound(codec: int) -> None:
    from broker_runtime.errors import DecompressionLimitError

    data = bytes(range(256)) * 2000 + b"\x00" * 200_000
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data)) == data
    with pytest.raises(DecompressionLimitError) as info:
        decompress(codec, packed, max_size=len(data) - 1)
    assert info.value.limit == len(data) - 1
    if codec != SNAPPY:  # concatenated streams count together
        with pytest.raises(DecompressionLimitError):
            decompress(codec, packed + packed, max_size=len(data) + 10)
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) // 2], max_size=10 * len(data))


def test_snappy_block_declaring_a_huge_length_is_refused_before_decoding() -> None:
    from broker_runtime.errors import DecompressionLimitError

    claims_256_mib = bytes([0x80, 0x80, 0x80, 0x80, 0x01]) + b"\x00" * 8
    with pytest.raises(DecompressionLimitError):
        decompress(SNAPPY, claims_256_mib, max_size=1 << 20)
