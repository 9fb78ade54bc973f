"""murmur2: Kafka's published vectors, kafka-python agreement, vectorized == scalar, the partition rule."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kp_murmur2_unsigned

from broker_runtime.protocol.murmur2 import (
    murmur2,
    murmur2_array,
    partition_for_key,
    partitions_for_keys,
    to_positive,
)


def kp_murmur2(data: bytes) -> int:
    """kafka-python returns the unsigned 32-bit pattern; Java (and we) return it as a signed int32."""
    h = kp_murmur2_unsigned(data)
    return h - (1 << 32) if h >= 1 << 31 else h


def test_kafka_published_vectors() -> None:
    # From Kafka's UtilsTest.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(bytes([ord("a"), ord("b"), ord("c")])) == 479470107


def test_to_positive_clears_sign_bit() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5
    assert to_positive(-973932308) == (-973932308) & 0x7FFFFFFF


def test_agrees_with_kafka_python_for_every_length() -> None:
    rng = random.Random(1234)
    for length in range(0, 41):
        for _ in range(60):
            key = rng.randbytes(length)
            assert murmur2(key) == kp_murmur2(key), key
            assert murmur2(bytearray(key)) == murmur2(memoryview(key)) == murmur2(key)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=100), st.integers(1, 1000))
def test_partition_rule(key: bytes, n: int) -> None:
    expected = (kp_murmur2_unsigned(key) & 0x7FFFFFFF) % n
    assert partition_for_key(key, n) == expected


def test_partition_for_key_rejects_bad_partition_count() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)
    with pytest.raises(ValueError):
        partitions_for_keys(pa.array([b"k"]), 0)


def _random_keys(rng: random.Random, n: int, null_rate: float, lengths: list[int]) -> list[bytes | None]:
    return [None if rng.random() < null_rate else rng.randbytes(rng.choice(lengths)) for _ in range(n)]


ARRAY_TYPES = [pa.binary(), pa.large_binary(), pa.binary_view()]


@pytest.mark.parametrize("typ", ARRAY_TYPES)
@pytest.mark.parametrize("null_rate", [0.0, 0.2])
@pytest.mark.parametrize("lengths", [[16], [7], [0, 1, 2, 3], list(range(41)), [3, 40, 100]])
def test_vectorized_equals_scalar(typ: pa.DataType, null_rate: float, lengths: list[int]) -> None:
    rng = random.Random(hash((str(typ), null_rate, tuple(lengths))) & 0xFFFF)
    keys = _random_keys(rng, 700, null_rate, lengths)
    arr = pa.array(keys, typ)
    expected = [0 if k is None else kp_murmur2(k) for k in keys]
    got = murmur2_array(arr)
    assert got.dtype == np.int32
    assert got.tolist() == expected
    # slices (non-zero array offset) and chunked arrays
    assert murmur2_array(arr.slice(13, 400)).tolist() == expected[13:413]
    chunked = pa.chunked_array([arr.slice(0, 100), arr.slice(100)])
    assert murmur2_array(chunked).tolist() == expected


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.string_view()])
def test_string_keys_hash_their_utf8_bytes(typ: pa.DataType) -> None:
    keys = ["", "a", "ключ", "日本語のキー", None, "x" * 33, "21", "foobar"]
    got = murmur2_array(pa.array(keys, typ)).tolist()
    assert got == [0 if k is None else kp_murmur2(k.encode("utf-8")) for k in keys]
    assert got[-2:] == [-973932308, -790332482]


def test_fixed_size_binary_keys() -> None:
    rng = random.Random(7)
    keys = [rng.randbytes(6) for _ in range(50)]
    arr = pa.array(keys, pa.binary(6))
    assert murmur2_array(arr).tolist() == [kp_murmur2(k) for k in keys]
    assert murmur2_array(arr.slice(5)).tolist() == [kp_murmur2(k) for k in keys[5:]]


def test_empty_and_all_null_arrays() -> None:
    assert murmur2_array(pa.array([], pa.binary())).tolist() == []
    assert murmur2_array(pa.array([None, None], pa.binary())).tolist() == [0, 0]
    assert partitions_for_keys(pa.array([None, None], pa.binary()), 3).tolist() == [-1, -1]
    assert murmur2_array(pa.chunked_array([], pa.binary())).tolist() == []


def test_rejects_non_binary_types() -> None:
    with pytest.raises(TypeError):
        murmur2_array(pa.array([1, 2, 3]))


@pytest.mark.parametrize("num_partitions", [1, 3, 12, 1000])
def test_partitions_for_keys(num_partitions: int) -> None:
    rng = random.Random(num_partitions)
    keys = _random_keys(rng, 500, 0.15, [4, 16, 17, 36])
    got = partitions_for_keys(pa.array(keys, pa.binary()), num_partitions)
    assert got.dtype == np.int32
    expected = [-1 if k is None else (kp_murmur2_unsigned(k) & 0x7FFFFFFF) % num_partitions for k in keys]
    assert got.tolist() == expected
    chunked = pa.chunked_array([pa.array(keys[:250], pa.binary()), pa.array(keys[250:], pa.binary())])
    assert partitions_for_keys(chunked, num_partitions).tolist() == expected


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=50)), max_size=60))
def test_vectorized_equals_scalar_hypothesis(keys: list[bytes | None]) -> None:
    got = murmur2_array(pa.array(keys, pa.binary())).tolist()
    assert got == [0 if k is None else kp_murmur2(k) for k in keys]
