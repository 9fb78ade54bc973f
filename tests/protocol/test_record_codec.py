"""Tests of the vectorized RecordBatch builder and decoder (broker_runtime.protocol.record_codec).

Independent references: kafka-python's DefaultRecordBatchBuilder / DefaultRecordBatch (a separate
implementation of Kafka's format), the project's scalar reference builder and reader (records.py), and
byte tables written from the format description.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import encode_varint as kp_encode_varint

from broker_runtime.errors import CorruptRecordError, ProtocolError
from broker_runtime.protocol import records as ref
from broker_runtime.protocol.batch_header import (
    BATCH_HEADER,
    CRC_OFFSET,
    HEADER_SIZE,
    compute_crc,
    parse_header,
    set_base_offset,
    set_log_append_time,
)
from broker_runtime.protocol.record_codec.decode import decode_batches
from broker_runtime.protocol.record_codec.encode import (
    BuiltBatch,
    _varint_blob,
    _Varints,
    build_batch,
    build_batches,
)
from broker_runtime.protocol.record_codec.format import DECODED_SCHEMA

CODECS = [0, 1, 2, 3, 4]
HEADER_STRUCT = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS = pa.list_(HEADER_STRUCT)
INT32_MAX = (1 << 31) - 1

Row = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]

# ------------------------------------------------------------------------------------------- helpers


def columns(rows: list[Row]) -> dict[str, Any]:
    ts = np.array([r[0] for r in rows], dtype=np.int64)
    keys = pa.array([r[1] for r in rows], pa.binary())
    values = pa.array([r[2] for r in rows], pa.binary())
    headers = pa.array([[{"key": k, "value": v} for k, v in r[3]] for r in rows], HEADERS)
    return {"values": values, "keys": keys, "headers": headers, "timestamps": ts}


def kafka_python_batch(rows: list[Row], codec: int = 0, **producer: Any) -> bytes:
    b = DefaultRecordBatchBuilder(
        2,
        codec,
        producer.get("is_transactional", False),
        producer.get("producer_id", -1),
        producer.get("producer_epoch", -1),
        producer.get("base_sequence", -1),
        1 << 30,
    )
    for i, (ts, k, v, h) in enumerate(rows):
        assert b.append(i, ts, k, v, h) is not None
    return bytes(b.build())


def reference_batch(rows: list[Row], codec: int = 0, **kw: Any) -> bytes:
    b = ref.RecordBatchBuilder(codec, **kw)
    for ts, k, v, h in rows:
        b.append(ts, k, v, h)
    return b.build()


def with_epoch(batch: bytes, epoch: int) -> bytes:
    """kafka-python writes partitionLeaderEpoch 0 where Java writes -1 (bytes 12-15, outside the CRC)."""
    return batch[:12] + struct.pack(">i", epoch) + batch[16:]


def decoded_rows(rb: pa.RecordBatch) -> list[tuple[int, int, int, bytes | None, bytes | None, list]]:
    d = rb.to_pydict()
    return [
        (o, t, tt, k, v, [(h["key"], h["value"]) for h in hs])
        for o, t, tt, k, v, hs in zip(
            d["offset"], d["timestamp"], d["timestampType"], d["key"], d["value"], d["headers"], strict=True
        )
    ]


def expected_rows(rows: list[Row], base_offset: int = 0, log_append: int | None = None) -> list:
    return [
        (
            base_offset + i,
            ts if log_append is None else log_append,
            0 if log_append is None else 1,
            k,
            v,
            list(h),
        )
        for i, (ts, k, v, h) in enumerate(rows)
    ]


def recrc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))


# ---------------------------------------------------------------------------------------- strategies

blobs = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=120, max_size=300))
header_lists = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3
)
timestamps = st.integers(min_value=-(2**40), max_value=2**42)
rows_strategy = st.lists(st.tuples(timestamps, blobs, blobs, header_lists), min_size=1, max_size=25)
settings_fast = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -------------------------------------------------------------------------------------- varint table


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (INT32_MAX, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
        (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
    ],
)
def test_varint_blob_byte_table(value: int, encoded: bytes) -> None:
    blob = _varint_blob([_Varints(np.array([value, 0], dtype=np.int64))], 2, allow_scalar=False)
    assert blob[0].as_py() == encoded
    assert blob[1].as_py() == b"\x00"


@settings_fast
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)), min_size=1))
def test_varint_blob_matches_kafka_python(pairs: list[tuple[int, int]]) -> None:
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    blob = _varint_blob([_Varints(a), _Varints(b)], len(pairs), allow_scalar=False)
    for i, (x, y) in enumerate(pairs):
        want = bytearray()
        kp_encode_varint(x, want.append)
        kp_encode_varint(y, want.append)
        assert blob[i].as_py() == bytes(want)


# -------------------------------------------------------------------------------------------- builder


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
@settings_fast
@given(rows_strategy)
def test_builder_equals_references_byte_for_byte(rows: list[Row]) -> None:
    built = build_batch(**columns(rows))
    assert built == reference_batch(rows)
    assert with_epoch(built, 0) == kafka_python_batch(rows)


@settings(max_examples=15, deadline=None)
@given(
    rows_strategy, st.integers(0, 2**31 - 1), st.integers(0, 32767), st.integers(0, INT32_MAX), st.booleans()
)
@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
def test_builder_producer_fields_equal_reference(
    rows: list[Row], pid: int, epoch: int, seq: int, txn: bool
) -> None:
    producer = {"producer_id": pid, "producer_epoch": epoch, "base_sequence": seq, "is_transactional": txn}
    built = build_batch(**columns(rows), **producer)
    assert built == reference_batch(rows, **producer)
    assert with_epoch(built, 0) == kafka_python_batch(rows, **producer)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
def test_large_values_and_empty_values() -> None:
    rows: list[Row] = [
        (5, b"k" * 70000, b"v" * 300000, []),
        (4, b"", b"", [("", b"")]),
        (7, None, b"x" * 1000000, [("h", b"y" * 5000)]),
    ]
    built = build_batch(**columns(rows))
    assert built == reference_batch(rows)
    assert decoded_rows(decode_batches(built)) == expected_rows(rows)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
def test_input_types_are_equivalent() -> None:
    rows: list[Row] = [(1000, b"a", b"bc", []), (1001, None, None, []), (999, b"", b"z", [])]
    want = build_batch(**columns(rows))
    values = ["bc", None, "z"]
    keys = ["a", None, ""]
    for vt, kt in [
        (pa.string(), pa.large_string()),
        (pa.large_binary(), pa.binary()),
        (pa.string_view(), pa.string()),
    ]:
        got = build_batch(
            pa.array(values, vt),
            pa.chunked_array([pa.array(keys, kt)]),
            timestamps=pa.array([1000, 1001, 999]),
        )
        assert got == want
    # timestamps in other units floor to milliseconds; numpy datetime64 too.
    for unit, scale in [("s", None), ("us", 1000), ("ns", 1_000_000)]:
        if scale is None:
            continue
        ts = pa.array([1000 * scale + scale - 1, 1001 * scale, 999 * scale], pa.timestamp(unit, tz="UTC"))
        assert build_batch(pa.array(values, pa.string()), pa.array(keys), timestamps=ts) == want
    np_ts = np.array([1000, 1001, 999], dtype="datetime64[ms]")
    assert build_batch(pa.array(values), pa.array(keys), timestamps=np_ts) == want
    seconds = pa.array([1, 2], pa.timestamp("s"))
    assert decode_batches(build_batch(pa.array([b"a", b"b"]), timestamps=seconds))[
        "timestamp"
    ].to_pylist() == [1000, 2000]


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
def test_null_typed_columns_and_default_timestamp() -> None:
    built = build_batch(pa.nulls(2), pa.nulls(2, pa.null()), pa.nulls(2, HEADERS), timestamp_ms=42)
    assert built == reference_batch([(42, None, None, []), (42, None, None, [])])
    nulls_in_ts = pa.array([None, 7], pa.int64())
    assert decode_batches(build_batch(pa.array([b"a", b"b"]), timestamps=nulls_in_ts, timestamp_ms=3))[
        "timestamp"
    ].to_pylist() == [3, 7]


def test_header_null_key_rejected() -> None:
    headers = pa.array([[{"key": None, "value": b"x"}]], HEADERS)
    with pytest.raises(ValueError, match="null key"):
        build_batch(pa.array([b"v"]), headers=headers)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
def test_sliced_inputs() -> None:
    rows: list[Row] = [(i, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)] * (i % 3)) for i in range(10)]
    cols = columns(rows)
    got = build_batch(
        cols["values"].slice(3, 5),
        cols["keys"].slice(3, 5),
        cols["headers"].slice(3, 5),
        cols["timestamps"][3:8],
    )
    assert got == reference_batch(rows[3:8])


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_readable_by_kafka_python_and_reference(codec: int) -> None:
    rows: list[Row] = [
        (1_700_000_000_000 + i % 7, b"key-%d" % i, b"value %d " % i * 5, [("n", b"%d" % i)] * (i % 2))
        for i in range(300)
    ]
    built = build_batches(**columns(rows), compression=codec, max_batch_bytes=4096)
    assert len(built) > 1
    for b in built:
        assert parse_header(b.data).compression == codec
        sub = rows[b.first_row : b.first_row + b.record_count]
        kp = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in DefaultRecordBatch(b.data)]
        assert kp == [(i, t, k, v, h) for i, (t, k, v, h) in enumerate(sub)]
        rb = ref.RecordBatch(b.data)
        rb.verify_crc()
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in rb.records()] == kp
    whole = b"".join(b.data for b in built)
    got = decode_batches(whole)
    offsets = np.concatenate([np.arange(b.record_count) for b in built])
    assert got["offset"].to_pylist() == offsets.tolist()
    assert [(t, k, v, h) for _, t, _, k, v, h in decoded_rows(got)] == [(t, k, v, h) for t, k, v, h in rows]


# ----------------------------------------------------------------------------------------- splitting


def kafka_python_split(rows: list[Row], limit: int) -> list[int]:
    """Record counts per batch as kafka-python's builder (batch_size = limit) accepts records."""
    counts = []
    i = 0
    while i < len(rows):
        b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, limit)
        c = 0
        while i < len(rows) and b.append(c, rows[i][0], rows[i][1], rows[i][2], rows[i][3]) is not None:
            c += 1
            i += 1
        counts.append(c)
    return counts


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(timestamps, blobs, blobs, header_lists), min_size=1, max_size=60),
    st.integers(min_value=1, max_value=2000),
)
@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
def test_split_matches_kafka_python(rows: list[Row], limit: int) -> None:
    built = build_batches(**columns(rows), max_batch_bytes=limit)
    assert [b.record_count for b in built] == kafka_python_split(rows, limit)
    row = 0
    for b in built:
        assert b.first_row == row
        row += b.record_count
        assert b.uncompressed_size == len(b.data)
        assert b.uncompressed_size <= limit or b.record_count == 1
        assert b.data == reference_batch(rows[b.first_row : b.first_row + b.record_count])
    assert row == len(rows)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
def test_split_many_small_records_and_sequences() -> None:
    n = 20000
    values = pa.array([b"x" * (i % 50) for i in range(n)])
    built = build_batches(
        values,
        timestamps=np.arange(n, dtype=np.int64) * 1000,
        max_batch_bytes=16384,
        producer_id=9,
        producer_epoch=1,
        base_sequence=INT32_MAX - 700,
    )
    assert sum(b.record_count for b in built) == n
    seq = INT32_MAX - 700
    for b in built:
        assert b.base_sequence == seq == parse_header(b.data).base_sequence
        assert len(b.data) <= 16384
        seq = (seq + b.record_count) % (INT32_MAX + 1)  # Kafka wraps to 0 after int32 max
    assert built[0].record_count < 700  # so the wrap happened inside the run
    rows = [(i * 1000, None, b"x" * (i % 50), []) for i in range(n)]
    assert [b.record_count for b in built] == kafka_python_split(rows, 16384)
    last = built[-1]
    assert decode_batches(last.data)["value"].to_pylist() == [r[2] for r in rows[last.first_row :]]


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
@pytest.mark.parametrize("codec", [0, 3])
def test_row_groups_equal_one_call_per_group_byte_for_byte(codec: int) -> None:
    """Rows of several partitions encoded in one call (``group_starts``) give exactly the batches that one
    call per partition gives: no batch spans two groups, each group starts at its own base sequence."""
    n = 5000
    values = pa.array([bytes([i % 251]) * (i % 120) for i in range(n)], pa.binary())
    keys = pa.array([f"k{i}".encode() for i in range(n)], pa.binary())
    ts = np.arange(n, dtype=np.int64) * 7 + 1_700_000_000_000
    starts = [0, 1, 1200, 1201, 4000]
    sequences = [5, 0, INT32_MAX - 3, 100, 42]
    common: dict[str, Any] = {
        "compression": codec,
        "max_batch_bytes": 8192,
        "producer_id": 3,
        "producer_epoch": 1,
    }
    grouped = build_batches(
        values, keys, timestamps=ts, base_sequence=sequences, group_starts=starts, **common
    )
    ends = [*starts[1:], n]
    expected = []
    for g, (a, b) in enumerate(zip(starts, ends, strict=True)):
        for batch in build_batches(
            values[a:b], keys[a:b], timestamps=ts[a:b], base_sequence=sequences[g], **common
        ):
            expected.append((g, batch.first_row + a, batch.data, batch.base_sequence))
    assert [(b.group, b.first_row, b.data, b.base_sequence) for b in grouped] == expected
    assert {b.group for b in grouped} == set(range(len(starts)))
    with pytest.raises(ValueError):
        build_batches(values, group_starts=[0, 5, 5])
    with pytest.raises(ValueError):
        build_batches(values, group_starts=[0, 10], base_sequence=[1])
    with pytest.raises(ValueError):
        build_batches(values, group_starts=[0, n])


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
@pytest.mark.parametrize("codec", [0, 3])
def test_in_place_batches_equal_joined_ones_byte_for_byte(codec: int) -> None:
    """``in_place`` (the writer's path: headers written into gaps of one pooled buffer) gives exactly the
    batches of the default path: several row groups, null keys and values, headers, transactional."""
    n = 3000
    rows: list[Row] = [
        (
            1_700_000_000_000 + (i * 37) % 5000,
            None if i % 11 == 0 else f"k{i}".encode(),
            None if i % 13 == 0 else bytes([i % 251]) * (i % 90),
            [("h", None if i % 2 else b"v")] if i % 7 == 0 else [],
        )
        for i in range(n)
    ]
    common: dict[str, Any] = {
        **columns(rows),
        "compression": codec,
        "max_batch_bytes": 4096,
        "producer_id": 9,
        "producer_epoch": 2,
        "is_transactional": True,
        "base_sequence": [0, INT32_MAX - 5, 77],
        "group_starts": [0, 1000, 1001],
    }
    joined = build_batches(**common)
    in_place = build_batches(**common, in_place=True)
    assert len(joined) > 3
    assert [
        (bytes(b.data), b.record_count, b.first_row, b.base_sequence, b.uncompressed_size, b.group)
        for b in in_place
    ] == [
        (b.data, b.record_count, b.first_row, b.base_sequence, b.uncompressed_size, b.group) for b in joined
    ]


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
def test_split_oversized_record_gets_own_batch() -> None:
    values = pa.array([b"a", b"b" * 5000, b"c", b"d"])
    built = build_batches(values, timestamp_ms=0, max_batch_bytes=200)
    assert [b.record_count for b in built] == [1, 1, 2]
    assert [b.first_row for b in built] == [0, 1, 2]


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy encoder
def test_no_sequence_stays_none_and_empty_input() -> None:
    built = build_batches(pa.array([b"a"] * 100), timestamp_ms=0, max_batch_bytes=200)
    assert all(b.base_sequence == -1 for b in built)
    assert build_batches(pa.array([], pa.binary())) == []
    with pytest.raises(ValueError):
        build_batch(pa.array([], pa.binary()))
    with pytest.raises(ValueError):
        build_batches(pa.array([b"a"]), compression=7)
    assert isinstance(built[0], BuiltBatch)


# --------------------------------------------------------------------------------------------- decoder


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
@settings_fast
@given(rows_strategy, st.sampled_from(CODECS))
def test_decode_roundtrip(rows: list[Row], codec: int) -> None:
    rb = decode_batches(build_batch(**columns(rows), compression=codec))
    assert rb.schema == DECODED_SCHEMA
    assert decoded_rows(rb) == expected_rows(rows)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
@pytest.mark.parametrize("codec", CODECS)
def test_decode_kafka_python_batches(codec: int) -> None:
    # Compressible values, so kafka-python keeps the codec (it falls back to none when it does not pay).
    rows: list[Row] = [
        (
            10_000 - i * 3,
            b"k%d" % i if i % 4 else None,
            b"value" * 20 if i % 5 else None,
            [("a", b"b"), ("c", None)] if i % 3 == 0 else [],
        )
        for i in range(200)
    ]
    batch = bytearray(kafka_python_batch(rows, codec))
    assert parse_header(batch).compression == codec
    set_base_offset(batch, 0, 1000)
    assert decoded_rows(decode_batches(bytes(batch))) == expected_rows(rows, 1000)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
@pytest.mark.parametrize("codec", CODECS)
def test_decode_reference_batches_concatenated_with_offsets_and_log_append_time(codec: int) -> None:
    batches = []
    expect: list = []
    base = 0
    for j in range(4):
        rows: list[Row] = [
            (j * 100 + i, b"key", b"v%d-%d" % (j, i), [("h", b"%d" % i)]) for i in range(10 + j)
        ]
        b = bytearray(reference_batch(rows, codec, base_offset=base))
        la = None
        if j == 2:
            la = 123456789
            set_log_append_time(b, 0, len(b), la)
        batches.append(bytes(b))
        expect += expected_rows(rows, base, la)
        base += len(rows) + 5  # gaps between batches, as after compaction
    buf = b"".join(batches)
    assert decoded_rows(decode_batches(buf)) == expect
    # start/end offsets drop records; batches wholly outside are skipped.
    lo, hi = expect[7][0], expect[30][0]
    assert decoded_rows(decode_batches(buf, start_offset=lo, end_offset=hi)) == [
        e for e in expect if lo <= e[0] < hi
    ]
    assert decode_batches(buf, start_offset=10**9).num_rows == 0
    # partial tail: ignored by default, refused on request.
    cut = buf[: len(buf) - 5]
    assert decoded_rows(decode_batches(cut)) == expect[: len(expect) - 13]
    assert decoded_rows(decode_batches(buf + buf[:30])) == expect
    with pytest.raises(CorruptRecordError):
        decode_batches(cut, allow_partial_tail=False)
    with pytest.raises(CorruptRecordError):
        decode_batches(buf + buf[:30], allow_partial_tail=False)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
def test_decode_control_batches() -> None:
    data = reference_batch(
        [(5, b"a", b"b", [])], 0, producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    marker = bytearray(ref.build_control_batch(1, 7, producer_id=3, producer_epoch=0, timestamp=9))
    set_base_offset(marker, 0, 1)
    buf = data + bytes(marker)
    assert decode_batches(buf)["offset"].to_pylist() == [0]
    with_control = decode_batches(buf, include_control=True)
    assert with_control["offset"].to_pylist() == [0, 1]
    assert with_control["key"][1].as_py() == struct.pack(">hh", 0, 1)
    assert with_control["value"][1].as_py() == struct.pack(">hi", 0, 7)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
def test_decode_empty_and_filters_in_range() -> None:
    assert decode_batches(b"").num_rows == 0
    assert decode_batches(b"").schema == DECODED_SCHEMA
    rows: list[Row] = [(i, None, b"%d" % i, []) for i in range(10)]
    b = bytearray(reference_batch(rows, base_offset=100))
    got = decode_batches(memoryview(b), start_offset=103, end_offset=105)
    assert got["offset"].to_pylist() == [103, 104]
    assert got["value"].to_pylist() == [b"3", b"4"]


# ------------------------------------------------------------------------------------------- corrupt


def patched(batch: bytes, position: int, new: bytes, fix_crc: bool = True) -> bytes:
    b = bytearray(batch)
    b[position : position + len(new)] = new
    if fix_crc:
        recrc(b)
    return bytes(b)


GOOD = reference_batch([(1, b"kk", b"vvv", [("h", b"x")]), (2, None, b"w" * 70, [])])


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
def test_corrupt_crc() -> None:
    bad = patched(GOOD, HEADER_SIZE + 5, b"\xff", fix_crc=False)
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batches(bad)
    # with the check off the structure is still validated (the key length is now -128 or so).
    with pytest.raises(CorruptRecordError):
        decode_batches(patched(GOOD, HEADER_SIZE + 4, b"\x81\x02", fix_crc=False), verify_crc=False)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
def test_corrupt_structures() -> None:
    # first record: length at 61, attributes 62, timestampDelta 63, offsetDelta 64, keyLength 65
    cases = {
        "record length": patched(GOOD, HEADER_SIZE, b"\x7f"),  # wrong (and odd) record length
        "key length": patched(GOOD, HEADER_SIZE + 4, b"\x03"),  # keyLength -2
        "overlong ts": patched(GOOD, HEADER_SIZE + 2, b"\xff" * 11),
        "headers count": patched(GOOD, HEADER_SIZE + 11, b"\x09"),  # 4 headers where 1 fits
        "count": patched(GOOD, BATCH_HEADER.size - 4, struct.pack(">i", 3)),
        "count negative": patched(GOOD, BATCH_HEADER.size - 4, struct.pack(">i", -1)),
        "huge count": patched(GOOD, BATCH_HEADER.size - 4, struct.pack(">i", 2**31 - 1)),
        "utf8": patched(GOOD, HEADER_SIZE + 13, b"\xff"),  # header key "h"
        "truncated": GOOD[:-1],
    }
    for name, bad in cases.items():
        with pytest.raises(CorruptRecordError):
            decode_batches(bad, allow_partial_tail=False)
            pytest.fail(f"{name} was accepted")


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
def test_corrupt_compressed_stream() -> None:
    good = reference_batch([(1, b"k", b"v" * 100, [])], 4)
    bad = patched(good, HEADER_SIZE + 8, b"\x00\x00\x00\x00")
    with pytest.raises(CorruptRecordError):
        decode_batches(bad)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
@settings(max_examples=80, deadline=None)
@given(st.integers(0, len(GOOD) - 1), st.integers(0, 255))
def test_random_byte_flips_never_return_garbage(position: int, byte: int) -> None:
    bad = patched(GOOD, position, bytes([byte]), fix_crc=position >= 21)
    try:
        want = []
        for batch in ref.read_batches(bad, verify_crc=True):
            if not batch.is_control:
                tt = batch.timestamp_type
                want += [
                    (r.offset, r.timestamp, tt, r.key, r.value, r.headers)
                    for r in batch.records(strict=False)
                ]
    except ProtocolError:
        with pytest.raises(ProtocolError):
            decode_batches(bad, allow_partial_tail=False)
        return
    try:
        got = decode_batches(bad, allow_partial_tail=False)
    except CorruptRecordError:
        return  # stricter than the reference is fine; garbage is not
    assert decoded_rows(got) == want


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
def test_scan_records_walks_past_a_chunk_boundary_and_names_the_bad_record() -> None:
    import struct

    from broker_runtime.errors import CorruptRecordError
    from broker_runtime.protocol.batch_header import HEADER_SIZE, parse_header
    from broker_runtime.protocol.record_codec.pywalk import SCAN_CHUNK
    from broker_runtime.protocol.record_codec.scan import scan_records

    n = SCAN_CHUNK + 1000
    keys = pa.array([None if i % 5000 == 7 else b"k" for i in range(n)])
    batch = build_batch(pa.array([b"v"] * n), keys, timestamp_ms=1_000)
    header = parse_header(batch)
    section = bytes(batch[HEADER_SIZE:])
    scan = scan_records(header, section, timestamp_low=0, timestamp_high=2_000)
    assert scan.max_timestamp == 1_000 and len(scan.out_of_range) == 0
    assert scan.null_keys.tolist() == [i for i in range(n) if i % 5000 == 7]
    # Record SCAN_CHUNK + 3 gets an offsetDelta of 0: found in the second chunk, named by its batch index.
    records = bytearray(section)
    bad = SCAN_CHUNK + 3
    pos = 0
    for _ in range(bad):  # every record here is shorter than 64 bytes: one-byte length varints
        pos += 1 + (records[pos] >> 1)
    offset_delta_at = pos + 1 + 1 + 1  # length, attributes, timestampDelta (one byte each)
    records[offset_delta_at : offset_delta_at + 3] = b"\x80\x80\x00"  # 0 in the delta's 3 bytes
    with pytest.raises(CorruptRecordError) as info:
        scan_records(header, bytes(records))
    assert info.value.record_index == bad
    assert struct.unpack(">i", batch[57:61])[0] == n


def _walked(section: bytes, count: int) -> tuple[list[int], int] | str:
    from broker_runtime.protocol.record_codec.pywalk import record_starts

    starts: list[int] = []
    try:
        end = record_starts(section, 0, count, 0, 0, starts)
    except CorruptRecordError as exc:
        return str(exc)
    return starts, end


def _chained(section: bytes, count: int) -> tuple[list[int], int] | str:
    from broker_runtime.protocol.record_codec.pywalk import record_chain

    try:
        starts, end = record_chain(np.frombuffer(section, dtype=np.uint8), section, 0, count, 0, 0)
    except CorruptRecordError as exc:
        return str(exc)
    return starts.tolist(), end


@pytest.mark.parametrize("shape", ["uniform", "runs", "varying", "rare_outliers"])
def test_record_chain_speculation_finds_exactly_what_the_walk_finds(shape: str) -> None:
    """The speculative record-start search keeps only verified starts: on intact and on damaged sections (a
    changed byte anywhere, a cut tail, a wrong records count) it returns what the record-by-record walk returns,
    or raises the same error."""
    rng = np.random.default_rng(["uniform", "runs", "varying", "rare_outliers"].index(shape))
    n = 3000
    lengths = {
        "uniform": np.full(n, 100),
        "runs": np.repeat(rng.integers(0, 200, size=n // 300), 300),
        "varying": rng.integers(0, 300, size=n),
        "rare_outliers": np.where(rng.random(n) < 0.995, 60, rng.integers(0, 20_000, size=n)),
    }[shape]
    values = pa.array([bytes(rng.integers(0, 256, size=int(size), dtype=np.uint8)) for size in lengths])
    batch = build_batch(values, None, timestamp_ms=1_000)
    section = bytes(batch[HEADER_SIZE:])
    count = struct.unpack(">i", batch[57:61])[0]
    walked = _walked(section, count)
    assert not isinstance(walked, str) and walked[1] == len(section)
    assert _chained(section, count) == walked
    for trial in range(60):
        damaged = bytearray(section)
        if trial % 3 == 0:  # a length byte in the middle of a run of equal records
            start = walked[0][int(rng.integers(1, count - 1))]
            damaged[start] ^= 1 << int(rng.integers(0, 8))
        else:
            damaged[int(rng.integers(0, len(section)))] = int(rng.integers(0, 256))
        cut = bytes(damaged[: len(damaged) - int(rng.integers(0, 3))])
        for records in (count, count + 1, count - 1):
            assert _chained(cut, records) == _walked(cut, records)


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
def test_scan_records_accepts_a_longer_encoding_of_the_record_index() -> None:
    """offsetDelta is compared with the shortest encodings of the record indexes first; another encoding of the
    same value (Kafka's readers accept it) is still decoded and accepted."""
    from broker_runtime.protocol.record_codec.scan import scan_records

    n = 300
    batch = build_batch(pa.array([b"v"] * n), None, timestamp_ms=1_000)
    header = parse_header(batch)
    section = bytearray(batch[HEADER_SIZE:])
    pos = 0
    for _ in range(5):  # every record is shorter than 64 bytes: one-byte length varints
        pos += 1 + (section[pos] >> 1)
    at = pos + 3  # length, attributes, timestampDelta
    assert section[at] == 10  # zigzag(5)
    section[at : at + 1] = b"\x8a\x00"  # 5 in two bytes
    section[pos] += 2  # the record is one byte longer
    assert scan_records(header, bytes(section)).max_timestamp == 1_000
    section[at] = 0x8C  # 6: not the record's index
    with pytest.raises(CorruptRecordError) as info:
        scan_records(header, bytes(section))
    assert info.value.record_index == 5


# ------------------------------------------------------------------------ compiled encoder == numpy encoder


def _both_encoders(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[list[BuiltBatch], list[BuiltBatch]]:
    from broker_runtime.protocol.record_codec import walks

    compiled = walks.compiled
    if compiled is None:
        pytest.skip(f"compiled record walk not in use: {walks.record_walk()[1]}")
    out = []
    for walk in (compiled, None):
        monkeypatch.setattr(walks, "compiled", walk)
        out.append(build_batches(**kw))
    monkeypatch.setattr(walks, "compiled", compiled)
    return out[0], out[1]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=rows_strategy,
    codec=st.sampled_from(CODECS),
    limit=st.one_of(st.none(), st.integers(min_value=1, max_value=2000)),
    shape=st.sampled_from(["all", "no_keys", "null_keys", "no_headers", "strings", "sliced", "groups"]),
    const_ts=st.booleans(),
)
def test_compiled_encoder_equals_numpy_encoder_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch,
    rows: list[Row],
    codec: int,
    limit: int | None,
    shape: str,
    const_ts: bool,
) -> None:
    """Both encoders give identical batches: nulls, empty keys/values, headers, timestamps (constant or
    varying, negative deltas), splitting by max bytes, row groups, sliced and string inputs, every codec."""
    if const_ts:
        rows = [(rows[0][0], k, v, h) for _, k, v, h in rows]
    cols = columns(rows)
    kw: dict[str, Any] = dict(cols, compression=codec, max_batch_bytes=limit, producer_id=7, base_sequence=5)
    if shape == "no_keys":
        kw["keys"] = None
    elif shape == "null_keys":
        kw["keys"] = pa.nulls(len(rows), pa.binary())
    elif shape == "no_headers":
        kw["headers"] = None
    elif shape == "strings":
        kw["keys"] = pa.array([None if r[1] is None else r[1].hex() for r in rows], pa.string())
        kw["values"] = cols["values"].cast(pa.large_binary())
    elif shape == "sliced":
        pad: Row = (0, b"pad", b"pad", [("p", b"p")])
        padded = columns([pad, *rows, pad])
        kw.update({k: v[1:-1] for k, v in padded.items()})
    elif shape == "groups" and len(rows) > 2:
        kw["group_starts"] = [0, len(rows) // 3, len(rows) // 2 + 1]
        kw["base_sequence"] = [1, INT32_MAX - 1, -1]
    compiled, numpy = _both_encoders(monkeypatch, **kw)
    assert compiled == numpy


def test_compiled_encoder_equals_numpy_on_large_and_empty_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values past every varint width boundary (127/128, 16383/16384, 2**21) and empty ones."""
    sizes = [0, 1, 127, 128, 16383, 16384, (1 << 21) + 3, 0]
    values = pa.array([b"\xab" * s for s in sizes], pa.binary())
    keys = pa.array([b"" if s % 2 else None for s in sizes], pa.binary())
    for limit in (None, 20000):
        compiled, numpy = _both_encoders(
            monkeypatch, values=values, keys=keys, max_batch_bytes=limit, timestamp_ms=1_700_000_000_000
        )
        assert compiled == numpy


def test_compiled_split_equals_numpy_at_every_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every max_batch_bytes from below the header size up: a batch that fills its bound exactly, by one byte
    more or less, splits the same way on both paths (rows of a few sizes, so every boundary is hit)."""
    values = pa.array([b"x" * (i % 4) for i in range(40)], pa.binary())
    keys = pa.array([None if i % 3 else b"k" for i in range(40)], pa.binary())
    ts = np.arange(40, dtype=np.int64) * 50
    for limit in range(1, 61 + 320):
        compiled, numpy = _both_encoders(
            monkeypatch, values=values, keys=keys, timestamps=ts, max_batch_bytes=limit
        )
        assert [(b.first_row, b.record_count) for b in compiled] == [
            (b.first_row, b.record_count) for b in numpy
        ]
        assert compiled == numpy


def test_header_fields_outside_their_kafka_types_are_refused_by_name() -> None:
    """A producer epoch (int16) or a base sequence (int32) that does not fit the batch header is refused naming the
    field, as the reference builder refuses it (one assembler builds the header for both), not a bare
    struct.error from packing."""
    from broker_runtime.errors import InvalidArgumentError

    for field, value in (("producer_epoch", 1 << 15), ("base_sequence", 1 << 31)):
        with pytest.raises(InvalidArgumentError, match=f"{field} {value} is outside"):
            build_batches(pa.array([b"v"]), timestamp_ms=0, producer_id=1, **{field: value})
