"""The Python record walk (numpy): what runs when the compiled walk (``_recordwalk.c`` beside this file) does
not (see :mod:`.walks`); the same entry points, the same checks and the same results.

Entry points, as in the compiled walk: :func:`layout` (the decoder's walk over several batches: where every
record, key and value lies), :func:`header_spans` (every header's key and value, after :func:`layout`) and
:func:`scan` (the validation of one batch on the produce path). Formats: :mod:`.format`.

How it avoids per-record Python work. Record boundaries form a sequential chain (each record starts with its
length), so one minimal Python loop, :func:`record_starts` (about 80 ns a record), reads only the length varint
of each record; :func:`record_chain` finds the same starts by verified speculation when most records have one
size (:func:`scan`). Every field is then decoded with numpy at the known positions, many records per step
(:class:`Arena`, :func:`record_head`, :func:`record_body`, :func:`header_spans`).

Invariants. Every position read is clipped into the arena (a corrupt length may point past it) and every field
bound is checked against its record's end before anything reaches pyarrow; the records of a batch must tile its
section exactly. The vectorized checks run field by field over many records, so they find *that* a record is
bad, not always the first bad one: :func:`scan` then walks the stretch record by record
(:func:`scan_reference`) to name the first bad one with the compiled walk's message, so ``scan_records``'
errors are identical on both walks; the decoder's (:func:`layout`, :func:`header_spans`) may be worded
differently, both raise :class:`~broker_runtime.errors.CorruptRecordError`.

Pure functions over read-only inputs (the caches hold read-only arrays); thread-safe.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from broker_runtime.errors import CorruptRecordError
from broker_runtime.protocol.batch_header import NO_TIMESTAMP, BatchHeader
from broker_runtime.protocol.record_codec.format import (
    MAX_VARINT_BYTES,
    MAX_VARLONG_BYTES,
    pieces,
    unzigzag,
    uvarint_sizes,
    walk_error,
    zigzag,
)

__all__ = [
    "SCAN_CHUNK",
    "Arena",
    "Fail",
    "header_spans",
    "layout",
    "record_chain",
    "record_starts",
    "scan",
    "scan_reference",
]

#: Records checked per vectorized step of :func:`scan`: bounds its memory (about 150 bytes a record of numpy
#: arrays) whatever the records count of the batch.
SCAN_CHUNK = 65536

Bytes = bytes | bytearray | memoryview


class Arena:
    """The bytes every selected records section lives in, as numpy for vectorized varint reads."""

    __slots__ = ("a", "last")

    def __init__(self, arena: Bytes) -> None:
        self.a = np.frombuffer(arena, dtype=np.uint8)
        self.last = len(self.a) - 1

    def byte(self, pos: np.ndarray) -> np.ndarray:
        return self.a.take(pos, mode="clip")  # a corrupt length may point past the end: caught later

    def varints(
        self, pos: np.ndarray, max_bytes: int, fail: Fail, what: str
    ) -> tuple[np.ndarray, np.ndarray | int]:
        """Zigzag varints at ``pos``: (int64 values, encoded sizes); overlong ones raise.

        The sizes are the int 1 when every varint is one byte (the common case for most fields); varints of
        at most two bytes are read without index arrays (fewer numpy steps)."""
        first = self.byte(pos)
        if not len(first) or first.max() < 0x80:
            v = first.astype(np.int64)
            return (v >> 1) ^ -(v & 1), 1
        second = self.byte(pos + 1)
        more = first >= 0x80
        if not (more & (second >= 0x80)).any():  # at most two bytes each: no index arrays
            v = (first & 0x7F).astype(np.int64) | ((second & 0x7F).astype(np.int64) << 7) * more
            return (v >> 1) ^ -(v & 1), 1 + more.view(np.uint8).astype(np.int64)
        b = first.astype(np.uint64)
        u = b & np.uint64(0x7F)
        size = np.ones(len(pos), dtype=np.int64)
        idx = np.flatnonzero(b >= 0x80)
        k = 1
        while len(idx):
            if k == max_bytes:
                fail(idx[0], f"{what} varint is longer than {max_bytes} bytes")
            b = self.byte(pos[idx] + k).astype(np.uint64)
            u[idx] |= (b & np.uint64(0x7F)) << np.uint64(7 * k)
            size[idx] += 1
            idx = idx[b >= 0x80]
            k += 1
        values = unzigzag(u)
        if max_bytes == MAX_VARINT_BYTES:
            values = values.astype(np.int32).astype(np.int64)  # 32-bit wrap, as Java's int arithmetic
        return values, size


class Fail:
    """Raises CorruptRecordError for record ``i`` (or header ``i``) naming its batch and index.

    ``positions[b]``: where batch b lies in the input; ``first_record[b]``: the index of its first record among
    all the records walked (negative offsets name records of a chunk by their index in the batch)."""

    __slots__ = ("first_record", "positions", "rows")

    def __init__(
        self, positions: np.ndarray, first_record: np.ndarray, rows: np.ndarray | None = None
    ) -> None:
        self.positions = positions
        self.first_record = first_record
        self.rows = rows  # header index -> record index, when failing on headers

    def __call__(self, i: int | np.integer, message: str) -> None:
        record = int(i) if self.rows is None else int(self.rows[int(i)])
        b = int(np.searchsorted(self.first_record, record, side="right")) - 1
        raise walk_error(int(self.positions[b]), record - int(self.first_record[b]), message)

    def check(self, bad: np.ndarray, message: str) -> None:
        if bad.any():
            self(int(np.flatnonzero(bad)[0]), message)

    def for_headers(self, rows: np.ndarray) -> Fail:
        return Fail(self.positions, self.first_record, rows)


# ------------------------------------------------------------------------------------- record starts


def record_starts(data: Bytes, pos: int, k: int, first: int, position: int, out: list[int]) -> int:
    """Append the starts of the next ``k`` records from ``pos`` (record ``first`` onwards); return the end.

    The one per-record Python loop of this walk: only the length varint of each record is read (as unsigned:
    a negative length is caught by the vectorized checks), and reading past ``data`` raises. The caller checks
    that the end is its section's end (``data`` may hold more sections after it).
    """
    i = first
    append = out.append
    try:
        for i in range(first, first + k):
            append(pos)
            b = data[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)
                continue
            u = b & 0x7F
            shift = 7
            q = pos + 1
            while True:
                b = data[q]
                q += 1
                u |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift >= 7 * MAX_VARINT_BYTES:
                    raise walk_error(
                        position, i, f"record length varint is longer than {MAX_VARINT_BYTES} bytes"
                    )
            pos = q + (u >> 1)
    except IndexError:
        raise walk_error(
            position,
            i,
            "the record starts past the end of the records section (recordsCount or a record length is wrong)",
        ) from None
    return pos


#: :func:`record_chain`: a speculative round guesses at most this many starts at first, four times more after
#: a round whose guesses all held; one that keeps fewer than :data:`_SPECULATE_MIN` (sizes vary) hands the next
#: records to :func:`record_starts`, in runs that grow with each such round in a row (:data:`_WALK_RUNS`).
_SPECULATE_WINDOW = 64
_SPECULATE_MIN = 32
_WALK_RUNS = (1, 16, 4096)
#: Chunks of fewer records are walked in Python at once: a speculative round costs about as much as walking
#: a few hundred records.
_SPECULATE_FROM = 256


def record_chain(
    a: np.ndarray, data: Bytes, pos: int, k: int, first: int, position: int
) -> tuple[np.ndarray, int]:
    """The starts of the next ``k`` records from ``pos`` (record ``first`` onwards) and the end of the last:
    what :func:`record_starts` returns (or raises), found faster when many records have one size.

    Record boundaries are a chain (each record starts with its length), so they are found by speculation that
    numpy verifies: from a known start whose length varint is read (size s, record size ``stride``), guess that
    the following records have the same size, and keep the guesses while the s bytes at each guessed start are
    the very bytes of that varint (compared over strided views of the data): a record whose length varint is
    byte for byte the same has the same size, so every kept start follows from a verified one and the result
    is exact whatever the data. Records of one size -- most batches -- cost a few rounds per chunk; when a
    round keeps few records, :func:`record_starts` reads the next ones (see :data:`_WALK_RUNS`). Any anomaly
    (a varint longer than 5 bytes, a start past the end) is left to :func:`record_starts`, whose errors name
    the record. A length is read as it reads it: unsigned, the record size being ``s + (u >> 1)`` (a negative
    length is caught by the vectorized checks afterwards).
    """
    end = len(a)
    out = np.empty(k, dtype=np.int64)
    done = 0
    walk_next = 0  # records for record_starts before the next speculative round
    walk_bytes: bytes | None = None
    window = _SPECULATE_WINDOW
    poor = 0  # speculative rounds in a row that kept few records
    while done < k:
        left = k - done
        if k >= _SPECULATE_FROM and left >= _SPECULATE_MIN and not walk_next:
            # The length varint of the record at pos, read as record_starts reads it; anomalies go to it.
            size = 0
            u = 0
            while size < MAX_VARINT_BYTES and pos + size < end:
                byte = int(a[pos + size])
                u |= (byte & 0x7F) << (7 * size)
                size += 1
                if byte < 0x80:
                    break
            else:
                walk_next = 1
                continue
            stride = size + (u >> 1)
            guesses = min(left, window, (end - size - pos) // stride + 1)
            # Record j of the round starts at pos + j * stride if every record before it has the very bytes
            # of this length varint (the same size): compare them over strided views (no index arrays).
            stop = pos + stride * (guesses - 1) + 1
            same = a[pos:stop:stride] == a[pos]
            for m in range(1, size):
                same &= a[pos + m : stop + m : stride] == a[pos + m]
            kept = guesses if same.all() else int(np.argmin(same))  # >= 1: record 0 matches itself
            out[done : done + kept] = pos + stride * np.arange(kept, dtype=np.int64)
            done += kept
            pos += stride * kept
            if kept == guesses:
                window *= 4
                poor = 0
            elif kept < _SPECULATE_MIN:
                walk_next = _WALK_RUNS[min(poor, len(_WALK_RUNS) - 1)]  # sizes vary: read on in Python
                poor += 1
                window = _SPECULATE_WINDOW
            else:
                poor = 0
            continue
        n_walk = (
            min(left, walk_next) if walk_next and k >= _SPECULATE_FROM and left >= _SPECULATE_MIN else left
        )
        if walk_bytes is None:
            walk_bytes = data if isinstance(data, bytes) else bytes(data)
        run: list[int] = []
        pos = record_starts(walk_bytes, pos, n_walk, first + done, position, run)
        out[done : done + n_walk] = run
        done += n_walk
        walk_next = 0
    return out, pos


# ------------------------------------------------------------------------------------- record fields


def record_head(
    ar: Arena, starts: np.ndarray, fail: Fail, end: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The length and timestampDelta of the records at ``starts`` (their data ending by ``end``): (each record's
    end, timestampDelta, where its offsetDelta starts). The attributes byte is skipped, not interpreted."""
    length, size = ar.varints(starts, MAX_VARINT_BYTES, fail, "record length")
    fail.check(length < 0, "negative record length")
    rec_end = starts + size + length
    # every field bound after this is checked against rec_end: it must lie inside the data (a chain found by
    # speculation can end past it) before any bound reaches pyarrow (the header keys' UTF-8 check)
    fail.check(rec_end > end, "the record runs past the end of the records section")
    pos = starts + size + 1  # the attributes byte
    ts_delta, size = ar.varints(pos, MAX_VARLONG_BYTES, fail, "timestampDelta")
    return rec_end, ts_delta, pos + size


def record_body(
    ar: Arena, pos: np.ndarray, rec_end: np.ndarray, fail: Fail
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The key, value and headers count of the records whose key length starts at ``pos``: (key start, key
    length, value start, value length (-1 null), headers count, where the headers start)."""
    key_len, size = ar.varints(pos, MAX_VARINT_BYTES, fail, "key length")
    fail.check(key_len < -1, "key length below -1")
    key_start = pos + size
    pos = key_start + np.maximum(key_len, 0)
    fail.check(pos > rec_end, "key runs past the end of the record")
    value_len, size = ar.varints(pos, MAX_VARINT_BYTES, fail, "value length")
    fail.check(value_len < -1, "value length below -1")
    value_start = pos + size
    pos = value_start + np.maximum(value_len, 0)
    fail.check(pos > rec_end, "value runs past the end of the record")
    header_count, size = ar.varints(pos, MAX_VARINT_BYTES, fail, "headers count")
    pos = pos + size
    fail.check(
        (header_count < 0) | (header_count * 2 > rec_end - pos),
        "headers count is negative or larger than the record can hold",
    )
    return key_start, key_len, value_start, value_len, header_count, pos


def header_spans(
    ar: Arena,
    headers_pos: np.ndarray,
    header_count: np.ndarray,
    rec_end: np.ndarray,
    fail: Fail,
    header_offsets: np.ndarray | None = None,
) -> np.ndarray:
    """Every header's (key start, key length, value start, value length (-1 null)) as 4 rows of int64, record by
    record, so in arena order (``header_offsets``: the n + 1 cumulative header counts, computed when not given);
    also checks that each record's fields end exactly at its end. One numpy step per header index (the first
    headers of all records, then the second...)."""
    rows = np.flatnonzero(header_count > 0)
    if not len(rows):
        fail.check(headers_pos != rec_end, "record length does not match the fields it holds")
        return np.empty((4, 0), dtype=np.int64)
    if header_offsets is None:
        header_offsets = np.zeros(len(header_count) + 1, dtype=np.int64)
        np.cumsum(header_count, out=header_offsets[1:])
    spans = np.empty((4, int(header_offsets[-1])), dtype=np.int64)
    pos = headers_pos.copy()
    j = 0
    while len(rows):
        slot = header_offsets[rows] + j
        hfail = fail.for_headers(rows)
        p = pos[rows]
        kl, sz = ar.varints(p, MAX_VARINT_BYTES, hfail, "header key length")
        hfail.check(kl < 0, "negative header key length")
        spans[0, slot] = p + sz
        spans[1, slot] = kl
        p = p + sz + kl
        hfail.check(p > rec_end[rows], "header key runs past the end of the record")
        vl, sz = ar.varints(p, MAX_VARINT_BYTES, hfail, "header value length")
        hfail.check(vl < -1, "header value length below -1")
        spans[2, slot] = p + sz
        spans[3, slot] = vl
        p = p + sz + np.maximum(vl, 0)
        hfail.check(p > rec_end[rows], "header value runs past the end of the record")
        pos[rows] = p
        j += 1
        rows = rows[header_count[rows] > j]
    fail.check(pos != rec_end, "record length does not match the fields it holds")
    return spans


# ---------------------------------------------------------------------------------------------- layout


def layout(arena: Bytes, batches: np.ndarray, fail: Fail) -> tuple[np.ndarray, ...]:
    """The decoder's walk (the compiled ``layout``'s rows): ``batches`` holds int64 rows (begin, end, count,
    lastOffsetDelta) of records sections in ``arena``; returns 10 arrays over all the records: start, end,
    timestampDelta, offsetDelta, key start, key length, value start, value length, headers count, headers
    position. offsetDeltas must increase within [0, lastOffsetDelta]. Headers are located, not walked
    (:func:`header_spans`)."""
    starts_list: list[int] = []
    for b, (begin, end, count, _) in enumerate(batches.tolist()):
        position = int(fail.positions[b])
        pos = record_starts(arena, begin, count, 0, position, starts_list)
        if pos != end:
            raise walk_error(
                position,
                None,
                f"recordsCount {count} records do not end at the end of the {end - begin}-byte records "
                f"section (they end at byte {pos - begin})",
            )
    n = len(starts_list)
    starts = np.array(starts_list, dtype=np.int64)
    if n == 0:
        return (starts,) * 10
    ar = Arena(arena)
    rec_end, ts_delta, p = record_head(ar, starts, fail, len(ar.a))
    offset_delta, size = ar.varints(p, MAX_VARINT_BYTES, fail, "offsetDelta")
    p = p + size
    counts = batches[:, 2]
    last_delta = np.repeat(batches[:, 3], counts)
    fail.check((offset_delta < 0) | (offset_delta > last_delta), "offsetDelta outside [0, lastOffsetDelta]")
    if n > 1:
        not_first = np.ones(n - 1, dtype=bool)
        boundaries = fail.first_record[1:]
        not_first[boundaries[(boundaries > 0) & (boundaries < n)] - 1] = False
        fail.check(
            np.concatenate([[False], (np.diff(offset_delta) <= 0) & not_first]),
            "offsetDelta does not increase",
        )
    return (starts, rec_end, ts_delta, offset_delta, *record_body(ar, p, rec_end, fail))


# ------------------------------------------------------------------------------------------------ scan


def scan(
    header: BatchHeader, data: Bytes, position: int, low_bound: int, high_bound: int, check_ts: bool
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """The produce path's validation of one batch (the compiled ``scan``): (max timestamp, null-key indexes,
    out-of-range indexes and timestamps), in chunks of :data:`SCAN_CHUNK` records; offsetDelta of record i must
    be i, header keys valid UTF-8.

    The vectorized checks of a chunk find *that* it holds a bad record; :func:`scan_reference` then walks it
    record by record to name the first bad one, as the compiled walk does."""
    count = header.records_count
    end = len(data)
    ar = Arena(data)
    arena_buf = pa.py_buffer(data)
    positions = np.array([position], dtype=np.int64)
    log_append = bool(header.timestamp_type)
    low = np.int64(low_bound)
    high = np.int64(high_bound)
    max_ts = NO_TIMESTAMP
    null_keys: list[np.ndarray] = []
    bad_idx: list[np.ndarray] = []
    bad_ts: list[np.ndarray] = []
    pos = 0
    first = 0
    chunk_pos = chunk_first = 0  # where the chunk being checked starts
    try:
        while first < count:
            chunk_pos, chunk_first = pos, first
            k = min(SCAN_CHUNK, count - first)
            starts, pos = record_chain(ar.a, data, pos, k, first, position)
            fail = Fail(positions, np.array([-first], dtype=np.int64))
            rec_end, ts_delta, p = record_head(ar, starts, fail, end)
            index_size = _index_varint_matches(ar.a, p, first, k)
            if (
                index_size is None
            ):  # not the indexes' shortest encodings: decode (a longer one is still valid)
                offset_delta, size = ar.varints(p, MAX_VARINT_BYTES, fail, "offsetDelta")
                fail.check(
                    offset_delta != np.arange(first, first + k, dtype=np.int64),
                    "offsetDelta is not the record's index in the batch",
                )
                p = p + size
            else:
                p = p + index_size
            _, key_len, _, _, header_count, p = record_body(ar, p, rec_end, fail)
            spans = header_spans(ar, p, header_count, rec_end, fail)
            if spans.shape[1]:
                _check_utf8_keys(arena_buf, spans[0], spans[1], position)
            null_keys.append(np.flatnonzero(key_len < 0) + first)
            if not log_append:
                ts = header.base_timestamp + ts_delta
                max_ts = max(max_ts, int(ts.max()))
                if check_ts:
                    bad = (ts != NO_TIMESTAMP) & ((ts < low) | (ts > high))
                    if bad.any():
                        idx = np.flatnonzero(bad)
                        bad_idx.append(idx + first)
                        bad_ts.append(ts[idx])
            first += k
        if pos != end:
            what = (
                f"{end - pos} bytes remain"
                if pos < end
                else f"the last record runs {pos - end} bytes past the end"
            )
            raise walk_error(
                position,
                count - 1 if count else None,
                f"{what} of the records section after its {count} records (recordsCount or a record length is "
                "wrong)",
            )
    except CorruptRecordError:
        # name the first bad record from this chunk on, as the compiled walk does
        scan_reference(data, chunk_pos, chunk_first, count, position)
        raise  # not reached unless the walks disagree (a bug): then the vectorized finding stands
    empty = np.zeros(0, dtype=np.int64)
    return (
        max_ts,
        np.concatenate(null_keys) if null_keys else empty,
        np.concatenate(bad_idx) if bad_idx else empty,
        np.concatenate(bad_ts) if bad_ts else empty,
    )


def scan_reference(data: Bytes, pos: int, first: int, count: int, position: int) -> None:
    """Walk records ``first ..`` from ``pos`` one by one, in field order, with every check of :func:`scan`;
    raise for the first bad record (the compiled walk's order and wording). Error reporting only: about 2 us a
    record."""
    end = len(data)
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data

    def varint(p: int, limit: int, max_bytes: int, what: str, i: int) -> tuple[int, int]:
        u = 0
        for k in range(max_bytes):
            if p + k >= limit:
                raise walk_error(position, i, f"{what} runs past the end of the record")
            b = view[p + k]
            u |= (b & 0x7F) << (7 * k)
            if b < 0x80:
                u &= (1 << 64) - 1
                v = (u >> 1) ^ -(u & 1)
                if max_bytes == MAX_VARINT_BYTES:
                    v = ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)  # 32-bit wrap, as Java's int
                return v, p + k + 1
        raise walk_error(position, i, f"{what} varint is longer than {max_bytes} bytes")

    for i in range(first, count):
        if pos >= end:
            raise walk_error(
                position,
                i,
                "the record starts past the end of the records section (recordsCount or a record length is wrong)",
            )
        try:
            length, p = varint(pos, end, MAX_VARINT_BYTES, "record length", i)
        except CorruptRecordError as exc:
            if "runs past" not in str(exc):
                raise
            raise walk_error(
                position,
                i,
                "the record runs past the end of the records section (recordsCount or a record length is wrong)",
            ) from None
        if length < 0:
            raise walk_error(position, i, "negative record length")
        if length > end - p:
            raise walk_error(
                position,
                i,
                f"the record runs {length - (end - p)} bytes past the end of the records section (recordsCount "
                "or a record length is wrong)",
            )
        rec_end = p + length
        if p >= rec_end:
            raise walk_error(position, i, "attributes run past the end of the record")
        p += 1
        _, p = varint(p, rec_end, MAX_VARLONG_BYTES, "timestampDelta", i)
        offset_delta, p = varint(p, rec_end, MAX_VARINT_BYTES, "offsetDelta", i)
        for what in ("key", "value"):
            n, p = varint(p, rec_end, MAX_VARINT_BYTES, f"{what} length", i)
            if n < -1:
                raise walk_error(position, i, f"{what} length below -1")
            if n > rec_end - p:
                raise walk_error(position, i, f"{what} runs past the end of the record")
            p += max(n, 0)
        headers, p = varint(p, rec_end, MAX_VARINT_BYTES, "headers count", i)
        if headers < 0 or headers * 2 > rec_end - p:
            raise walk_error(position, i, "headers count is negative or larger than the record can hold")
        for _ in range(headers):
            n, p = varint(p, rec_end, MAX_VARINT_BYTES, "header key length", i)
            if n < 0:
                raise walk_error(position, i, "negative header key length")
            if n > rec_end - p:
                raise walk_error(position, i, "header key runs past the end of the record")
            try:
                bytes(view[p : p + n]).decode()
            except UnicodeDecodeError:
                raise walk_error(position, None, "a record header key is not valid UTF-8") from None
            p += n
            n, p = varint(p, rec_end, MAX_VARINT_BYTES, "header value length", i)
            if n < -1:
                raise walk_error(position, i, "header value length below -1")
            if n > rec_end - p:
                raise walk_error(position, i, "header value runs past the end of the record")
            p += max(n, 0)
        if p != rec_end:
            raise walk_error(position, i, "record length does not match the fields it holds")
        if offset_delta != i:
            raise walk_error(position, i, "offsetDelta is not the record's index in the batch")
        pos = rec_end
    if pos != end:
        raise walk_error(
            position,
            count - 1 if count else None,
            f"{end - pos} bytes remain of the records section after its {count} records (recordsCount or a "
            "record length is wrong)",
        )


@functools.lru_cache(maxsize=8)
def _index_varints(first: int, k: int) -> tuple[np.ndarray, tuple[tuple[int, np.ndarray], ...]]:
    """The varint encodings of the record indexes ``first .. first + k - 1`` (what each offsetDelta must be):
    (sizes, and per byte m of the encodings the first row that has such a byte with the bytes from there).
    Sizes grow with the index, so the rows with an m-th byte are a suffix. Cached: batches of one records
    count share them. Read-only arrays."""
    u = zigzag(np.arange(first, first + k, dtype=np.int64))
    sizes = uvarint_sizes(u)
    sizes.flags.writeable = False
    columns = []
    for m in range(int(sizes.max()) if k else 0):
        row = int(np.searchsorted(sizes, m + 1))  # first row whose encoding has byte m
        group = (u[row:] >> np.uint64(7 * m)) & np.uint64(0x7F)
        col = (group | (sizes[row:] > m + 1).astype(np.uint64) << np.uint64(7)).astype(np.uint8)
        col.flags.writeable = False
        columns.append((row, col))
    return sizes, tuple(columns)


def _index_varint_matches(a: np.ndarray, pos: np.ndarray, first: int, k: int) -> np.ndarray | None:
    """The sizes of the offsetDelta varints at ``pos`` when they are exactly the encodings of the record indexes
    ``first ..`` (compared byte for byte with :func:`_index_varints`, no decoding), else None."""
    sizes, columns = _index_varints(first, k)
    for m, (row, col) in enumerate(columns):
        if not np.array_equal(a.take(pos[row:] + m, mode="clip"), col):
            return None
    return sizes


def _check_utf8_keys(arena_buf: pa.Buffer, key_start: np.ndarray, key_len: np.ndarray, position: int) -> None:
    """Header keys (at ``key_start``, in arena order as :func:`header_spans` gives them) must be valid UTF-8: the
    decoder reads them as strings."""
    bounds = np.empty(2 * len(key_start), dtype=np.int64)
    bounds[0::2] = key_start
    bounds[1::2] = key_start + key_len
    keys_and_gaps = pieces(arena_buf, bounds)
    pick = np.zeros(len(bounds) - 1, dtype=bool)
    pick[0::2] = True
    keys = keys_and_gaps.filter(pa.array(pick)).cast(pa.binary())
    as_text = pa.Array.from_buffers(pa.string(), len(keys), keys.buffers(), offset=keys.offset)
    try:
        as_text.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise CorruptRecordError(
            f"batch at position {position}: a record header key is not valid UTF-8"
        ) from exc
