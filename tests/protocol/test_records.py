"""RecordBatch v2 reader and reference builder.

Expectations come from the format description (hand-built byte tables, an independent test-side batch
assembler using struct + crc32c) and from kafka-python's record module (an independent implementation).
"""

from __future__ import annotations

import contextlib
import random
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker_runtime.errors import CorruptRecordError, ProtocolError, UnsupportedVersionError
from broker_runtime.protocol.batch_header import set_log_append_time
from broker_runtime.protocol.records import (
    Record,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    read_batches,
)

CODECS = [0, 1, 2, 3, 4]

# ---------------------------------------------------------------------------------------- test helpers

_HEADER = struct.Struct(">qiibIhiqqqhii")


def zz(v: int) -> bytes:
    """Reference zigzag varint encoder written from the spec (independent of the module under test)."""
    u = (v << 1) ^ (v >> 63)
    u &= (1 << 64) - 1
    out = bytearray()
    while True:
        if u < 0x80:
            out.append(u)
            return bytes(out)
        out.append((u & 0x7F) | 0x80)
        u >>= 7


def raw_record(
    offset_delta: int,
    ts_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]] = (),  # type: ignore[assignment]
    length_adjust: int = 0,
) -> bytes:
    body = b"\x00" + zz(ts_delta) + zz(offset_delta)
    body += zz(-1) if key is None else zz(len(key)) + key
    body += zz(-1) if value is None else zz(len(value)) + value
    body += zz(len(headers))
    for hk, hv in headers:
        kb = hk.encode()
        body += zz(len(kb)) + kb + (zz(-1) if hv is None else zz(len(hv)) + hv)
    return zz(len(body) + length_adjust) + body


def assemble(
    records: bytes,
    *,
    count: int,
    last_offset_delta: int,
    attributes: int = 0,
    base_offset: int = 0,
    base_ts: int = 1000,
    max_ts: int = 1000,
    length_adjust: int = 0,
    good_crc: bool = True,
) -> bytes:
    size = 61 + len(records)
    head = bytearray(
        _HEADER.pack(
            base_offset,
            size - 12 + length_adjust,
            -1,
            2,
            0,
            attributes,
            last_offset_delta,
            base_ts,
            max_ts,
            -1,
            -1,
            -1,
            count,
        )
    )
    batch = bytearray(head + records)
    crc = crc32c.crc32c(bytes(batch[21:]))
    struct.pack_into(">I", batch, 17, crc if good_crc else crc ^ 1)
    return bytes(batch)


def rec_tuple(r: object) -> tuple:  # type: ignore[type-arg]
    return (r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])  # type: ignore[attr-defined]


def kp_build(codec: int, rows: list[tuple[int, bytes | None, bytes | None, list]]) -> bytes:  # type: ignore[type-arg]
    b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
    for i, (ts, k, v, hs) in enumerate(rows):
        assert b.append(i, ts, k, v, hs) is not None
    return bytes(b.build())


def our_build(codec: int, rows: list[tuple[int, bytes | None, bytes | None, list]], **kw: object) -> bytes:  # type: ignore[type-arg]
    b = RecordBatchBuilder(codec, **kw)  # type: ignore[arg-type]
    for ts, k, v, hs in rows:
        b.append(ts, k, v, hs)
    return b.build()


def sample_rows(n: int, seed: int = 0, big: int = 0) -> list[tuple[int, bytes | None, bytes | None, list]]:  # type: ignore[type-arg]
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 3 else (b"" if i % 7 == 0 else (b"value-%d-" % i) * rng.randint(1, 20))
        headers = [] if i % 3 else [("trace", b"abc"), ("none", None), ("ключ", b"")]
        ts = 1_700_000_000_000 + rng.randint(-5000, 5000)
        rows.append((ts, key, value, headers))
    if big:
        rows.append((1_700_000_000_000, b"big", b"\x07" * big, []))
    return rows


# ------------------------------------------------------------------------------------- byte-level build


def test_single_record_byte_table() -> None:
    # Record: length 8 (0x10), attributes 0, tsDelta 0, offsetDelta 0, key len 1 (0x02) 'k',
    # value len 1 (0x02) 'v', 0 headers.
    rec = bytes([0x10, 0x00, 0x00, 0x00, 0x02, ord("k"), 0x02, ord("v"), 0x00])
    expected = bytearray(_HEADER.pack(0, 61 + 9 - 12, -1, 2, 0, 0, 0, 1234, 1234, -1, -1, -1, 1) + rec)
    struct.pack_into(">I", expected, 17, crc32c.crc32c(bytes(expected[21:])))
    b = RecordBatchBuilder()
    assert b.append(1234, b"k", b"v") == 0
    assert b.build() == bytes(expected)


def test_builder_header_conventions() -> None:
    b = RecordBatchBuilder(
        0,
        base_offset=100,
        partition_leader_epoch=7,
        producer_id=42,
        producer_epoch=3,
        base_sequence=9,
        is_transactional=True,
    )
    b.append(5000, b"a", b"1")
    b.append(4000, b"b", b"2")  # earlier than the first: negative delta
    b.append(9000, None, None)
    batch = RecordBatch(b.build())
    h = batch.header
    assert (h.base_offset, h.partition_leader_epoch, h.magic) == (100, 7, 2)
    assert h.base_timestamp == 5000  # the FIRST record's timestamp
    assert h.max_timestamp == 9000
    assert (h.last_offset_delta, h.records_count) == (2, 3)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 9)
    assert h.attributes == 0x10
    assert batch.is_transactional and not batch.is_control
    assert (batch.last_offset, batch.next_offset, batch.last_sequence) == (102, 103, 11)
    assert batch.size == len(b.build())
    batch.verify_crc()
    assert [(r.offset, r.timestamp) for r in batch.records()] == [(100, 5000), (101, 4000), (102, 9000)]
    # The record bytes carry delta -1000 for the second record (zigzag 1999 = 0xcf 0x0f).
    assert raw_record(1, -1000, b"b", b"2") in b.build()


def test_build_without_records_raises() -> None:
    with pytest.raises(ValueError):
        RecordBatchBuilder().build()


def test_builder_rejects_unknown_codec() -> None:
    with pytest.raises(UnsupportedVersionError):
        RecordBatchBuilder(6)


# ------------------------------------------------------------------------------ kafka-python cross-checks


@pytest.mark.parametrize("rows_seed", [0, 1, 2])
def test_uncompressed_bytes_identical_to_kafka_python(rows_seed: int) -> None:
    rows = sample_rows(40, seed=rows_seed)
    # kafka-python writes partitionLeaderEpoch 0 (Java's producer writes -1, our default); align it.
    assert our_build(0, rows, partition_leader_epoch=0) == kp_build(0, rows)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batches(codec: int) -> None:
    rows = sample_rows(60, seed=codec, big=300_000)
    ours = our_build(codec, rows)
    kb = DefaultRecordBatch(ours)
    assert kb.validate_crc()
    assert kb.compression_type == codec
    got = [rec_tuple(r) for r in kb]
    expected = [(i, ts, k, v, [tuple(h) for h in hs]) for i, (ts, k, v, hs) in enumerate(rows)]
    assert got == expected


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_kafka_python_batches(codec: int) -> None:
    rows = sample_rows(60, seed=10 + codec, big=300_000)
    theirs = kp_build(codec, rows)
    batch = RecordBatch(theirs)
    assert batch.compression == codec  # compressible data: kafka-python kept the codec
    batch.verify_crc()
    got = [rec_tuple(r) for r in batch.records()]
    expected = [(i, ts, k, v, [tuple(h) for h in hs]) for i, (ts, k, v, hs) in enumerate(rows)]
    assert got == expected


def test_multi_batch_buffers_both_ways() -> None:
    batches = [our_build(c, sample_rows(5, seed=c), base_offset=10 * c) for c in CODECS]
    buf = b"".join(batches)
    mr = MemoryRecords(buf)
    seen = []
    while (kb := mr.next_batch()) is not None:
        seen.append([r.offset for r in kb])
    assert seen == [[10 * c + i for i in range(5)] for c in CODECS]
    ours = list(read_batches(buf))
    assert [b.position for b in ours] == [sum(len(x) for x in batches[:i]) for i in range(5)]
    assert [[r.offset for r in b.records()] for b in ours] == seen


# ----------------------------------------------------------------------------------- hypothesis round trip

_keys = st.one_of(st.none(), st.binary(max_size=40))
_headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))), max_size=3)
_rows = st.lists(st.tuples(st.integers(-(2**40), 2**41), _keys, _keys, _headers), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows, st.sampled_from(CODECS), st.integers(0, 2**40))
def test_round_trip_builder_reader(rows: list, codec: int, base_offset: int) -> None:  # type: ignore[type-arg]
    data = our_build(codec, rows, base_offset=base_offset)
    (batch,) = list(read_batches(data))
    got = batch.records()
    assert got == [Record(base_offset + i, ts, k, v, list(hs)) for i, (ts, k, v, hs) in enumerate(rows)]
    assert batch.max_timestamp == max(r[0] for r in rows)
    assert batch.base_timestamp == rows[0][0]
    # independent decoder agrees
    assert [rec_tuple(r) for r in DefaultRecordBatch(data)] == [rec_tuple(r) for r in got]


# -------------------------------------------------------------------------------------- LogAppendTime


def test_log_append_time_builder_uses_max_timestamp_for_every_record() -> None:
    b = RecordBatchBuilder(timestamp_type=1, log_append_time=99_999)
    b.append(10, b"a", b"1")
    b.append(20, b"b", b"2")
    batch = RecordBatch(b.build())
    assert batch.timestamp_type == 1 and batch.max_timestamp == 99_999
    assert [r.timestamp for r in batch.records()] == [99_999, 99_999]
    assert [r.timestamp for r in DefaultRecordBatch(b.build())] == [99_999, 99_999]


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time_stamped_in_place(codec: int) -> None:
    buf = bytearray(our_build(codec, sample_rows(8)))
    set_log_append_time(buf, 0, len(buf), 1_800_000_000_000)
    batch = RecordBatch(buf)
    batch.verify_crc()
    assert {r.timestamp for r in batch.records()} == {1_800_000_000_000}


# ------------------------------------------------------------------------------------------ control


@pytest.mark.parametrize(("ctype", "epoch"), [(0, 0), (1, 17), (1, 2**31 - 1)])
def test_control_batch(ctype: int, epoch: int) -> None:
    data = build_control_batch(
        ctype, epoch, producer_id=4242, producer_epoch=5, timestamp=1_700_000_000_123, base_offset=77
    )
    batch = RecordBatch(data)
    batch.verify_crc()
    assert batch.attributes == 0x30 and batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 5, -1)
    assert (batch.records_count, batch.last_offset_delta) == (1, 0)
    assert batch.control_record() == (ctype, epoch)
    (rec,) = batch.records()
    assert rec.key == struct.pack(">hh", 0, ctype)
    assert rec.value == struct.pack(">hi", 0, epoch)
    assert (rec.offset, rec.timestamp) == (77, 1_700_000_000_123)
    (kr,) = list(DefaultRecordBatch(data))
    assert (kr.type, kr.version) == (ctype, 0)


def test_control_record_on_data_batch_raises() -> None:
    with pytest.raises(CorruptRecordError, match="control bit"):
        RecordBatch(our_build(0, sample_rows(1))).control_record()


def test_control_record_with_unknown_type_raises() -> None:
    rec = raw_record(0, 0, struct.pack(">hh", 0, 3), struct.pack(">hi", 0, 1))
    data = assemble(rec, count=1, last_offset_delta=0, attributes=0x30)
    with pytest.raises(CorruptRecordError, match="type 3"):
        RecordBatch(data).control_record()


# ------------------------------------------------------------------------------------ read_batches


def test_read_batches_partial_tail() -> None:
    a = our_build(0, sample_rows(3))
    b = our_build(1, sample_rows(4, seed=3))
    buf = a + b
    for cut in (len(a) + 1, len(a) + 30, len(a) + 61, len(buf) - 1):
        with pytest.raises(CorruptRecordError, match=f"position {len(a)}"):
            list(read_batches(buf[:cut]))
        got = list(read_batches(buf[:cut], allow_partial_tail=True))
        assert [x.position for x in got] == [0]
    assert [x.size for x in read_batches(buf)] == [len(a), len(b)]
    assert list(read_batches(b"")) == []


def test_read_batches_verifies_crc() -> None:
    a = bytearray(our_build(0, sample_rows(3)))
    a[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        list(read_batches(bytes(a)))
    assert len(list(read_batches(bytes(a), verify_crc=False))) == 1


def test_legacy_magic_is_unsupported() -> None:
    data = bytearray(our_build(0, sample_rows(1)))
    data[16] = 1
    with pytest.raises(UnsupportedVersionError):
        RecordBatch(bytes(data))


def test_partition_leader_epoch_not_covered_by_crc() -> None:
    data = bytearray(our_build(0, sample_rows(2)))
    struct.pack_into(">i", data, 12, 12345)
    RecordBatch(bytes(data)).verify_crc()


# -------------------------------------------------------------------------------------- corruption

GOOD = [raw_record(0, 0, b"k0", b"v0"), raw_record(1, 5, None, b"v1", [("h", b"x")])]


def _records_error(data: bytes, match: str | None = None) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        RecordBatch(data).records()


def test_assembler_baseline_is_valid() -> None:
    data = assemble(b"".join(GOOD), count=2, last_offset_delta=1)
    batch = RecordBatch(data)
    batch.verify_crc()
    assert [rec_tuple(r) for r in batch.records()] == [rec_tuple(r) for r in DefaultRecordBatch(data)]


def test_bad_crc() -> None:
    data = assemble(b"".join(GOOD), count=2, last_offset_delta=1, good_crc=False)
    with pytest.raises(CorruptRecordError, match="does not match computed"):
        RecordBatch(data).verify_crc()
    assert not RecordBatch(data).is_crc_valid()


def test_truncated_batch() -> None:
    data = assemble(b"".join(GOOD), count=2, last_offset_delta=1)
    with pytest.raises(CorruptRecordError, match="only"):
        RecordBatch(data[:-3])
    with pytest.raises(CorruptRecordError):
        RecordBatch(data[:40])


def test_batch_length_too_small_cuts_the_last_record() -> None:
    data = assemble(b"".join(GOOD), count=2, last_offset_delta=1, length_adjust=-2)
    _records_error(data)


def test_batch_length_smaller_than_header() -> None:
    data = bytearray(assemble(b"".join(GOOD), count=2, last_offset_delta=1))
    struct.pack_into(">i", data, 8, 20)
    with pytest.raises(CorruptRecordError, match="batchLength 20"):
        RecordBatch(bytes(data))


@pytest.mark.parametrize("adjust", [-1, 1, 3])
def test_wrong_record_length(adjust: int) -> None:
    recs = raw_record(0, 0, b"k0", b"v0", length_adjust=adjust) + GOOD[1]
    _records_error(assemble(recs, count=2, last_offset_delta=1))


def test_record_length_past_the_end() -> None:
    recs = GOOD[0] + zz(500) + b"\x00" * 10
    _records_error(assemble(recs, count=2, last_offset_delta=1), match="length 500")


def test_overlong_varint_in_record() -> None:
    # offsetDelta encoded in 6 bytes
    body = b"\x00" + b"\x00" + b"\x80\x80\x80\x80\x80\x00" + zz(-1) + zz(-1) + zz(0)
    recs = zz(len(body)) + body
    _records_error(assemble(recs, count=1, last_offset_delta=0), match="longer than 5")


@pytest.mark.parametrize(("count", "lod"), [(3, 2), (1, 0), (2, 2), (0, 1), (-1, 1)])
def test_count_mismatch(count: int, lod: int) -> None:
    _records_error(assemble(b"".join(GOOD), count=count, last_offset_delta=lod))


def test_garbage_after_records() -> None:
    _records_error(assemble(b"".join(GOOD) + b"\x00\x01", count=2, last_offset_delta=1), match="left after")


def test_negative_lengths() -> None:
    body = b"\x00\x00\x00" + zz(-2) + zz(-1) + zz(0)
    _records_error(assemble(zz(len(body)) + body, count=1, last_offset_delta=0), match="key length -2")
    body = b"\x00\x00\x00" + zz(-1) + zz(-1) + zz(-1)
    _records_error(assemble(zz(len(body)) + body, count=1, last_offset_delta=0), match="header count -1")
    body = b"\x00\x00\x00" + zz(-1) + zz(-1) + zz(1) + zz(-1) + zz(-1)
    _records_error(assemble(zz(len(body)) + body, count=1, last_offset_delta=0), match="key length -1")


def test_header_key_not_utf8() -> None:
    body = b"\x00\x00\x00" + zz(-1) + zz(-1) + zz(1) + zz(2) + b"\xff\xfe" + zz(-1)
    _records_error(assemble(zz(len(body)) + body, count=1, last_offset_delta=0), match="UTF-8")


def test_offset_deltas_must_increase() -> None:
    recs = raw_record(1, 0, None, b"a") + raw_record(1, 0, None, b"b")
    _records_error(assemble(recs, count=2, last_offset_delta=1), match="offsetDelta")


def test_compacted_batches_need_non_strict() -> None:
    recs = raw_record(0, 0, b"a", b"1") + raw_record(2, 0, b"b", b"2") + raw_record(5, 0, b"c", b"3")
    data = assemble(recs, count=3, last_offset_delta=5, base_offset=100)
    _records_error(data, match="lastOffsetDelta")
    got = RecordBatch(data).records(strict=False)
    assert [r.offset for r in got] == [100, 102, 105]
    empty = assemble(b"", count=0, last_offset_delta=3)
    assert RecordBatch(empty).records(strict=False) == []
    with pytest.raises(CorruptRecordError):
        RecordBatch(empty).records()


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_bad_decompression(codec: int) -> None:
    data = assemble(b"not a compressed stream at all", count=1, last_offset_delta=0, attributes=codec)
    _records_error(data, match="decompress")


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_in_attributes(codec: int) -> None:
    data = assemble(b"".join(GOOD), count=2, last_offset_delta=1, attributes=codec)
    with pytest.raises(UnsupportedVersionError, match=str(codec)):
        RecordBatch(data).records()


def test_huge_record_count_fails_fast() -> None:
    _records_error(assemble(b"".join(GOOD), count=2**31 - 1, last_offset_delta=2**31 - 2), match="cannot fit")


# ------------------------------------------------------------------------------------------ fuzzing

_FUZZ_BASE = {c: our_build(c, sample_rows(6, seed=20 + c)) for c in CODECS}


def _decode_all(buf: bytes) -> None:
    for batch in read_batches(buf, verify_crc=False):
        batch.records()
        batch.records(strict=False)
        if batch.is_control:
            batch.control_record()


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(CODECS), st.data())
def test_fuzz_mutations_only_raise_protocol_errors(codec: int, data: st.DataObject) -> None:
    buf = bytearray(_FUZZ_BASE[codec])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    mutated = bytes(buf[:cut]) if data.draw(st.booleans()) else bytes(buf)
    with contextlib.suppress(CorruptRecordError, UnsupportedVersionError):
        _decode_all(mutated)
    # with CRC checks on, any change to the CRC-covered bytes is caught
    if mutated[21:] != _FUZZ_BASE[codec][21:] and len(mutated) == len(_FUZZ_BASE[codec]):
        with pytest.raises(ProtocolError):
            for batch in read_batches(mutated):
                batch.records()


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=0, max_size=200))
def test_fuzz_random_records_sections(section: bytes) -> None:
    data = assemble(section, count=3, last_offset_delta=2)
    with contextlib.suppress(CorruptRecordError):
        RecordBatch(data).records()
