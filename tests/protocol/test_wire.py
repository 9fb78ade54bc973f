"""Tests of the wire primitives (byte tables from the protocol description) and of frame splitting."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_runtime.errors import ProtocolError
from broker_runtime.protocol.framing import FrameDecoder, FramePool, frame
from broker_runtime.protocol.primitives import wire

# (encoded, value): LEB128, seven bits per byte, least significant group first.
UVARINT_TABLE = [
    (b"\x00", 0),
    (b"\x01", 1),
    (b"\x7f", 127),
    (b"\x80\x01", 128),
    (b"\xac\x02", 300),
    (b"\xff\x7f", 16383),
    (b"\x80\x80\x01", 16384),
    (b"\xff\xff\xff\xff\x07", 2**31 - 1),
    (b"\xff\xff\xff\xff\x0f", 2**32 - 1),
]


@pytest.mark.parametrize(("encoded", "value"), UVARINT_TABLE)
def test_uvarint_table(encoded: bytes, value: int) -> None:
    assert wire.encode_uvarint(value) == encoded
    assert wire.decode_uvarint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


def test_uvarint_limits() -> None:
    with pytest.raises(ProtocolError):
        wire.encode_uvarint(-1)
    with pytest.raises(ProtocolError):
        wire.encode_uvarint(2**32)
    with pytest.raises(ProtocolError, match="longer than 5 bytes"):
        wire.decode_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(ProtocolError, match="input ends after 1 continuation byte"):
        wire.decode_uvarint(b"\x80", 0)
    with pytest.raises(ProtocolError, match="does not fit in 32 bits"):
        wire.decode_uvarint(b"\xff\xff\xff\xff\x1f", 0)


@given(st.integers(0, 2**32 - 1))
def test_uvarint_matches_independent_leb128(value: int) -> None:
    out = []
    v = value
    while True:
        byte, v = v & 0x7F, v >> 7
        out.append(byte | (0x80 if v else 0))
        if not v:
            break
    assert wire.encode_uvarint(value) == bytes(out)
    assert wire.decode_uvarint(bytes(out), 0) == (value, len(out))


def test_strings() -> None:
    assert wire.encode_string("héllo") == b"\x00\x06h\xc3\xa9llo"
    assert wire.encode_string(None) == b"\xff\xff"
    assert wire.encode_compact_string("ab") == b"\x03ab"
    assert wire.encode_compact_string(None) == b"\x00"
    assert wire.encode_compact_string("") == b"\x01"
    assert wire.decode_string(b"\x00\x06h\xc3\xa9llo", 0) == ("héllo", 8)
    assert wire.decode_string(b"\xff\xff", 0) == (None, 2)
    assert wire.decode_compact_string(b"\x03ab", 0) == ("ab", 3)
    assert wire.decode_compact_string(b"\x00", 0) == (None, 1)
    with pytest.raises(ProtocolError, match="runs past the end"):
        wire.decode_string(b"\x00\x05abc", 0)
    with pytest.raises(ProtocolError, match="runs past the end"):
        wire.decode_compact_string(b"\x05ab", 0)
    with pytest.raises(ProtocolError):
        wire.decode_string(b"\xff\xff", 0, nullable=False)
    with pytest.raises(ProtocolError):
        wire.decode_string(b"\xff\xfe", 0)
    with pytest.raises(ProtocolError):
        wire.decode_compact_string(b"\x00", 0, nullable=False)


def test_bytes_are_zero_copy_views() -> None:
    buf = b"\x00\x00\x00\x03xyz!"
    view, pos = wire.decode_bytes(buf, 0)
    assert isinstance(view, memoryview) and view.obj is buf and bytes(view) == b"xyz" and pos == 7
    assert wire.decode_bytes(b"\xff\xff\xff\xff", 0) == (None, 4)
    view, pos = wire.decode_compact_bytes(b"\x04xyz", 0)
    assert bytes(view) == b"xyz" and pos == 4  # type: ignore[arg-type]
    assert wire.encode_bytes(b"xyz") == b"\x00\x00\x00\x03xyz"
    assert wire.encode_compact_bytes(None) == b"\x00"
    with pytest.raises(ProtocolError):
        wire.decode_bytes(b"\x00\x00\x01\x00xyz", 0)
    with pytest.raises(ProtocolError):
        wire.decode_bytes(b"\xff\xff\xff\xfe", 0)


def test_uuid() -> None:
    u = uuid.uuid4()
    assert wire.encode_uuid(u) == u.bytes
    assert wire.encode_uuid(None) == b"\x00" * 16
    assert wire.decode_uuid(b"\x01" + u.bytes, 1) == (u, 17)
    with pytest.raises(ProtocolError):
        wire.decode_uuid(u.bytes[:15], 0)


def test_tagged_fields() -> None:
    encoded = wire.encode_tagged_fields([(5, b"zz"), (1, b"a")])
    assert encoded == b"\x02" + b"\x01\x01a" + b"\x05\x02zz"  # sorted by tag
    assert wire.encode_tagged_fields([]) == b"\x00"
    assert wire.skip_tagged_fields(encoded + b"tail", 0) == len(encoded)
    with pytest.raises(ProtocolError):
        wire.skip_tagged_fields(b"\x01\x01\x09ab", 0)
    with pytest.raises(ProtocolError):
        wire.encode_tagged_fields([(1, b""), (1, b"")])


# --- framing ---------------------------------------------------------------------------------------------


def _framed(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def test_frame_helper() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"


def test_whole_frames_in_one_chunk_are_views() -> None:
    data = _framed([b"one", b"", b"three"])
    dec = FrameDecoder()
    frames = dec.feed(data)
    assert [bytes(f) for f in frames] == [b"one", b"", b"three"]
    assert isinstance(frames[0], memoryview) and frames[0].obj is data
    assert dec.buffered == 0


@settings(max_examples=200)
@given(
    payloads=st.lists(st.binary(max_size=50), max_size=8),
    cuts=st.lists(st.integers(0, 500), max_size=12),
    kind=st.sampled_from([bytes, bytearray, memoryview]),
)
def test_split_and_merged_chunks(payloads: list[bytes], cuts: list[int], kind: type) -> None:
    data = _framed(payloads)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    dec = FrameDecoder(max_frame_bytes=50)
    got: list[bytes] = []
    for a, b in zip(points, points[1:], strict=False):
        got.extend(bytes(f) for f in dec.feed(kind(data[a:b])))
    assert got == payloads
    assert dec.buffered == 0


def _read(
    dec: FrameDecoder, pool: FramePool, data: bytes, cuts: list[int], copy: bool = False
) -> list[memoryview | bytes]:
    """Feed ``data`` as reads into the decoder's buffers (each read at most what it offers, and ``cuts`` bytes);
    ``copy``: keep a copy of each frame (its buffer may then be reused at once)."""
    frames: list[memoryview | bytes] = []
    pos, i = 0, 0
    while pos < len(data):
        buf = dec.read_buffer(pool)
        n = min(len(buf), len(data) - pos, max(1, cuts[i % len(cuts)]) if cuts else len(data))
        buf[:n] = data[pos : pos + n]
        pos, i = pos + n, i + 1
        frames.extend(bytes(f) if copy else f for f in dec.read_done(n, pool))
    return frames


@settings(max_examples=200)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8), cuts=st.lists(st.integers(1, 400), max_size=12)
)
def test_reads_into_buffers_split_anywhere(payloads: list[bytes], cuts: list[int]) -> None:
    # small pool buffers: frames that end in the read buffer, frames opened in buffers of their own that grow
    pool = FramePool(read_bytes=64, frame_buffer_min=16, max_kept=2)
    dec = FrameDecoder(max_frame_bytes=300)
    got = _read(dec, pool, _framed(payloads), cuts, copy=True)
    assert got == payloads
    assert dec.buffered == 0


def test_a_kept_frame_buffer_is_reused_only_once_no_view_of_its_frame_is_left() -> None:
    # The guard of buffer reuse: a frame still referenced (a handler parked it) is never overwritten.
    pool = FramePool(read_bytes=64, frame_buffer_min=16)
    dec = FrameDecoder()
    first = _read(dec, pool, _framed([b"a" * 1000]), [64])
    second = _read(dec, pool, _framed([b"b" * 1000]), [64])
    assert bytes(first[0]) == b"a" * 1000 and bytes(second[0]) == b"b" * 1000
    assert isinstance(first[0], memoryview) and isinstance(second[0], memoryview)
    reused = first[0].obj
    del first
    # a smaller frame in the reused (larger) buffer: reads stop at its end, the next frame stays whole
    third = _read(dec, pool, _framed([b"c" * 900, b"d" * 5]), [64, 2000])
    assert isinstance(third[0], memoryview) and third[0].obj is reused
    assert [bytes(f) for f in third] == [b"c" * 900, b"d" * 5]
    assert bytes(second[0]) == b"b" * 1000


def test_a_small_frame_never_takes_a_large_kept_buffer() -> None:
    # A small request split over two reads and kept by its handler must not pin a large kept buffer (the pool
    # hands out the smallest fitting buffer of at most twice the frame, and keeps no buffer below the minimum).
    pool = FramePool(read_bytes=64, frame_buffer_min=16)
    dec = FrameDecoder()
    big = _read(dec, pool, _framed([b"a" * 4000]), [64])
    del big  # its 4000-byte buffer is kept and free
    small = _read(dec, pool, _framed([b"s" * 100]), [64])
    assert bytes(small[0]) == b"s" * 100
    assert len(small[0].obj) <= 200
    del small
    again = _read(dec, pool, _framed([b"b" * 3000]), [64])
    assert len(again[0].obj) == 4000  # the large buffer is still there for a large frame


def test_byte_by_byte() -> None:
    data = _framed([b"x" * 10, b"yz"])
    dec = FrameDecoder()
    got = [bytes(f) for i in range(len(data)) for f in dec.feed(data[i : i + 1])]
    assert got == [b"x" * 10, b"yz"]


def test_max_frame_bytes() -> None:
    dec = FrameDecoder(max_frame_bytes=10)
    assert [bytes(f) for f in dec.feed(_framed([b"0123456789"]))] == [b"0123456789"]
    with pytest.raises(ProtocolError, match="11 bytes exceeds max_frame_bytes 10"):
        FrameDecoder(max_frame_bytes=10).feed(_framed([b"01234567890"]))
    split = FrameDecoder(max_frame_bytes=10)
    split.feed(b"\x00\x00")
    with pytest.raises(ProtocolError, match="exceeds max_frame_bytes"):
        split.feed(b"\x01\x00")


def test_negative_size() -> None:
    with pytest.raises(ProtocolError, match="negative frame size -1"):
        FrameDecoder().feed(b"\xff\xff\xff\xff")
