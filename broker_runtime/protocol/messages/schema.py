"""A declarative schema language for Kafka messages and the generic codec it drives.

Kafka defines every request and response as JSON (``clients/src/main/resources/common/message/*.json``): a list
of fields, each with a type and the versions it exists in, which versions it may be null in, and, for flexible
versions, an optional tag. This module mirrors that model as Python data::

    Message("MetadataRequest", api_key=3, versions="0-12", flexible="9+", fields=[
        Field("Topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=[
            Field("TopicId", "uuid", "10+"),
            Field("Name", "string", "0+", nullable="10+"),
        ]),
        Field("AllowAutoTopicCreation", "bool", "4+", default=True),
    ])

Types: ``int8 int16 int32 int64 uint16 float64 bool uuid string bytes records``, ``[]<primitive>``,
``[]<StructName>`` with ``fields=`` (array of structs) and ``<StructName>`` with ``fields=`` (a nested struct).
A struct field with ``nullable=`` is written as Kafka writes one: an int8 marker
(-1 null, 1 present) before the struct. Version ranges are ``"N+"``, ``"N-M"``, ``"N"`` or ``"none"``.

Values are plain Python: ints, bools, floats, ``str``, ``uuid.UUID``, ``dict`` for structs (keys = Kafka's
CamelCase field names), ``list`` for arrays. ``bytes`` fields decode to ``memoryview`` slices of the input, as
do ``records`` fields (zero copy; never parsed here). ``records`` fields encode from any bytes-like object or
from a list/tuple of them (concatenated, e.g. several batches read from a segment), or from a file slice (an
object with ``len()`` and ``fileno()``, :class:`~broker_runtime.storage.file_handle.FileSlice`), kept as one
chunk of its own for the connection to send with ``sendfile`` (only :func:`encode_response_chunks` keeps it).

Defaults (Kafka's rules): numbers 0, bool false, string ``""``, bytes ``b""``, records null, uuid zero, arrays
empty, structs with all-default fields; ``default=`` overrides (``None`` = null). Decoding fills every field
the version lacks with its default, so a decoded body always has every field. Encoding takes a missing key's
default, and ignores keys the version lacks.

Flexible versions use compact strings/bytes/arrays and a tagged-field section after every struct. A tagged
field is written only when its value differs from its default; unknown tags are skipped on decode.

The codec compiles one encoder and one decoder per (struct, version) on first use and caches them; consecutive
fixed-width fields are read and written with one ``struct.Struct``. Compiled codecs are immutable, so a
``Message`` may be shared by threads (two threads compiling the same version at once build equal codecs).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from broker_runtime.errors import MessageDefinitionError, ProtocolError
from broker_runtime.protocol.primitives import wire

__all__ = ["Field", "Message", "parse_versions"]

_MAX_VERSION = 0x7FFF
_UNSET: Any = object()

# Fixed-width primitives: struct format character and byte size.
_FIXED: dict[str, str] = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "float64": "d",
    "bool": "?",
}
_VARIABLE = frozenset({"uuid", "string", "bytes", "records"})
_PRIMITIVES = frozenset(_FIXED) | _VARIABLE

Buffer = bytes | bytearray | memoryview
# A decoder reads one value: (buf, pos) -> (value, next_pos). An encoder appends chunks: (value, out) -> None.
ValueDecoder = Callable[[Buffer, int], tuple[Any, int]]
ValueEncoder = Callable[[Any, list[Any]], None]


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    """``"3+"`` -> (3, 32767), ``"1-4"`` -> (1, 4), ``"7"`` -> (7, 7), ``"none"``/``None`` -> ``None``."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), _MAX_VERSION
    if "-" in spec:
        lo, hi = spec.split("-", 1)
        return int(lo), int(hi)
    return int(spec), int(spec)


def _in(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


class Field:
    """One field of a message or nested struct, as in Kafka's JSON definitions."""

    __slots__ = ("name", "type", "versions", "nullable", "tag", "tagged", "default", "fields", "elem")

    def __init__(
        self,
        name: str,
        type: str,
        versions: str = "0+",
        *,
        nullable: str | None = None,
        tag: int | None = None,
        tagged: str | None = None,
        default: Any = _UNSET,
        fields: Sequence[Field] | None = None,
    ) -> None:
        self.name = name
        self.type = type
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.tag = tag
        self.tagged = parse_versions(tagged) if tag is not None else None
        if tag is not None and self.tagged is None:
            raise MessageDefinitionError(f"field {name}: a tag needs taggedVersions")
        self.default = default
        self.fields = tuple(fields) if fields is not None else None
        self.elem = type[2:] if type.startswith("[]") else None
        base = self.elem if self.elem is not None else type
        if self.fields is None and base not in _PRIMITIVES:
            raise MessageDefinitionError(f"field {name}: unknown type {type!r} (a struct type needs fields=)")
        if self.fields is not None and base in _PRIMITIVES:
            raise MessageDefinitionError(f"field {name}: primitive type {type!r} cannot have fields")

    def present(self, version: int) -> bool:
        return _in(self.versions, version)

    def is_nullable(self, version: int) -> bool:
        return _in(self.nullable, version)

    def is_tagged(self, version: int) -> bool:
        return _in(self.tagged, version)

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r})"


def _default_value(field: Field, version: int) -> Any:
    """A fresh default value of ``field`` at ``version``."""
    if field.default is not _UNSET:
        return field.default
    if field.elem is not None:
        return []
    if field.fields is not None:
        return {f.name: _default_value(f, version) for f in field.fields}
    t = field.type
    if t == "bool":
        return False
    if t == "float64":
        return 0.0
    if t in _FIXED:
        return 0
    if t == "string":
        return ""
    if t == "bytes":
        return b""
    if t == "uuid":
        return wire.ZERO_UUID
    return None  # records


def _is_immutable(value: Any) -> bool:
    return not isinstance(value, list | dict)


# --- value decoders --------------------------------------------------------------------------------------


def _primitive_decoder(t: str, nullable: bool, flexible: bool) -> ValueDecoder:
    if t in _FIXED:
        st = struct.Struct(">" + _FIXED[t])
        unpack_from, size = st.unpack_from, st.size

        def dec_fixed(buf: Buffer, pos: int) -> tuple[Any, int]:
            return unpack_from(buf, pos)[0], pos + size

        return dec_fixed
    if t == "uuid":
        return wire.decode_uuid
    if t == "string":
        fn = wire.decode_compact_string if flexible else wire.decode_string

        def dec_string(buf: Buffer, pos: int) -> tuple[Any, int]:
            return fn(buf, pos, nullable)

        return dec_string
    bfn = wire.decode_compact_bytes if flexible else wire.decode_bytes

    def dec_bytes(buf: Buffer, pos: int) -> tuple[Any, int]:
        return bfn(buf, pos, nullable)

    return dec_bytes


def _array_length(buf: Buffer, pos: int, flexible: bool, nullable: bool, name: str) -> tuple[int, int]:
    """Return (count or -1 for null, next_pos), validating the count against the bytes left."""
    start = pos
    if flexible:
        n, pos = wire.decode_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = wire.INT32.unpack_from(buf, pos)
        pos += 4
    if n < 0:
        if n == -1 and nullable:
            return -1, pos
        raise ProtocolError(f"array {name} at position {start} has count {n}, which is not allowed here")
    if n > len(buf) - pos:
        raise ProtocolError(
            f"array {name} at position {start} claims {n} elements but only {len(buf) - pos} bytes remain"
        )
    return n, pos


def _array_decoder(field: Field, version: int, flexible: bool, elem_dec: ValueDecoder | None) -> ValueDecoder:
    nullable = field.is_nullable(version)
    name = field.name
    elem = field.elem
    assert elem is not None
    if elem_dec is None and elem in _FIXED:
        code = _FIXED[elem]
        size = struct.calcsize(code)

        def dec_fixed_array(buf: Buffer, pos: int) -> tuple[Any, int]:
            n, pos = _array_length(buf, pos, flexible, nullable, name)
            if n < 0:
                return None, pos
            return list(struct.unpack_from(f">{n}{code}", buf, pos)), pos + n * size

        return dec_fixed_array
    if elem_dec is None:
        elem_dec = _primitive_decoder(elem, False, flexible)
    edec = elem_dec

    def dec_array(buf: Buffer, pos: int) -> tuple[Any, int]:
        n, pos = _array_length(buf, pos, flexible, nullable, name)
        if n < 0:
            return None, pos
        items: list[Any] = []
        append = items.append
        for _ in range(n):
            item, pos = edec(buf, pos)
            append(item)
        return items, pos

    return dec_array


# --- value encoders --------------------------------------------------------------------------------------


def _null_error(name: str) -> ProtocolError:
    return ProtocolError(f"field {name} is None but is not nullable in this version")


def _primitive_encoder(t: str, nullable: bool, flexible: bool, name: str) -> ValueEncoder:
    if t in _FIXED:
        pack = struct.Struct(">" + _FIXED[t]).pack

        def enc_fixed(value: Any, out: list[Any]) -> None:
            out.append(pack(value))

        return enc_fixed
    if t == "uuid":

        def enc_uuid(value: Any, out: list[Any]) -> None:
            out.append(wire.encode_uuid(value))

        return enc_uuid
    if t == "string":
        sfn = wire.encode_compact_string if flexible else wire.encode_string

        def enc_string(value: Any, out: list[Any]) -> None:
            if value is None and not nullable:
                raise _null_error(name)
            out.append(sfn(value))

        return enc_string
    if t == "bytes":
        bfn = wire.encode_compact_bytes if flexible else wire.encode_bytes

        def enc_bytes(value: Any, out: list[Any]) -> None:
            if value is None and not nullable:
                raise _null_error(name)
            out.append(bfn(value))

        return enc_bytes

    # records: bytes-like or a list/tuple of bytes-like, appended without copying.
    def enc_records(value: Any, out: list[Any]) -> None:
        if value is None:
            if not nullable:
                raise _null_error(name)
            out.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            return
        if isinstance(value, list | tuple):
            parts = [_as_bytes_like(v) for v in value]
            size = sum(map(len, parts))
            out.append(wire.encode_uvarint(size + 1) if flexible else wire.INT32.pack(size))
            out.extend(parts)
            return
        part = value if hasattr(value, "fileno") else _as_bytes_like(value)  # a file slice stays one chunk
        out.append(wire.encode_uvarint(len(part) + 1) if flexible else wire.INT32.pack(len(part)))
        out.append(part)

    return enc_records


def _as_bytes_like(value: Any) -> bytes | bytearray | memoryview:
    """``value`` itself when ``len()`` counts its bytes, else a byte-format view of it (no copy)."""
    if isinstance(value, bytes | bytearray):
        return value
    mv = memoryview(value)
    return mv if mv.format in ("B", "b", "c") and mv.ndim == 1 else mv.cast("B")


def _array_encoder(field: Field, version: int, flexible: bool, elem_enc: ValueEncoder | None) -> ValueEncoder:
    nullable = field.is_nullable(version)
    name = field.name
    elem = field.elem
    assert elem is not None

    def enc_count(value: Any, out: list[Any]) -> bool:
        if value is None:
            if not nullable:
                raise _null_error(name)
            out.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            return False
        n = len(value)
        out.append(wire.encode_uvarint(n + 1) if flexible else wire.INT32.pack(n))
        return True

    if elem_enc is None and elem in _FIXED:
        code = _FIXED[elem]

        def enc_fixed_array(value: Any, out: list[Any]) -> None:
            if enc_count(value, out) and value:
                out.append(struct.pack(f">{len(value)}{code}", *value))

        return enc_fixed_array
    if elem_enc is None:
        elem_enc = _primitive_encoder(elem, False, flexible, name)
    eenc = elem_enc

    def enc_array(value: Any, out: list[Any]) -> None:
        if enc_count(value, out):
            for item in value:
                eenc(item, out)

    return enc_array


# --- structs ---------------------------------------------------------------------------------------------


class _StructCodec:
    """The compiled encoder and decoder of one struct at one version."""

    __slots__ = ("decode", "encode")

    def __init__(self, fields: Sequence[Field], version: int, flexible: bool, where: str) -> None:
        present = [f for f in fields if f.present(version)]
        untagged = [f for f in present if not (flexible and f.is_tagged(version))]
        tagged = sorted((f for f in present if flexible and f.is_tagged(version)), key=lambda f: f.tag or 0)
        # Defaults for everything not read positionally: absent fields and tagged fields.
        fill = [f for f in fields if f not in untagged]
        template = {f.name: _default_value(f, version) for f in fill}
        all_immutable = all(_is_immutable(v) for v in template.values())
        fill_versions = [(f, version) for f in fill]

        dec_steps: list[Callable[[Buffer, int, dict[str, Any]], int]] = []
        enc_steps: list[Callable[[Mapping[str, Any], list[Any]], None]] = []
        run: list[Field] = []

        def flush_run() -> None:
            if not run:
                return
            names = tuple(f.name for f in run)
            defaults = tuple(_default_value(f, version) for f in run)
            st = struct.Struct(">" + "".join(_FIXED[f.type] for f in run))
            unpack_from, pack, size = st.unpack_from, st.pack, st.size
            pairs = tuple(zip(names, defaults, strict=True))

            def dec_run(buf: Buffer, pos: int, d: dict[str, Any]) -> int:
                d.update(zip(names, unpack_from(buf, pos), strict=True))
                return pos + size

            def enc_run(d: Mapping[str, Any], out: list[Any]) -> None:
                values = [d.get(n, dv) for n, dv in pairs]
                try:
                    out.append(pack(*values))
                except struct.error as e:
                    raise ProtocolError(
                        f"{where}: cannot encode {dict(zip(names, values, strict=True))}: {e}"
                    ) from e

            dec_steps.append(dec_run)
            enc_steps.append(enc_run)
            run.clear()

        for f in untagged:
            if f.elem is None and f.fields is None and f.type in _FIXED:
                run.append(f)
                continue
            flush_run()
            vdec, venc = _value_codecs(f, version, flexible, where)
            dec_steps.append(_dec_step(f.name, vdec))
            enc_steps.append(_enc_step(f.name, _default_value(f, version), venc, where))
        flush_run()

        tag_decoders: dict[int, tuple[str, ValueDecoder]] = {}
        tag_encoders: list[tuple[int, str, Any, ValueEncoder]] = []
        for f in tagged:
            assert f.tag is not None
            vdec, venc = _value_codecs(f, version, flexible, where)
            tag_decoders[f.tag] = (f.name, vdec)
            tag_encoders.append((f.tag, f.name, _default_value(f, version), venc))

        steps = tuple(dec_steps)

        def decode(buf: Buffer, pos: int) -> tuple[dict[str, Any], int]:
            d = dict(template) if all_immutable else {f.name: _default_value(f, v) for f, v in fill_versions}
            for step in steps:
                pos = step(buf, pos, d)
            if flexible:
                count, pos = wire.decode_uvarint(buf, pos)
                for _ in range(count):
                    tag, pos = wire.decode_uvarint(buf, pos)
                    size, pos = wire.decode_uvarint(buf, pos)
                    end = pos + size
                    if end > len(buf):
                        raise ProtocolError(
                            f"{where}: tagged field {tag} of {size} bytes at position {pos} runs past the end "
                            f"of the {len(buf)}-byte buffer"
                        )
                    known = tag_decoders.get(tag)
                    if known is not None:
                        d[known[0]], _ = known[1](memoryview(buf)[:end], pos)
                    pos = end
            return d, pos

        esteps = tuple(enc_steps)

        def encode(d: Mapping[str, Any], out: list[Any]) -> None:
            for step in esteps:
                step(d, out)
            if flexible:
                if not tag_encoders:
                    out.append(b"\x00")
                    return
                written: list[tuple[int, bytes]] = []
                for tag, name, dflt, venc in tag_encoders:
                    value = d.get(name, _UNSET)
                    if value is _UNSET or value == dflt:
                        continue
                    if isinstance(value, dict) and isinstance(dflt, dict) and {**dflt, **value} == dflt:
                        continue
                    sub: list[Any] = []
                    venc(value, sub)
                    written.append((tag, b"".join(sub)))
                out.append(wire.encode_tagged_fields(written))

        self.decode = decode
        self.encode = encode


def _dec_step(name: str, vdec: ValueDecoder) -> Callable[[Buffer, int, dict[str, Any]], int]:
    def step(buf: Buffer, pos: int, d: dict[str, Any]) -> int:
        d[name], pos = vdec(buf, pos)
        return pos

    return step


def _enc_step(
    name: str, dflt: Any, venc: ValueEncoder, where: str
) -> Callable[[Mapping[str, Any], list[Any]], None]:
    def step(d: Mapping[str, Any], out: list[Any]) -> None:
        value = d.get(name, dflt)
        try:
            venc(value, out)
        except (struct.error, TypeError, AttributeError, ValueError) as e:
            raise ProtocolError(f"{where}: cannot encode field {name}={value!r:.80}: {e}") from e

    return step


def _nullable_struct_codecs(
    name: str, where: str, sdec: ValueDecoder, senc: ValueEncoder
) -> tuple[ValueDecoder, ValueEncoder]:
    """A nullable struct, as Kafka writes one: an int8 marker (-1 null, 1 present), then the struct."""

    def dec(buf: Buffer, pos: int) -> tuple[Any, int]:
        (marker,) = _INT8.unpack_from(buf, pos)
        if marker < 0:
            return None, pos + 1
        return sdec(buf, pos + 1)

    def enc(value: Any, out: list[Any]) -> None:
        if value is None:
            out.append(b"\xff")
            return
        out.append(b"\x01")
        senc(value, out)

    return dec, enc


_INT8 = struct.Struct(">b")


def _value_codecs(
    field: Field, version: int, flexible: bool, where: str
) -> tuple[ValueDecoder, ValueEncoder]:
    """Decoder and encoder for one (possibly array or struct) value of ``field`` at ``version``."""
    if field.fields is not None:
        inner = _StructCodec(field.fields, version, flexible, f"{where}.{field.name}")
        sdec, senc = inner.decode, inner.encode

        def enc_struct(value: Any, out: list[Any]) -> None:
            if not isinstance(value, Mapping):
                raise ProtocolError(
                    f"{where}: {field.name} element must be a mapping, got {type(value).__name__}"
                )
            senc(value, out)

        if field.elem is None and field.is_nullable(version):
            return _nullable_struct_codecs(field.name, where, sdec, enc_struct)
        if field.elem is None:
            return sdec, enc_struct
        return _array_decoder(field, version, flexible, sdec), _array_encoder(
            field, version, flexible, enc_struct
        )
    if field.elem is not None:
        return _array_decoder(field, version, flexible, None), _array_encoder(field, version, flexible, None)
    nullable = field.is_nullable(version)
    return (
        _primitive_decoder(field.type, nullable, flexible),
        _primitive_encoder(field.type, nullable, flexible, field.name),
    )


class Message:
    """A request or response definition: its fields, valid versions and flexible versions."""

    __slots__ = ("name", "api_key", "versions", "flexible", "fields", "_codecs")

    def __init__(
        self, name: str, *, api_key: int, versions: str, flexible: str, fields: Sequence[Field]
    ) -> None:
        rng = parse_versions(versions)
        if rng is None:
            raise MessageDefinitionError(f"{name}: no valid versions")
        self.name = name
        self.api_key = api_key
        self.versions: tuple[int, int] = rng
        self.flexible = parse_versions(flexible)
        self.fields = tuple(fields)
        self._codecs: dict[int, _StructCodec] = {}

    @property
    def min_version(self) -> int:
        return self.versions[0]

    @property
    def max_version(self) -> int:
        return self.versions[1]

    def is_flexible(self, version: int) -> bool:
        return _in(self.flexible, version)

    def _codec(self, version: int) -> _StructCodec:
        codec = self._codecs.get(version)
        if codec is None:
            if not _in(self.versions, version):
                raise MessageDefinitionError(
                    f"{self.name} has no version {version} (valid {self.versions[0]}-{self.versions[1]})"
                )
            codec = _StructCodec(self.fields, version, self.is_flexible(version), f"{self.name} v{version}")
            self._codecs[version] = codec
        return codec

    def decode(self, buf: Buffer, pos: int, version: int) -> tuple[dict[str, Any], int]:
        """Decode a body at ``pos``; return (body, next_pos). Malformed input raises ``ProtocolError``."""
        codec = self._codec(version)
        try:
            return codec.decode(buf, pos)
        except ProtocolError as e:
            raise ProtocolError(f"{self.name} v{version}: {e}") from e
        except (struct.error, IndexError, ValueError, OverflowError) as e:
            raise ProtocolError(f"{self.name} v{version}: truncated or malformed body ({e})") from e

    def encode_into(self, body: Mapping[str, Any], version: int, out: list[Any]) -> None:
        """Append the encoded chunks of ``body`` to ``out`` (join them, or hand them to ``sendmsg``)."""
        self._codec(version).encode(body, out)

    def encode(self, body: Mapping[str, Any], version: int) -> bytes:
        out: list[Any] = []
        self._codec(version).encode(body, out)
        return b"".join(out)

    def default_body(self, version: int) -> dict[str, Any]:
        """A body with every field of ``version`` at its default."""
        return {f.name: _default_value(f, version) for f in self.fields}

    def __repr__(self) -> str:
        return f"Message({self.name!r}, api_key={self.api_key}, versions={self.versions})"
