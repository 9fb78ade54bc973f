"""Vectorized record placement: which partition each row of an Arrow batch goes to, then rows grouped by it.

Runs on: executors (task).

Where this runs: on the **executors**, inside a write task, once per incoming Arrow batch (and per topic
when the DataFrame has a ``topic`` column). No Python loop runs per row: hashing is numpy
(:func:`broker_runtime.protocol.murmur2.partitions_for_keys`), grouping is one stable ``argsort`` (a radix
sort of 16-bit keys when topic and partition numbers fit).

Placement rules, in order (Kafka's Java producer with its default partitioner):

1. a non-null ``partition`` column value wins; it must be in ``[0, partitions)`` or the task fails before
   the Arrow batch holding it is sent (:class:`~broker_runtime.errors.InputDataError` naming the topic, the
   value and the partition count);
2. a non-null key goes to ``toPositive(murmur2(key)) % partitions``;
3. null keys are sticky: they stay on one partition until about ``batch.size`` bytes were placed there,
   then move to another partition chosen at random (Java's "uniform sticky" partitioner, KIP-794). The
   switch points come from a cumulative sum of record sizes, so this is vectorized too.

Not thread-safe: one :class:`Partitioner` per task.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from broker_runtime.errors import InputDataError
from broker_runtime.protocol.murmur2 import partitions_for_keys

__all__ = ["Partitioner", "RowGroup", "group_rows"]


@dataclass
class _Sticky:
    partition: int
    bytes_placed: int = 0


class Partitioner:
    """Assigns partitions to the rows of Arrow batches; keeps the sticky state of null keys per topic."""

    def __init__(self, batch_size: int, seed: int | str | None = None) -> None:
        """``seed``: the same seed gives the same sticky choices for the same rows (a task's retry must
        place null-key rows exactly where its failed attempt did)."""
        self._batch_size = max(1, batch_size)
        self._rng = random.Random(seed)
        self._sticky: dict[str, _Sticky] = {}

    def assign(
        self,
        topic: str,
        num_partitions: int,
        keys: pa.Array | None,
        explicit: pa.Array | None,
        sizes: np.ndarray,
    ) -> np.ndarray:
        """Partition (int32) of every row. ``sizes`` are the rows' approximate encoded sizes in bytes."""
        n = len(sizes)
        if keys is None or pa.types.is_null(keys.type):
            parts = np.full(n, -1, dtype=np.int32)
        else:
            parts = partitions_for_keys(keys, num_partitions)
        if explicit is not None and not pa.types.is_null(explicit.type) and explicit.null_count < n:
            ex = explicit.to_numpy(zero_copy_only=False)
            if explicit.null_count:
                valid = ~explicit.is_null().to_numpy(zero_copy_only=False)
                ex_valid = ex[valid].astype(np.int64)
            else:
                valid = None
                ex_valid = ex.astype(np.int64)
            bad = (ex_valid < 0) | (ex_valid >= num_partitions)
            if bad.any():
                values = sorted({int(v) for v in ex_valid[bad][:1000]})[:5]
                raise InputDataError(
                    f"partition column: value(s) {values} are not partitions of topic {topic!r}, which has "
                    f"{num_partitions} partition(s) (0..{num_partitions - 1}); {int(bad.sum())} row(s) affected"
                )
            if valid is None:
                parts = ex_valid.astype(np.int32)
            else:
                parts[valid] = ex_valid.astype(np.int32)
        nulls = np.flatnonzero(parts < 0)
        if len(nulls):
            parts[nulls] = self._sticky_partitions(topic, num_partitions, sizes[nulls])
        return parts

    def _sticky_partitions(self, topic: str, num_partitions: int, sizes: np.ndarray) -> np.ndarray:
        state = self._sticky.get(topic)
        if state is None or state.partition >= num_partitions:
            state = _Sticky(self._rng.randrange(num_partitions))
            self._sticky[topic] = state
        # Chunk 0 continues the current sticky partition; chunk k starts after k * batch.size more bytes.
        csum = np.cumsum(sizes, dtype=np.int64) + state.bytes_placed
        before = csum - sizes  # bytes placed before each row: a row starts a new chunk past the boundary
        chunk = before // self._batch_size
        n_chunks = int(chunk[-1]) + 1
        if num_partitions == 1:
            starts = np.zeros(n_chunks, dtype=np.int64)
        else:
            steps = np.array(
                [0] + [self._rng.randrange(1, num_partitions) for _ in range(n_chunks - 1)], dtype=np.int64
            )
            starts = (state.partition + np.cumsum(steps)) % num_partitions
        out = starts[chunk].astype(np.int32)
        state.partition = int(starts[-1])
        state.bytes_placed = int(csum[-1] - (n_chunks - 1) * self._batch_size)
        return out


def _dense_key(partitions: np.ndarray, topic_index: np.ndarray | None, combined: np.ndarray) -> np.ndarray:
    """A sort key ordering rows as ``combined`` (topic index, then partition) does, as uint16 when it fits:
    numpy's stable sort of 16-bit integers is a radix sort, about 4x faster than that of int64 on an Arrow
    batch of 10,000 rows. The order is the same (a stable sort's order is unique)."""
    top = int(partitions.max()) + 1
    if topic_index is None:
        key = partitions.astype(np.int64)
    else:
        key = topic_index.astype(np.int64) * top + partitions
    if int(key.max()) < 1 << 16:
        return key.astype(np.uint16)
    return combined


@dataclass(frozen=True)
class RowGroup:
    """The rows (``indices`` into the Arrow batch, in input order) bound for one (topic, partition)."""

    topic_index: int
    partition: int
    indices: np.ndarray


def group_rows(partitions: np.ndarray, topic_index: np.ndarray | None = None) -> list[RowGroup]:
    """Group row indices by (topic index, partition), keeping each group's rows in input order."""
    n = len(partitions)
    if n == 0:
        return []
    if topic_index is None:
        combined = partitions.astype(np.int64)
    else:
        combined = topic_index.astype(np.int64) * (1 << 31) + partitions.astype(np.int64)
    first = combined[0]
    if (combined == first).all():
        return [RowGroup(int(first >> 31), int(first & 0x7FFFFFFF), np.arange(n, dtype=np.int64))]
    order = np.argsort(_dense_key(partitions, topic_index, combined), kind="stable")
    sorted_keys = combined[order]
    bounds = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [n]))
    return [
        RowGroup(int(sorted_keys[s] >> 31), int(sorted_keys[s] & 0x7FFFFFFF), order[s:e])
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True)
    ]
