"""Zigzag varint / varlong and unsigned varint: byte tables from the spec, kafka-python cross-checks, errors."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.schemas.fields.codecs.types import UnsignedVarInt32, VarInt32, VarInt64

from broker_runtime.errors import CorruptRecordError
from broker_runtime.protocol.primitives.varint import (
    decode_uvarint,
    decode_varint,
    decode_varlong,
    encode_uvarint,
    encode_varint,
    encode_varlong,
    size_of_uvarint,
    size_of_varint,
    size_of_varlong,
)

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1

# Hand-derived from the spec: zigzag (0,-1,1,-2,... -> 0,1,2,3,...), then 7-bit groups, low first,
# continuation bit 0x80 on every byte but the last.
VARINT_TABLE = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-2, b"\x03"),
    (2, b"\x04"),
    (63, b"\x7e"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),  # zigzag 128 = 0b1_0000000
    (-65, b"\x81\x01"),  # zigzag 129
    (8191, b"\xfe\x7f"),  # zigzag 16382
    (8192, b"\x80\x80\x01"),  # zigzag 16384 = 1 << 14
    (300, b"\xd8\x04"),  # zigzag 600 = 0b100_1011000 -> 0xd8 0x04
    (I32_MAX, b"\xfe\xff\xff\xff\x0f"),  # zigzag 0xfffffffe
    (I32_MIN, b"\xff\xff\xff\xff\x0f"),  # zigzag 0xffffffff
]

VARLONG_EXTRA = [
    (2**31, b"\x80\x80\x80\x80\x10"),  # zigzag 2**32
    (I64_MAX, b"\xfe" + b"\xff" * 8 + b"\x01"),
    (I64_MIN, b"\xff" * 9 + b"\x01"),
]

UVARINT_TABLE = [
    (0, b"\x00"),
    (1, b"\x01"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (300, b"\xac\x02"),
    (16383, b"\xff\x7f"),
    (16384, b"\x80\x80\x01"),
    (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
]


@pytest.mark.parametrize(("value", "encoded"), VARINT_TABLE)
def test_varint_byte_table(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert size_of_varint(value) == len(encoded)
    assert decode_varint(encoded, 0) == (value, len(encoded))
    # Same bytes as a varlong (zigzag is the same for values in int32 range).
    assert encode_varlong(value) == encoded
    assert decode_varlong(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(("value", "encoded"), VARLONG_EXTRA)
def test_varlong_byte_table(value: int, encoded: bytes) -> None:
    assert encode_varlong(value) == encoded
    assert size_of_varlong(value) == len(encoded)
    assert decode_varlong(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(("value", "encoded"), UVARINT_TABLE)
def test_uvarint_byte_table(value: int, encoded: bytes) -> None:
    assert encode_uvarint(value) == encoded
    assert size_of_uvarint(value) == len(encoded)
    assert decode_uvarint(encoded, 0) == (value, len(encoded))


def test_decode_at_position_in_larger_buffers() -> None:
    buf = b"\xaa\xbb" + b"\x80\x01" + b"\x7e" + b"\xcc"
    for kind in (bytes, bytearray, memoryview):
        b = kind(buf)
        assert decode_varint(b, 2) == (64, 4)
        assert decode_varint(b, 4) == (63, 5)
        assert decode_uvarint(b, 2) == (128, 4)


@settings(max_examples=300, deadline=None)
@given(st.integers(I32_MIN, I32_MAX))
def test_varint_matches_kafka_python(v: int) -> None:
    enc = encode_varint(v)
    assert enc == VarInt32.encode(v)
    assert VarInt32.decode(io.BytesIO(enc)) == v
    assert decode_varint(b"\x00" + enc + b"\x00", 1) == (v, 1 + len(enc))
    assert size_of_varint(v) == len(enc)


@settings(max_examples=300, deadline=None)
@given(st.integers(I64_MIN, I64_MAX))
def test_varlong_matches_kafka_python(v: int) -> None:
    enc = encode_varlong(v)
    assert enc == VarInt64.encode(v)
    assert decode_varlong(enc, 0) == (v, len(enc))
    assert size_of_varlong(v) == len(enc)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_uvarint_matches_kafka_python(v: int) -> None:
    enc = encode_uvarint(v)
    assert enc == UnsignedVarInt32.encode(v)
    assert decode_uvarint(enc, 0) == (v, len(enc))
    assert size_of_uvarint(v) == len(enc)


@pytest.mark.parametrize(
    ("fn", "value"),
    [
        (encode_varint, I32_MAX + 1),
        (encode_varint, I32_MIN - 1),
        (encode_varlong, I64_MAX + 1),
        (encode_varlong, I64_MIN - 1),
        (encode_uvarint, -1),
        (encode_uvarint, 2**32),
        (size_of_varint, 2**40),
        (size_of_varlong, 2**70),
        (size_of_uvarint, -5),
    ],
)
def test_out_of_range_values_raise_value_error(fn, value: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        fn(value)


@pytest.mark.parametrize("decode", [decode_varint, decode_varlong, decode_uvarint])
@pytest.mark.parametrize("buf", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_truncated_input_names_position(decode, buf: bytes) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CorruptRecordError, match="position 0"):
        decode(buf, 0)


def test_truncated_at_offset_names_that_position() -> None:
    with pytest.raises(CorruptRecordError, match="position 3"):
        decode_varint(b"\x00\x00\x00\x80", 3)


def test_overlong_encodings_rejected() -> None:
    six = b"\x80\x80\x80\x80\x80\x00"
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_varint(six, 0)
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_uvarint(six, 0)
    assert decode_varlong(six, 0) == (0, 6)  # fine for a varlong (<= 10 bytes)
    eleven = b"\x80" * 10 + b"\x00"
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(eleven, 0)


def test_value_bits_beyond_type_width_rejected() -> None:
    # 5th byte 0x10 sets bit 32: does not fit an int32.
    with pytest.raises(CorruptRecordError, match="32 bits"):
        decode_varint(b"\x80\x80\x80\x80\x10", 0)
    with pytest.raises(CorruptRecordError, match="64 bits"):
        decode_varlong(b"\x80" * 9 + b"\x02", 0)


def test_non_minimal_encoding_within_limit_is_accepted() -> None:
    # Kafka's readers accept padding continuation bytes within the 5-byte limit.
    assert decode_varint(b"\x82\x80\x00", 0) == (1, 3)
    assert decode_uvarint(b"\x81\x80\x80\x80\x00", 0) == (1, 5)
