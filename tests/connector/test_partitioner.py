"""Vectorized placement: murmur2 parity with kafka-python, explicit partitions, sticky null keys, grouping."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from broker_runtime.errors import InputDataError
from spark_kafka_log.write.partitioner import Partitioner, group_rows


def test_keyed_rows_follow_kafkas_default_partitioner() -> None:
    keys = [f"key-{i}".encode() * (i % 5 + 1) for i in range(2000)]
    got = Partitioner(16384).assign("t", 7, pa.array(keys, pa.binary()), None, np.zeros(len(keys), np.int64))
    expected = [(kafka_python_murmur2(k) & 0x7FFFFFFF) % 7 for k in keys]
    assert got.tolist() == expected


def test_explicit_partition_wins_and_nulls_fall_back_to_the_key() -> None:
    keys = pa.array([b"a", b"b", b"c"])
    explicit = pa.array([2, None, 0], pa.int32())
    got = Partitioner(16384).assign("t", 3, keys, explicit, np.zeros(3, np.int64))
    assert got[0] == 2 and got[2] == 0
    assert got[1] == (kafka_python_murmur2(b"b") & 0x7FFFFFFF) % 3


def test_unknown_explicit_partition_fails_naming_topic_and_count() -> None:
    with pytest.raises(InputDataError, match=r"\[5\].*'t'.*3 partition"):
        Partitioner(16384).assign("t", 3, None, pa.array([0, 5], pa.int32()), np.zeros(2, np.int64))


def test_null_keys_are_sticky_per_batch_size_chunk() -> None:
    p = Partitioner(batch_size=1000, seed=7)
    sizes = np.full(100, 100, np.int64)  # 10 rows fill one batch.size chunk
    first = p.assign("t", 4, pa.nulls(100, pa.binary()), None, sizes)
    chunks = first.reshape(10, 10)
    assert (chunks == chunks[:, :1]).all(), "rows of one chunk must share a partition"
    assert (chunks[1:, 0] != chunks[:-1, 0]).all(), "each full chunk moves to another partition"
    # The sticky partition carries over to the next Arrow batch until its chunk is full.
    second = p.assign("t", 4, None, None, np.full(5, 100, np.int64))
    assert len(set(second.tolist())) == 1 and second[0] != chunks[-1, 0]


def test_group_rows_by_topic_and_partition_keeps_input_order() -> None:
    parts = np.array([1, 0, 1, 2, 0], np.int32)
    topics = np.array([0, 0, 1, 0, 0], np.int32)
    groups = {(g.topic_index, g.partition): g.indices.tolist() for g in group_rows(parts, topics)}
    assert groups == {(0, 0): [1, 4], (0, 1): [0], (0, 2): [3], (1, 1): [2]}
    (single,) = group_rows(np.zeros(4, np.int32))
    assert single.indices.tolist() == [0, 1, 2, 3]


def test_group_rows_radix_key_groups_as_the_topic_partition_pairs_do() -> None:
    """The uint16 sort key gives the groups of a sort by (topic, partition); also past its 65,536 bound."""
    rng = np.random.default_rng(5)
    for top, topics in ((4, None), (300, 7), (70_000, None), (40_000, 3)):
        parts = rng.integers(0, top, 5000).astype(np.int32)
        tix = None if topics is None else rng.integers(0, topics, 5000).astype(np.int32)
        pairs = list(zip([0] * 5000 if tix is None else tix.tolist(), parts.tolist(), strict=True))
        expected: dict[tuple[int, int], list[int]] = {}
        for i, pair in enumerate(pairs):
            expected.setdefault(pair, []).append(i)
        got = group_rows(parts, tix)
        assert [((g.topic_index, g.partition), g.indices.tolist()) for g in got] == sorted(expected.items())
