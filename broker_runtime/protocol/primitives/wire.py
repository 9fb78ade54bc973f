"""Primitive codecs of the Kafka wire protocol (``Type.java`` / ``ByteBufferAccessor`` in Kafka's clients).

All integers are big-endian two's complement. The primitives and their encodings::

    int8 / int16 / int32 / int64    1 / 2 / 4 / 8 bytes, signed
    uint16                          2 bytes, unsigned
    float64                         8 bytes, IEEE 754
    bool                            1 byte, 0 = false, anything else = true
    uuid                            16 bytes (all zero = Kafka's ZERO_UUID)
    string                          int16 length N (-1 = null) + N bytes of UTF-8
    bytes / records                 int32 length N (-1 = null) + N bytes
    compact string / bytes          unsigned varint N + 1 (0 = null) + N bytes          (flexible versions)
    array                           int32 count N (-1 = null) + N elements
    compact array                   unsigned varint N + 1 (0 = null) + N elements       (flexible versions)
    tagged fields                   uvarint count, then per field: uvarint tag, uvarint size, size bytes
                                    (after every struct of a flexible version; tags in ascending order)

Unsigned varints are LEB128: seven bits per byte, least significant group first, high bit set on every byte
but the last. Lengths and counts are at most ``2**31 - 1`` so they take at most five bytes.

Decoders take ``(buf, pos)`` and return ``(value, next_pos)``; ``buf`` is ``bytes``, ``bytearray`` or
``memoryview``. They raise :class:`~broker_runtime.errors.ProtocolError` for lengths that run past the end of
the buffer or are negative where null is not allowed; a plain truncated fixed-width read raises
``struct.error``/``IndexError`` which the message layer turns into ``ProtocolError`` (one ``try`` per message
instead of a bounds check per integer). Encoders return ``bytes``.

Everything here is stateless and therefore thread-safe.
"""

from __future__ import annotations

import struct
import uuid

from broker_runtime.errors import ProtocolError
from broker_runtime.protocol.primitives.varint import UINT32_MAX, decode_leb128, encode_leb128

__all__ = [
    "BOOL",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "MAX_UVARINT_BYTES",
    "UINT16",
    "ZERO_UUID",
    "decode_bytes",
    "decode_compact_bytes",
    "decode_compact_string",
    "decode_string",
    "decode_uvarint",
    "decode_uuid",
    "encode_bytes",
    "encode_compact_bytes",
    "encode_compact_string",
    "encode_string",
    "encode_tagged_fields",
    "encode_uvarint",
    "encode_uuid",
    "skip_tagged_fields",
]

#: One commented struct per fixed-width primitive (all big-endian).
INT8 = struct.Struct(">b")  # int8
INT16 = struct.Struct(">h")  # int16
INT32 = struct.Struct(">i")  # int32
INT64 = struct.Struct(">q")  # int64
UINT16 = struct.Struct(">H")  # uint16
FLOAT64 = struct.Struct(">d")  # float64
BOOL = struct.Struct(">?")  # bool: one byte, non-zero is true

#: A uvarint holding an unsigned 32-bit value never takes more than five bytes.
MAX_UVARINT_BYTES = 5
#: Kafka's Uuid.ZERO_UUID, the default of every uuid field.
ZERO_UUID = uuid.UUID(int=0)

_INT16_PACK = INT16.pack
_INT32_PACK = INT32.pack
_INT16_UNPACK_FROM = INT16.unpack_from
_INT32_UNPACK_FROM = INT32.unpack_from

# uvarints below 128 are one byte; keep them ready-made (compact lengths of short strings and arrays).
_SMALL_UVARINTS = tuple(bytes((i,)) for i in range(128))


def encode_uvarint(value: int) -> bytes:
    """Encode a non-negative int (at most 2**32 - 1) as an unsigned LEB128 varint."""
    if 0 <= value < 128:
        return _SMALL_UVARINTS[value]
    if value < 0 or value > UINT32_MAX:
        raise ProtocolError(f"unsigned varint value {value} is outside [0, 2**32 - 1]")
    return encode_leb128(value)


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; return ``(value, next_pos)``.

    Raises ``ProtocolError`` when the buffer ends inside the varint, when it is longer than five bytes or when
    its value does not fit in 32 bits.
    """
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return decode_leb128(buf, pos, MAX_UVARINT_BYTES, 32, "unsigned varint", ProtocolError)


def _check_span(buf: bytes | bytearray | memoryview, pos: int, size: int, what: str) -> int:
    end = pos + size
    if end > len(buf):
        raise ProtocolError(
            f"{what} of {size} bytes at position {pos} runs past the end of the {len(buf)}-byte buffer"
        )
    return end


# --- strings ---------------------------------------------------------------------------------------------


def encode_string(value: str | None) -> bytes:
    """int16 length + UTF-8 bytes; ``None`` is length -1."""
    if value is None:
        return b"\xff\xff"
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ProtocolError(f"string of {len(data)} UTF-8 bytes is longer than the int16 limit 32767")
    return _INT16_PACK(len(data)) + data


def encode_compact_string(value: str | None) -> bytes:
    """uvarint (length + 1) + UTF-8 bytes; ``None`` is 0."""
    if value is None:
        return b"\x00"
    data = value.encode("utf-8")
    return encode_uvarint(len(data) + 1) + data


def decode_string(
    buf: bytes | bytearray | memoryview, pos: int, nullable: bool = True
) -> tuple[str | None, int]:
    """Decode an int16-length string; -1 is ``None`` (``ProtocolError`` when not ``nullable``)."""
    (size,) = _INT16_UNPACK_FROM(buf, pos)
    pos += 2
    if size < 0:
        if size == -1 and nullable:
            return None, pos
        raise ProtocolError(f"string length {size} at position {pos - 2} is not allowed here")
    end = _check_span(buf, pos, size, "string")
    return str(buf[pos:end], "utf-8"), end


def decode_compact_string(
    buf: bytes | bytearray | memoryview, pos: int, nullable: bool = True
) -> tuple[str | None, int]:
    """Decode a compact string; a length byte of 0 is ``None`` (``ProtocolError`` when not ``nullable``)."""
    start = pos
    n, pos = decode_uvarint(buf, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise ProtocolError(f"non-nullable compact string at position {start} is null")
    end = _check_span(buf, pos, n - 1, "compact string")
    return str(buf[pos:end], "utf-8"), end


# --- bytes -----------------------------------------------------------------------------------------------


def encode_bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    """int32 length + bytes; ``None`` is length -1."""
    if value is None:
        return b"\xff\xff\xff\xff"
    return _INT32_PACK(len(value)) + bytes(value)


def encode_compact_bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    """uvarint (length + 1) + bytes; ``None`` is 0."""
    if value is None:
        return b"\x00"
    return encode_uvarint(len(value) + 1) + bytes(value)


def decode_bytes(
    buf: bytes | bytearray | memoryview, pos: int, nullable: bool = True
) -> tuple[memoryview | None, int]:
    """Decode int32-length bytes as a zero-copy ``memoryview`` slice of ``buf``; -1 is ``None``."""
    (size,) = _INT32_UNPACK_FROM(buf, pos)
    pos += 4
    if size < 0:
        if size == -1 and nullable:
            return None, pos
        raise ProtocolError(f"bytes length {size} at position {pos - 4} is not allowed here")
    end = _check_span(buf, pos, size, "bytes")
    return memoryview(buf)[pos:end], end


def decode_compact_bytes(
    buf: bytes | bytearray | memoryview, pos: int, nullable: bool = True
) -> tuple[memoryview | None, int]:
    """Decode compact bytes as a zero-copy ``memoryview`` slice of ``buf``; 0 is ``None``."""
    start = pos
    n, pos = decode_uvarint(buf, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise ProtocolError(f"non-nullable compact bytes at position {start} are null")
    end = _check_span(buf, pos, n - 1, "compact bytes")
    return memoryview(buf)[pos:end], end


# --- uuid ------------------------------------------------------------------------------------------------


def encode_uuid(value: uuid.UUID | bytes | None) -> bytes:
    """16 raw bytes; ``None`` encodes as the zero UUID."""
    if value is None:
        return ZERO_UUID.bytes
    if isinstance(value, uuid.UUID):
        return value.bytes
    if len(value) != 16:
        raise ProtocolError(f"uuid must be 16 bytes, got {len(value)}")
    return bytes(value)


def decode_uuid(buf: bytes | bytearray | memoryview, pos: int) -> tuple[uuid.UUID, int]:
    end = _check_span(buf, pos, 16, "uuid")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


# --- tagged fields ---------------------------------------------------------------------------------------


def encode_tagged_fields(fields: list[tuple[int, bytes]]) -> bytes:
    """Encode a tagged-field section from ``(tag, payload)`` pairs (sorted here by tag)."""
    if not fields:
        return b"\x00"
    parts = [encode_uvarint(len(fields))]
    last = -1
    for tag, payload in sorted(fields, key=lambda f: f[0]):
        if tag == last:
            raise ProtocolError(f"tagged field {tag} appears twice")
        last = tag
        parts.append(encode_uvarint(tag))
        parts.append(encode_uvarint(len(payload)))
        parts.append(payload)
    return b"".join(parts)


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Skip a whole tagged-field section; return the position after it."""
    count, pos = decode_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = decode_uvarint(buf, pos)
        size, pos = decode_uvarint(buf, pos)
        pos = _check_span(buf, pos, size, "tagged field")
    return pos
