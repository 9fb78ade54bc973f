"""Kafka's variable-length integers: zigzag varint / varlong (records) and unsigned varint (wire protocol).

Format (``ByteUtils`` in Kafka's clients; the same as Protocol Buffers' ``sint32``/``sint64``/``uint32``)::

    unsigned varint   little-endian base-128 (LEB128): 7 value bits per byte, low groups first;
                      the high bit (0x80) of a byte says "another byte follows". At most 5 bytes for
                      a 32-bit value, 10 for a 64-bit value.
    varint (int32)    zigzag first: (v << 1) ^ (v >> 31), so 0, -1, 1, -2 ... map to 0, 1, 2, 3 ...;
                      then the unsigned varint of that 32-bit pattern (1..5 bytes).
    varlong (int64)   zigzag (v << 1) ^ (v >> 63), then unsigned varint (1..10 bytes).

Byte table: 0 -> 00, -1 -> 01, 1 -> 02, 63 -> 7e, -64 -> 7f, 64 -> 80 01, int32 max -> fe ff ff ff 0f.

Invariants enforced here:
  * encoders reject values outside the type's range with :class:`ValueError` (a programming error);
  * decoders raise :class:`~broker_runtime.errors.CorruptRecordError` naming the byte position when the
    input ends inside a varint, when a varint runs longer than its type allows (more than 5 bytes for
    varint/uvarint, 10 for varlong), or when the last byte carries bits beyond the type's width.
    Non-minimal encodings within the length limit (e.g. ``80 00``) are accepted, as Kafka's readers do.

Decoders take ``bytes``, ``bytearray`` or ``memoryview`` (format ``B``) and a start position and return
``(value, next_position)``. Pure functions; thread-safe.
"""

from __future__ import annotations

from broker_runtime.errors import CorruptRecordError, InvalidArgumentError, ProtocolError

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "UINT32_MAX",
    "decode_leb128",
    "decode_uvarint",
    "decode_varint",
    "decode_varlong",
    "encode_leb128",
    "encode_uvarint",
    "encode_varint",
    "encode_varlong",
    "size_of_uvarint",
    "size_of_varint",
    "size_of_varlong",
    "zigzag32",
    "zigzag64",
]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT32_MAX = (1 << 32) - 1
_UINT64_MAX = (1 << 64) - 1

#: Maximum encoded lengths.
MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

Buffer = bytes | bytearray | memoryview

# Single-byte encodings for the most common values (zigzag results 0..127), avoiding the loop.
_ONE_BYTE = [bytes((i,)) for i in range(128)]


def zigzag32(v: int) -> int:
    """Zigzag-map an int32 to its unsigned 32-bit pattern (no range check)."""
    return ((v << 1) ^ (v >> 31)) & UINT32_MAX


def zigzag64(v: int) -> int:
    """Zigzag-map an int64 to its unsigned 64-bit pattern (no range check)."""
    return ((v << 1) ^ (v >> 63)) & _UINT64_MAX


def encode_leb128(u: int) -> bytes:
    """Unsigned LEB128 of ``u >= 0`` without a range check (callers check the range of their type)."""
    if u < 0x80:
        return _ONE_BYTE[u]
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _leb128_size(u: int) -> int:
    # bit_length 0..7 -> 1 byte, 8..14 -> 2 bytes, ...
    return max(1, (u.bit_length() + 6) // 7)


def encode_uvarint(v: int) -> bytes:
    """Unsigned varint of ``0 <= v <= 2**32 - 1`` (compact lengths, tagged-field tags and sizes)."""
    if not 0 <= v <= UINT32_MAX:
        raise InvalidArgumentError(f"unsigned varint value {v} is outside [0, {UINT32_MAX}]")
    return encode_leb128(v)


def encode_varint(v: int) -> bytes:
    """Zigzag varint of an int32 (record lengths, offset deltas, key/value/header lengths)."""
    if not INT32_MIN <= v <= INT32_MAX:
        raise InvalidArgumentError(f"varint value {v} is outside the int32 range [{INT32_MIN}, {INT32_MAX}]")
    return encode_leb128(((v << 1) ^ (v >> 31)) & UINT32_MAX)


def encode_varlong(v: int) -> bytes:
    """Zigzag varlong of an int64 (record timestamp deltas)."""
    if not INT64_MIN <= v <= INT64_MAX:
        raise InvalidArgumentError(f"varlong value {v} is outside the int64 range [{INT64_MIN}, {INT64_MAX}]")
    return encode_leb128(((v << 1) ^ (v >> 63)) & _UINT64_MAX)


def size_of_uvarint(v: int) -> int:
    """Bytes :func:`encode_uvarint` writes for ``v``."""
    if not 0 <= v <= UINT32_MAX:
        raise InvalidArgumentError(f"unsigned varint value {v} is outside [0, {UINT32_MAX}]")
    return _leb128_size(v)


def size_of_varint(v: int) -> int:
    """Bytes :func:`encode_varint` writes for ``v``."""
    if not INT32_MIN <= v <= INT32_MAX:
        raise InvalidArgumentError(f"varint value {v} is outside the int32 range [{INT32_MIN}, {INT32_MAX}]")
    return _leb128_size(((v << 1) ^ (v >> 31)) & UINT32_MAX)


def size_of_varlong(v: int) -> int:
    """Bytes :func:`encode_varlong` writes for ``v``."""
    if not INT64_MIN <= v <= INT64_MAX:
        raise InvalidArgumentError(f"varlong value {v} is outside the int64 range [{INT64_MIN}, {INT64_MAX}]")
    return _leb128_size(((v << 1) ^ (v >> 63)) & _UINT64_MAX)


def decode_leb128(
    buf: Buffer,
    pos: int,
    max_bytes: int,
    bits: int,
    kind: str,
    error: type[ProtocolError] = CorruptRecordError,
) -> tuple[int, int]:
    """Unsigned LEB128 at ``pos`` of at most ``max_bytes`` bytes whose value fits in ``bits`` bits.

    Malformed input raises ``error`` (:class:`CorruptRecordError` for records; the wire protocol passes
    :class:`ProtocolError`) naming ``kind`` and the position.
    """
    end = len(buf)
    if pos < 0 or pos >= end:
        raise error(f"{kind} at position {pos}: no bytes left (buffer length {end})")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    i = pos + 1
    while True:
        if i >= end:
            raise error(
                f"{kind} at position {pos}: input ends after {i - pos} continuation byte(s) "
                f"(buffer length {end})"
            )
        if i - pos >= max_bytes:
            raise error(f"{kind} at position {pos}: longer than {max_bytes} bytes")
        b = buf[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            break
        shift += 7
    if value >> bits:
        raise error(f"{kind} at position {pos}: value {value:#x} does not fit in {bits} bits")
    return value, i


def decode_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """(value, next position) of the unsigned varint (<= 5 bytes, 32-bit) at ``pos``."""
    return decode_leb128(buf, pos, MAX_VARINT_BYTES, 32, "unsigned varint")


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """(value, next position) of the zigzag int32 varint (<= 5 bytes) at ``pos``."""
    b = buf[pos] if 0 <= pos < len(buf) else 0x80
    if b < 0x80:  # fast path: one byte
        return (b >> 1) ^ -(b & 1), pos + 1
    u, nxt = decode_leb128(buf, pos, MAX_VARINT_BYTES, 32, "varint")
    return (u >> 1) ^ -(u & 1), nxt


def decode_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """(value, next position) of the zigzag int64 varlong (<= 10 bytes) at ``pos``."""
    b = buf[pos] if 0 <= pos < len(buf) else 0x80
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    u, nxt = decode_leb128(buf, pos, MAX_VARLONG_BYTES, 64, "varlong")
    return (u >> 1) ^ -(u & 1), nxt
