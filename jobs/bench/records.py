"""Benchmark section "records": RecordBatch encode/decode rates, vectorized vs scalar vs kafka-python.

Measured side by side in one run on the same records (16-byte keys, 100-byte values, distinct timestamps,
no headers), split into ~1 MiB batches (``max_batch_bytes=1048576``) as a producer would (medians):
  * vectorized ``build_batches`` records/s -- target >= 5M/s; ratio vs kafka-python's
    ``DefaultRecordBatchBuilder`` (timed on a subset and scaled per record; the row says so) -- target >= 20x;
  * the scalar reference ``records.RecordBatchBuilder`` records/s (on the subset);
  * vectorized ``decode_batches`` records/s -- target >= 2M/s; kafka-python ``DefaultRecordBatch``
    iteration records/s (on the subset's batches); the decode with the compiled record walk over the same
    decode with the numpy walk (interleaved runs), when the compiled walk is built;
  * encode and decode with lz4 and zstd.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from broker_runtime.protocol import records as scalar_records
from broker_runtime.protocol.record_codec.decode import decode_batches
from broker_runtime.protocol.record_codec.encode import build_batches
from broker_runtime.protocol.record_codec.walks import numpy_walk, record_walk
from jobs.bench.common import Result, timed, timed_interleaved

SECTION = "records"
BATCH_BYTES = 1 << 20
TARGET_ENCODE = 5e6
TARGET_DECODE = 2e6
TARGET_RATIO = 20.0


def _fixed(n: int, width: int, rng: np.random.Generator, compressible: bool) -> pa.Array:
    if compressible:  # text-like: random 10-byte words from a small vocabulary, so codecs have work
        vocab = rng.integers(97, 123, size=(64, 10), dtype=np.uint8)
        data = vocab[rng.integers(0, 64, size=n * width // 10)].ravel()
    else:
        data = rng.integers(0, 256, size=n * width, dtype=np.uint8)
    offsets = np.arange(n + 1, dtype=np.int32) * width
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _kafka_python_encode(keys: list[bytes], values: list[bytes], ts: list[int]) -> list[bytes]:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    out = []
    i = 0
    n = len(values)
    while i < n:
        b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, BATCH_BYTES)
        c = 0
        while i < n and b.append(c, ts[i], keys[i], values[i], []) is not None:
            c += 1
            i += 1
        out.append(bytes(b.build()))
    return out


def _reference_encode(keys: list[bytes], values: list[bytes], ts: list[int]) -> list[bytes]:
    out = []
    b = scalar_records.RecordBatchBuilder()
    for k, v, t in zip(keys, values, ts, strict=True):
        b.append(t, k, v)
        if b.uncompressed_size >= BATCH_BYTES - 200:
            out.append(b.build())
            b = scalar_records.RecordBatchBuilder()
    if len(b):
        out.append(b.build())
    return out


def _kafka_python_decode(batches: list[bytes]) -> int:
    from kafka.record.default_records import DefaultRecordBatch

    count = 0
    for data in batches:
        for _ in DefaultRecordBatch(data):
            count += 1
    return count


def run(quick: bool) -> list[Result]:
    n = 20_000 if quick else 1_000_000
    sub = 2_000 if quick else 100_000
    repeat = 3 if quick else 5
    rng = np.random.default_rng(7)
    keys = _fixed(n, 16, rng, compressible=False)
    values = _fixed(n, 100, rng, compressible=True)
    ts = 1_700_000_000_000 + np.arange(n, dtype=np.int64)

    def encode(codec: int) -> list:
        return build_batches(values, keys, timestamps=ts, compression=codec, max_batch_bytes=BATCH_BYTES)

    py_keys = keys.slice(0, sub).to_pylist()
    py_values = values.slice(0, sub).to_pylist()
    py_ts = ts[:sub].tolist()

    t_enc = timed(lambda: encode(0), repeat=repeat)
    t_kp_enc = timed(lambda: _kafka_python_encode(py_keys, py_values, py_ts), repeat=3)
    t_ref_enc = timed(lambda: _reference_encode(py_keys, py_values, py_ts), repeat=3)

    wire = {codec: b"".join(b.data for b in encode(codec)) for codec in (0, 3, 4)}
    assert decode_batches(wire[0]).num_rows == n
    t_dec = timed(lambda: decode_batches(wire[0]), repeat=repeat)
    compiled = record_walk()[0] == "compiled"
    if compiled:  # the same decode with the numpy record walk, interleaved with the compiled one

        def decode_numpy() -> None:
            with numpy_walk():
                decode_batches(wire[0])

        t_walk, t_walk_numpy = timed_interleaved(
            [lambda: decode_batches(wire[0]), decode_numpy], repeat=repeat
        )
    kp_batches = _kafka_python_encode(py_keys, py_values, py_ts)
    assert _kafka_python_decode(kp_batches) == sub
    t_kp_dec = timed(lambda: _kafka_python_decode(kp_batches), repeat=3)

    enc_rate = t_enc.rate(n)
    kp_enc_rate = t_kp_enc.rate(sub)
    dec_rate = t_dec.rate(n)
    kp_dec_rate = t_kp_dec.rate(sub)
    ratio = enc_rate.value / kp_enc_rate.value
    results = [
        Result.measured(
            SECTION,
            f"vectorized encode, {n:,} x (16 B key, 100 B value), none",
            enc_rate,
            "records/s",
            target=">= 5M/s",
            met=enc_rate.value >= TARGET_ENCODE,
        ),
        Result.measured(
            SECTION, f"kafka-python DefaultRecordBatchBuilder ({sub:,} records)", kp_enc_rate, "records/s"
        ),
        Result(
            SECTION,
            f"ratio vectorized / kafka-python encode (kp on {sub:,}, per record)",
            ratio,
            "x",
            target=">= 20x",
            met=ratio >= TARGET_RATIO,
        ),
        Result.measured(
            SECTION, f"reference RecordBatchBuilder ({sub:,} records)", t_ref_enc.rate(sub), "records/s"
        ),
        Result.measured(
            SECTION,
            f"vectorized decode_batches, {n:,} records, none",
            dec_rate,
            "records/s",
            target=">= 2M/s",
            met=dec_rate.value >= TARGET_DECODE,
        ),
        Result.measured(
            SECTION, f"kafka-python DefaultRecordBatch iterate ({sub:,} records)", kp_dec_rate, "records/s"
        ),
        Result(SECTION, "ratio vectorized / kafka-python decode", dec_rate.value / kp_dec_rate.value, "x"),
    ]
    if compiled:
        results.append(
            Result(
                SECTION,
                "decode_batches, compiled record walk / numpy walk (interleaved, none)",
                t_walk_numpy.median / t_walk.median,
                "x",
            )
        )
    for codec, name in ((3, "lz4"), (4, "zstd")):
        t_e = timed(functools.partial(encode, codec), repeat=repeat)
        t_d = timed(functools.partial(decode_batches, wire[codec]), repeat=repeat)
        results.append(Result.measured(SECTION, f"vectorized encode, {name}", t_e.rate(n), "records/s"))
        results.append(Result.measured(SECTION, f"vectorized decode, {name}", t_d.rate(n), "records/s"))
    results.append(Result(SECTION, "bytes on the wire lz4 / none", len(wire[3]) / len(wire[0]), "ratio"))
    results.append(Result(SECTION, "bytes on the wire zstd / none", len(wire[4]) / len(wire[0]), "ratio"))
    return results
