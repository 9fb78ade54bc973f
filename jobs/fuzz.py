"""A seeded protocol fuzzer: mutated request frames of every API pylog speaks, pipelined at a running broker.

``python -m jobs.fuzz BOOTSTRAP [--frames N] [--seed S] [--topic T]`` sends N mutated frames and prints what
happened; the test suite (``tests/server/test_fuzz.py``) and the benchmark (``python -m jobs.bench validation``)
drive :func:`fuzz` directly and then check the broker.

Corpus: for every API key and version of the protocol's message table, a request body whose arrays hold one
element each, strings naming the fuzz topic, partition indexes 0 and record fields a valid record batch.

Mutations (one per frame, chosen by a seeded ``random.Random``; the same seed sends the same bytes):
  * value mutations (most frames): fields of the decoded body set to edge values (0, -1, extremes, random
    ints, empty / long / random strings, null, duplicated or emptied arrays), then encoded again, so the frame
    decodes and reaches the handler. Time fields (``...Ms``) are kept below 3 ms so no answer waits long;
  * record mutations (Produce): bit flips, truncations, random varints and length lies inside the record batch
    with its CRC recomputed, so the records reach the record validator rather than the CRC check;
  * byte mutations (``byte_share`` of the frames, as the last request of a burst since most close the
    connection): bit flips, random bytes, random varints inserted, a truncated body (size prefix adjusted)
    after the request header;
  * framing lies (size prefix larger or smaller than the frame, the header's API key or version flipped):
    only as the last frame of a burst, after the sentinel, since they desynchronize the stream.

Frames are sent in bursts on one connection (``burst`` frames joined in one ``sendall``) followed by an
unmutated ApiVersions sentinel; the connection is read until the sentinel's answer or until the broker closes
it. :class:`FuzzStats` counts frames sent, frames the broker consumed (answered, or refused by closing; the
frames after a closing one are not counted), and connections.
"""

from __future__ import annotations

import argparse
import random
import socket
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import crc32c

from broker_runtime.errors import PylogError
from broker_runtime.protocol.messages import API_KEYS, ApiKey, encode_request
from broker_runtime.protocol.messages.schema import Field
from broker_runtime.server.handlers import supported_versions

__all__ = ["FuzzStats", "fuzz", "main", "valid_batch"]

_SIZE = struct.Struct(">i")
_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint16": 16}
_SENTINEL_ID = 0x7FFF0000
_EXCLUDED = {int(ApiKey.CREATE_TOPICS)}  # topic creation with random partition counts fills the disk


def valid_batch(count: int = 3, value: bytes = b"fuzz-value", timestamp_ms: int | None = None) -> bytes:
    """A magic-2 record batch of ``count`` records (keys ``k0``...), built here byte by byte."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    records = bytearray()
    for i in range(count):
        key = b"k%d" % i
        body = b"\x00" + _zz(0) + _zz(i) + _zz(len(key)) + key + _zz(len(value)) + value + _zz(0)
        records += _zz(len(body)) + body
    return _seal(bytearray(61) + records, count, ts)


def _seal(batch: bytearray, count: int, ts: int) -> bytes:
    struct.pack_into(
        ">qiibIhiqqqhii", batch, 0, 0, len(batch) - 12, -1, 2, 0, 0, count - 1, ts, ts, -1, -1, -1, count
    )
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def _zz(value: int) -> bytes:
    u = (value << 1) ^ (value >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


@dataclass
class FuzzStats:
    """What one :func:`fuzz` run did."""

    sent: int = 0
    consumed: int = 0
    answered: int = 0
    closed_by_broker: int = 0
    connections: int = 0
    encode_skipped: int = 0
    per_api: dict[int, int] = field(default_factory=dict)


class _Corpus:
    def __init__(self, topic: str, rng: random.Random) -> None:
        self.topic = topic
        self.rng = rng
        self.batch = valid_batch()
        self.entries: list[tuple[int, int, dict[str, Any]]] = []
        served = supported_versions()
        for key, spec in sorted(API_KEYS.items()):
            if key in _EXCLUDED or key not in served:
                continue
            low, high = served[key]
            for version in range(max(low, spec.min_version), min(high, spec.max_version) + 1):
                body = {f.name: self._fill(f, version) for f in spec.request.fields if f.present(version)}
                self.entries.append((key, version, body))
        self.fields = {key: spec.request.fields for key, spec in API_KEYS.items()}

    def _fill(self, f: Field, version: int) -> Any:
        if f.elem is not None:
            if f.fields is not None:
                return [{g.name: self._fill(g, version) for g in f.fields if g.present(version)}]
            return [self._scalar(f.elem, f.name, version)]
        if f.fields is not None:
            return {g.name: self._fill(g, version) for g in f.fields if g.present(version)}
        return self._scalar(f.type, f.name, version)

    def _scalar(self, t: str, name: str, version: int) -> Any:
        if t == "string":
            return self.topic if "Topic" in name or name in ("Name", "Names") else f"fuzz-{name.lower()}"
        if t == "records":
            return self.batch
        if t == "bytes":
            return b"\x00\x01fuzz"
        if t == "uuid":
            import uuid

            return uuid.UUID(int=0)
        if t == "bool":
            return False
        if t == "float64":
            return 0.0
        if name.endswith("Ms"):
            return 10
        if name == "Acks":
            return 1
        return 0


def _mutate_value(value: Any, t: str, name: str, rng: random.Random, topic: str, batch: bytes) -> Any:
    if name.endswith("Ms") and t in _INTS:
        return rng.randrange(0, 3)
    if t in _INTS:
        bits = _INTS[t]
        lo, hi = (0, (1 << bits) - 1) if t == "uint16" else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        return rng.choice([0, -1 if lo < 0 else 0, 1, lo, hi, rng.randint(lo, hi), rng.randint(-3, 3)])
    if t == "string":
        return rng.choice(
            [
                "",
                topic,
                "x" * rng.randrange(1, 300),
                "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(rng.randrange(1, 12))),
                None,
                "__consumer_offsets",
                "..",
            ]
        )
    if t == "bool":
        return rng.random() < 0.5
    if t == "records":
        return _mutate_records(batch, rng)
    if t == "bytes":
        return rng.choice([b"", None, rng.randbytes(rng.randrange(1, 64))])
    return value


def _mutate_records(batch: bytes, rng: random.Random) -> bytes | None:
    data = bytearray(batch)
    choice = rng.randrange(7)
    if choice == 0:
        return None
    if choice == 1:  # bit flips anywhere after the CRC, CRC recomputed
        for _ in range(rng.randrange(1, 4)):
            pos = rng.randrange(21, len(data))
            data[pos] ^= 1 << rng.randrange(8)
    elif choice == 2:  # random varint inside the records
        pos = rng.randrange(61, len(data))
        data[pos:pos] = _zz(rng.randint(-(1 << 40), 1 << 40))
    elif choice == 3:  # truncated records
        del data[rng.randrange(61, len(data)) :]
    elif choice == 4:  # recordsCount / lastOffsetDelta lies
        struct.pack_into(">i", data, 57, rng.randint(-2, 10))
        if rng.random() < 0.5:
            struct.pack_into(">i", data, 23, rng.randint(-2, 10))
    elif choice == 5:  # attributes: codecs, control, transactional, timestamp type
        struct.pack_into(">h", data, 21, rng.randrange(0, 128))
    else:  # unfixed CRC: must be CORRUPT_MESSAGE
        data[rng.randrange(61, len(data))] ^= 0xFF
        return bytes(data)
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


class _Mutator:
    def __init__(self, corpus: _Corpus, rng: random.Random) -> None:
        self.corpus = corpus
        self.rng = rng
        self.correlation = 0

    def _walk(
        self, body: dict[str, Any], fields: tuple[Field, ...], version: int
    ) -> Iterator[tuple[dict[str, Any], Field]]:
        for f in fields:
            if not f.present(version) or f.name not in body:
                continue
            yield body, f
            value = body[f.name]
            if f.fields is not None:
                items = value if isinstance(value, list) else [value]
                for item in items:
                    if isinstance(item, dict):
                        yield from self._walk(item, f.fields, version)

    def value_frame(self) -> tuple[int, bytes] | None:
        rng = self.rng
        key, version, template = rng.choice(self.corpus.entries)
        body = _deep_copy(template)
        slots = list(self._walk(body, self.corpus.fields[key], version))
        for _ in range(rng.randrange(1, 4) if slots else 0):
            owner, f = rng.choice(slots)
            if f.elem is not None:
                current = owner[f.name]
                roll = rng.randrange(3)
                if roll == 0:
                    owner[f.name] = []
                elif roll == 1 and current:
                    owner[f.name] = current * rng.randrange(2, 5)
                else:
                    owner[f.name] = None
            elif f.fields is None:
                owner[f.name] = _mutate_value(
                    owner[f.name], f.type, f.name, rng, self.corpus.topic, self.corpus.batch
                )
        if key == ApiKey.PRODUCE and rng.random() < 0.5:
            for topic in body.get("TopicData") or ():
                for part in topic.get("PartitionData") or ():
                    part["Records"] = _mutate_records(self.corpus.batch, rng)
        try:
            return key, self._encode(key, version, body)
        except (PylogError, struct.error, ValueError, TypeError, OverflowError):
            return None  # a value the encoder refuses (a null where none is allowed): no frame

    def _encode(self, key: int, version: int, body: dict[str, Any]) -> bytes:
        self.correlation = (self.correlation + 1) % _SENTINEL_ID
        return encode_request(key, version, self.correlation, "fuzz", body)

    def byte_frame(self) -> tuple[int, bytes]:
        """A valid frame with its body (after the request header) damaged; the size prefix stays true."""
        rng = self.rng
        key, version, body = rng.choice(self.corpus.entries)
        frame = bytearray(self._encode(key, version, body))
        start = 4 + 8 + 2 + 4  # size, api key/version/correlation, client id length + "fuzz"
        if len(frame) <= start + 1:
            return key, bytes(frame)
        roll = rng.randrange(4)
        if roll == 0:
            for _ in range(rng.randrange(1, 6)):
                pos = rng.randrange(start, len(frame))
                frame[pos] ^= 1 << rng.randrange(8)
        elif roll == 1:
            pos = rng.randrange(start, len(frame))
            frame[pos : pos + 4] = rng.randbytes(4)
        elif roll == 2:
            pos = rng.randrange(start, len(frame))
            frame[pos:pos] = _zz(rng.randint(-(1 << 62), 1 << 62))
        else:
            del frame[rng.randrange(start, len(frame)) :]
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        return key, bytes(frame)

    def framing_lie(self) -> bytes:
        rng = self.rng
        key, version, body = rng.choice(self.corpus.entries)
        frame = bytearray(self._encode(key, version, body))
        roll = rng.randrange(4)
        if roll == 0:
            _SIZE.pack_into(frame, 0, len(frame) - 4 + rng.randrange(1, 1 << 20))
        elif roll == 1:
            _SIZE.pack_into(frame, 0, max(0, len(frame) - 4 - rng.randrange(1, 16)))
        elif roll == 2:
            _SIZE.pack_into(frame, 0, rng.choice([-1, -(1 << 31), 1 << 30]))
        else:
            frame[4 + rng.randrange(4)] ^= 1 << rng.randrange(8)  # API key or version
        return bytes(frame)


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def _sentinel() -> bytes:
    return encode_request(ApiKey.API_VERSIONS, 0, _SENTINEL_ID, "fuzz", {})


def fuzz(
    bootstrap: str,
    frames: int,
    *,
    seed: int = 0,
    topic: str = "fuzz",
    burst: int = 64,
    byte_share: float = 0.01,
    timeout_s: float = 10.0,
    deadline_s: float | None = None,
) -> FuzzStats:
    """Send ``frames`` mutated frames (see the module docstring); stop early at ``deadline_s`` seconds."""
    rng = random.Random(seed)
    corpus = _Corpus(topic, rng)
    mutator = _Mutator(corpus, rng)
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    stats = FuzzStats()
    sentinel = _sentinel()
    started = time.monotonic()
    while stats.sent < frames:
        if deadline_s is not None and time.monotonic() - started > deadline_s:
            break
        n = min(burst, frames - stats.sent)
        parts: list[bytes] = []
        ids: list[int] = []
        keys: list[int] = []
        for i in range(n):
            if i == n - 1 and rng.random() < byte_share * burst:
                # a damaged body most likely closes the connection: only as the burst's last request
                key, frame = mutator.byte_frame()
            else:
                made = mutator.value_frame()
                if made is None:
                    stats.encode_skipped += 1
                    continue
                key, frame = made
            parts.append(frame)
            ids.append(mutator.correlation)
            keys.append(key)
        parts.append(sentinel)
        lie = rng.random() < 0.2
        if lie:
            parts.append(mutator.framing_lie())
        stats.sent += len(ids) + (1 if lie else 0)
        for key in keys:
            stats.per_api[key] = stats.per_api.get(key, 0) + 1
        answered, closed = _exchange(host, int(port), b"".join(parts), ids, timeout_s)
        stats.connections += 1
        stats.answered += len(answered)
        if closed:
            stats.closed_by_broker += 1
            last = max((ids.index(c) for c in answered if c in ids), default=-1)
            stats.consumed += min(len(ids), last + 2)
        else:
            stats.consumed += len(ids) + (1 if lie else 0)
    return stats


def _exchange(host: str, port: int, data: bytes, ids: list[int], timeout_s: float) -> tuple[list[int], bool]:
    """Send one burst; the correlation ids answered before the sentinel, and whether the broker closed first."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    answered: list[int] = []
    try:
        try:
            sock.sendall(data)
        except OSError:
            return answered, True
        buf = bytearray()
        while True:
            try:
                chunk = sock.recv(1 << 20)
            except (ConnectionResetError, TimeoutError):
                return answered, True
            if not chunk:
                return answered, True
            buf += chunk
            while len(buf) >= 8:
                size = _SIZE.unpack_from(buf, 0)[0]
                if len(buf) < 4 + size:
                    break
                (correlation,) = _SIZE.unpack_from(buf, 4)
                del buf[: 4 + size]
                if correlation == _SENTINEL_ID:
                    return answered, False
                answered.append(correlation)
    finally:
        sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.fuzz", description=__doc__.split("\n")[0])
    parser.add_argument("bootstrap")
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--topic", default="fuzz")
    args = parser.parse_args(argv)
    started = time.monotonic()
    stats = fuzz(args.bootstrap, args.frames, seed=args.seed, topic=args.topic)
    elapsed = time.monotonic() - started
    print(
        f"{stats.sent} frames sent ({stats.sent / elapsed:.0f}/s), {stats.consumed} consumed, {stats.answered} "
        f"answered, {stats.closed_by_broker} of {stats.connections} connections closed by the broker"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
