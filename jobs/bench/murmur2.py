"""Benchmark section "murmur2": keys hashed per second, vectorized vs scalar vs kafka-python.

Measured side by side in one run on the same keys (medians of repeated runs):
  * vectorized ``murmur2_array`` on N 16-byte keys (a pyarrow binary column) -- target >= 50M keys/s;
  * vectorized on mixed-length keys (8..24 bytes) with 5 % nulls (the general path);
  * scalar ``murmur2`` per key, and kafka-python's pure-Python ``murmur2`` per key (on a subset);
  * ratio vectorized / kafka-python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from broker_runtime.protocol.murmur2 import murmur2, murmur2_array
from jobs.bench.common import Result, timed

SECTION = "murmur2"
TARGET_KEYS_PER_S = 50e6


def _fixed_keys(n: int, width: int, seed: int) -> pa.Array:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=n * width, dtype=np.uint8)
    offsets = np.arange(n + 1, dtype=np.int32) * width
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _mixed_keys(n: int, seed: int) -> pa.Array:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 25, size=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = rng.integers(0, 256, size=int(offsets[-1]), dtype=np.uint8)
    validity = pa.array(rng.random(n) >= 0.05).buffers()[1]
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])


def run(quick: bool) -> list[Result]:
    from kafka.partitioner.default import murmur2 as kp_murmur2

    n = 20_000 if quick else 1_000_000
    scalar_n = 2_000 if quick else 100_000
    repeat = 3 if quick else 7

    keys = _fixed_keys(n, 16, seed=1)
    mixed = _mixed_keys(n, seed=2)
    py_keys = keys.slice(0, scalar_n).to_pylist()

    t_vec = timed(lambda: murmur2_array(keys), repeat=repeat)
    t_mixed = timed(lambda: murmur2_array(mixed), repeat=repeat)
    t_scalar = timed(lambda: [murmur2(k) for k in py_keys], repeat=3 if quick else 5)
    t_kp = timed(lambda: [kp_murmur2(k) for k in py_keys], repeat=3 if quick else 5)

    vec_rate = t_vec.rate(n)
    kp_rate = t_kp.rate(scalar_n)
    return [
        Result.measured(
            SECTION,
            f"vectorized murmur2_array, {n:,} x 16-byte keys",
            vec_rate,
            "keys/s",
            target=">= 50M/s",
            met=vec_rate.value >= TARGET_KEYS_PER_S,
        ),
        Result.measured(
            SECTION, f"vectorized, {n:,} keys of 8..24 bytes, 5% nulls", t_mixed.rate(n), "keys/s"
        ),
        Result.measured(
            SECTION, "scalar murmur2 (Python loop), 16-byte keys", t_scalar.rate(scalar_n), "keys/s"
        ),
        Result.measured(SECTION, "kafka-python murmur2 (Python loop), 16-byte keys", kp_rate, "keys/s"),
        Result(SECTION, "ratio vectorized / kafka-python", vec_rate.value / kp_rate.value, "x"),
    ]
