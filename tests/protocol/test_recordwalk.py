"""The compiled record walk (``broker_runtime/protocol/record_codec/_recordwalk.c``) against the Python walk.

Both walks of :mod:`broker_runtime.protocol.record_codec` must give identical results: the same RecordsScan
from ``scan_records`` (or the same error, message and record index), the same layout arrays from
``record_layout`` and the same decoded rows from ``decode_batches`` (or both CorruptRecordError), on random
valid batches and on random damage to them (changed bytes, a changed records count, cut or extended sections).
"""

from __future__ import annotations

import ast
import os
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_runtime.errors import CorruptRecordError
from broker_runtime.protocol.batch_header import (
    BATCH_HEADER,
    CRC_OFFSET,
    HEADER_SIZE,
    compute_crc,
    parse_header,
)
from broker_runtime.protocol.record_codec import decode, pywalk, walks
from broker_runtime.protocol.record_codec.decode import decode_batches, record_layout
from broker_runtime.protocol.record_codec.encode import build_batch
from broker_runtime.protocol.record_codec.format import pieces
from broker_runtime.protocol.record_codec.scan import scan_records
from broker_runtime.protocol.record_codec.walks import RECORD_WALK_ENV, record_walk

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
COMPILED = walks.compiled


def test_the_compiled_walk_is_built() -> None:
    """The install builds the extension (a compiler is present here); only the variable switches it off."""
    if os.environ.get(RECORD_WALK_ENV, "").lower() == "numpy":
        assert record_walk()[0] == "numpy" and RECORD_WALK_ENV in record_walk()[1]
        return
    assert COMPILED is not None, record_walk()[1]
    assert record_walk() == ("compiled", "")


needs_compiled = pytest.mark.skipif(COMPILED is None, reason="compiled record walk not in use")


def _both(monkeypatch: pytest.MonkeyPatch, fn: Callable[[], Any]) -> tuple[Any, Any]:
    """fn() with the compiled walk, then with the numpy walk: each a value or ("error", message, index)."""
    out = []
    for walk in (COMPILED, None):
        monkeypatch.setattr(walks, "compiled", walk)
        try:
            out.append(fn())
        except CorruptRecordError as exc:
            out.append(("error", str(exc), exc.record_index))
    monkeypatch.setattr(walks, "compiled", COMPILED)
    return out[0], out[1]


def _scan_tuple(scan: Any) -> Any:
    if isinstance(scan, tuple):
        return scan
    return (
        scan.max_timestamp,
        scan.null_keys.tolist(),
        scan.out_of_range.tolist(),
        scan.out_of_range_timestamps.tolist(),
    )


blobs = st.one_of(st.none(), st.binary(max_size=30), st.binary(min_size=60, max_size=200))
headers = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=10))), max_size=3)
rows = st.lists(st.tuples(st.integers(-100, 10_000), blobs, blobs, headers), min_size=1, max_size=40)


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    rs = draw(rows)
    return build_batch(
        pa.array([r[2] for r in rs], pa.binary()),
        pa.array([r[1] for r in rs], pa.binary()),
        pa.array([[{"key": k, "value": v} for k, v in r[3]] for r in rs], HEADERS),
        np.array([r[0] for r in rs], dtype=np.int64) + 1_000_000,
    )


@st.composite
def damage(draw: st.DrawFn, batch: bytes) -> bytes:
    """A damaged copy of ``batch`` (records section and count only; CRC fixed so that the walk is reached)."""
    b = bytearray(batch)
    kind = draw(st.sampled_from(["byte", "bytes", "count", "cut", "extend", "utf8"]))
    if kind == "byte":
        b[draw(st.integers(HEADER_SIZE, len(b) - 1))] = draw(st.integers(0, 255))
    elif kind == "bytes":
        at = draw(st.integers(HEADER_SIZE, len(b) - 1))
        new = draw(st.binary(min_size=1, max_size=6))
        b[at : at + len(new)] = new
    elif kind == "count":
        count = struct.unpack_from(">i", b, BATCH_HEADER.size - 4)[0]
        struct.pack_into(">i", b, BATCH_HEADER.size - 4, max(0, count + draw(st.integers(-3, 3))))
    elif kind == "cut":
        del b[len(b) - draw(st.integers(1, min(8, len(b) - HEADER_SIZE))) :]
    elif kind == "extend":
        b += draw(st.binary(min_size=1, max_size=8))
    else:
        at = draw(st.integers(HEADER_SIZE, len(b) - 1))
        b[at] = draw(st.sampled_from([0x80, 0xC0, 0xED, 0xF4, 0xFF]))
    struct.pack_into(">i", b, 8, len(b) - 12)  # batchLength
    struct.pack_into(">I", b, CRC_OFFSET, compute_crc(b, 0, len(b)))
    return bytes(b)


def _both_errors(c: Any, n: Any) -> bool:
    return isinstance(c, tuple) and isinstance(n, tuple) and c[0] == n[0] == "error"


def _compare_all(monkeypatch: pytest.MonkeyPatch, batch: bytes, low: int, high: int) -> None:
    header = parse_header(batch)
    section = batch[HEADER_SIZE:]
    c, n = _both(
        monkeypatch,
        lambda: _scan_tuple(
            scan_records(header, section, position=7, timestamp_low=low, timestamp_high=high)
        ),
    )
    assert c == n
    c, n = _both(monkeypatch, lambda: scan_records(header, section).max_timestamp)
    assert c == n

    def layout() -> Any:
        lay = record_layout(batch, allow_partial_tail=False)
        if lay is None:
            return None
        fields = ("starts", "ends", "ts_delta", "offset_delta", "key_start", "key_len", "value_start")
        return [getattr(lay, f).tolist() for f in (*fields, "value_len", "header_count", "headers_pos")]

    c, n = _both(monkeypatch, layout)
    assert c == n or _both_errors(c, n)  # the decoder's errors may be worded differently
    c, n = _both(monkeypatch, lambda: decode_batches(batch, allow_partial_tail=False).to_pylist())
    assert c == n or _both_errors(c, n)  # the decoder's errors may be worded differently


@needs_compiled
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data(), st.integers(1_000_000, 1_005_000), st.integers(1_005_000, 1_010_000))
def test_both_walks_agree_on_random_valid_and_damaged_batches(
    monkeypatch: pytest.MonkeyPatch, data: st.DataObject, low: int, high: int
) -> None:
    batch = data.draw(batches())
    _compare_all(monkeypatch, batch, low, high)
    _compare_all(monkeypatch, data.draw(damage(batch)), low, high)


@needs_compiled
def test_both_walks_name_the_same_record_in_many_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the numpy walk's first chunk: the error found in the second chunk names the same record."""
    n = pywalk.SCAN_CHUNK + 500
    rng = np.random.default_rng(3)
    values = pa.array([b"v" * int(k) for k in rng.integers(0, 40, size=n)])
    batch = bytearray(build_batch(values, None, timestamp_ms=1_000))
    header = parse_header(batch)
    clean = bytes(batch[HEADER_SIZE:])
    assert _both(monkeypatch, lambda: _scan_tuple(scan_records(header, clean)))[0][0] == 1_000
    for at in rng.integers(len(clean) // 2, len(clean), size=3):
        section = bytearray(clean)
        section[int(at)] ^= 0x41
        c, n = _both(monkeypatch, lambda s=bytes(section): _scan_tuple(scan_records(header, s)))
        assert c == n


def _iter_fixed_cases() -> Iterator[tuple[str, bytes]]:
    ok = build_batch(pa.array([b"a", b"bb", b"ccc"]), pa.array([b"k", None, b"k"]), timestamp_ms=5)
    yield "ok", ok
    section = bytearray(ok[HEADER_SIZE:])
    section[0] = 0x7F  # record 0 claims 63 bytes
    yield "long first record", ok[:HEADER_SIZE] + bytes(section)


@needs_compiled
@pytest.mark.parametrize("name", [name for name, _ in _iter_fixed_cases()])
def test_fixed_cases_agree(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    batch = dict(_iter_fixed_cases())[name]
    header = parse_header(batch)
    c, n = _both(monkeypatch, lambda: _scan_tuple(scan_records(header, batch[HEADER_SIZE:])))
    assert c == n


def _cut_headers_batch() -> bytes:
    """One record (null key and value, two headers ("", null)) whose batch lost its last 3 bytes: the record
    takes 11 bytes (length 10), its records section holds 8, and its first header key lies past the section's end.
    Batch length and CRC are fixed so that the walks are reached (the case hypothesis found)."""
    ok = build_batch(
        pa.array([None], pa.binary()),
        pa.array([None], pa.binary()),
        pa.array([[{"key": "", "value": None}, {"key": "", "value": None}]], HEADERS),
        timestamp_ms=1_000_000,
    )
    b = bytearray(ok[:-3])
    struct.pack_into(">i", b, 8, len(b) - 12)  # batchLength
    struct.pack_into(">I", b, CRC_OFFSET, compute_crc(b, 0, len(b)))
    return bytes(b)


@pytest.mark.parametrize("walk", ["compiled", "numpy"])
def test_a_record_past_the_section_end_is_a_corrupt_record_not_an_arrow_error(
    monkeypatch: pytest.MonkeyPatch, walk: str
) -> None:
    """The numpy scan checked header keys as UTF-8 (offsets handed to pyarrow) before finding that the record
    runs past its section: pyarrow's ArrowInvalid escaped instead of CorruptRecordError (a broker traceback on
    produce). Both walks must name the record and say that it runs past the section."""
    if walk == "compiled" and COMPILED is None:
        pytest.skip("compiled record walk not in use")
    monkeypatch.setattr(walks, "compiled", COMPILED if walk == "compiled" else None)
    batch = _cut_headers_batch()
    header = parse_header(batch)
    assert header.records_count == 1 and batch[HEADER_SIZE:][0] == 0x14  # record length 10, section 8 bytes
    with pytest.raises(
        CorruptRecordError, match="record 0: the record runs 3 bytes past the end of the records"
    ):
        scan_records(header, batch[HEADER_SIZE:], position=7, timestamp_low=0, timestamp_high=2_000_000)
    with pytest.raises(CorruptRecordError):
        decode_batches(batch, allow_partial_tail=False)


def test_record_field_bounds_outside_the_arena_are_refused_before_pyarrow() -> None:
    """The backstop under both numpy walks: bounds past the arena raise CorruptRecordError, not ArrowInvalid."""
    arena = pa.py_buffer(b"abcdefgh")
    assert pieces(arena, np.array([0, 3, 8], np.int64)).to_pylist() == [b"abc", b"defgh"]
    for bounds in ([0, 9], [-1, 2]):
        with pytest.raises(CorruptRecordError, match="outside the 8 bytes of the records"):
            pieces(arena, np.array(bounds, np.int64))


@needs_compiled
def test_gather_copies_the_slices_and_refuses_ones_outside_the_arena() -> None:
    """``gather`` (the decoder's key and value columns) against plain slicing, nulls included; and its checks."""
    arena = bytes(range(256)) * 4
    start = np.array([0, 10, 10, 1000, 5, 1024], dtype=np.int64)
    length = np.array([3, 0, -1, 24, 250, 0], dtype=np.int64)
    column = decode._gather_compiled(COMPILED, arena, start, length)
    want = [None if k < 0 else arena[s : s + k] for s, k in zip(start.tolist(), length.tolist(), strict=True)]
    assert column.type == pa.binary() and column.to_pylist() == want and column.null_count == 1
    offsets = np.empty(2, dtype=np.int32)
    for s, k in [(1020, 5), (-1, 1), (1025, 0)]:  # past the end, before the start
        with pytest.raises(ValueError, match="outside the arena"):
            COMPILED.gather(
                arena, np.array([s], np.int64), np.array([k], np.int64), offsets, np.empty(k, np.uint8)
            )
    with pytest.raises(ValueError, match="the slices hold 3 bytes, out has 4"):
        COMPILED.gather(
            arena, np.array([0], np.int64), np.array([3], np.int64), offsets, np.empty(4, np.uint8)
        )
    with pytest.raises(ValueError, match="offsets n \\+ 1 int32"):
        COMPILED.gather(
            arena, np.array([0], np.int64), np.array([3], np.int64), offsets[:1], np.empty(3, np.uint8)
        )


def test_without_the_extension_the_numpy_walk_runs_and_says_why() -> None:
    """An install without a C compiler has no ``_recordwalk``: importing the module then still works, the numpy
    walk runs, and ``record_walk()`` names the missing module (what the broker's start warning shows)."""
    code = (
        "import sys; sys.modules['broker_runtime.protocol.record_codec._recordwalk'] = None\n"
        "import pyarrow as pa\n"
        "from broker_runtime.protocol.record_codec import decode, encode, walks\n"
        "b = encode.build_batch(pa.array([b'v', None]), pa.array([b'k', b'k']), timestamp_ms=5)\n"
        "assert decode.decode_batches(b).num_rows == 2\n"
        "print(walks.record_walk())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != RECORD_WALK_ENV}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    walk, why = ast.literal_eval(done.stdout)
    assert walk == "numpy" and "broker_runtime.protocol.record_codec._recordwalk cannot be imported" in why
