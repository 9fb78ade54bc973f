"""Kafka's record validation on produce over a real socket: every record walked, RecordErrors naming the bad
ones, bounded decompression (bombs refused without the memory), and nothing stored from a refused batch.

Batches are assembled here byte by byte (an independent encoder of the record format, so the broker is not
checked against its own builder) to place one defect in one chosen record.
"""

from __future__ import annotations

import logging
import struct
import time
import zlib
from typing import Any

import lz4.frame
import pytest

from broker_runtime.errors import ErrorCode
from tests.server.rawclient import RawConnection, create_topic_body, fetch_body, produce_body

pytestmark = pytest.mark.timeout(120)

PRODUCE, FETCH, METADATA, CREATE = 0, 1, 3, 19
_HEADER = struct.Struct(">qiibIhiqqqhii")


def _crc32c(data: bytes) -> int:
    import crc32c

    return int(crc32c.crc32c(data))


def _varint(value: int) -> bytes:
    u = (value << 1) ^ (value >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _record(
    offset_delta: int,
    *,
    ts_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"value",
    headers: tuple[tuple[bytes, bytes], ...] = (),
    overlong_length: bool = False,
) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += _varint(ts_delta) + _varint(offset_delta)
    body += _varint(-1) if key is None else _varint(len(key)) + key
    body += _varint(-1) if value is None else _varint(len(value)) + value
    body += _varint(len(headers))
    for hk, hv in headers:
        body += _varint(len(hk)) + hk + _varint(len(hv)) + hv
    if overlong_length:
        return b"\xff\xff\xff\xff\xff\x01" + bytes(body)  # a 6-byte length varint
    return _varint(len(body)) + bytes(body)


def _batch(
    records: list[bytes],
    *,
    codec: int = 0,
    count: int | None = None,
    base_ts: int | None = None,
    payload: bytes | None = None,
) -> bytes:
    n = len(records) if count is None else count
    ts = int(time.time() * 1000) if base_ts is None else base_ts
    section = b"".join(records)
    if payload is None:
        payload = section if codec == 0 else _compress(codec, section)
    header = bytearray(_HEADER.pack(0, 49 + len(payload), -1, 2, 0, codec, n - 1, ts, ts, -1, -1, -1, n))
    crc = _crc32c(bytes(header[21:]) + payload)
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + payload


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        co = zlib.compressobj(6, zlib.DEFLATED, 31)
        return co.compress(data) + co.flush()
    if codec == 3:
        return bytes(lz4.frame.compress(data))
    if codec == 4:
        import zstandard

        return bytes(zstandard.ZstdCompressor().compress(data))
    raise AssertionError(codec)


def _zstd_bomb(total: int = 256 << 20) -> bytes:
    """About 8 KiB of zstd: RLE blocks of 128 KiB of zeros each, ``total`` bytes once decompressed."""
    block = 128 * 1024
    n = total // block
    out = bytearray(struct.pack("<I", 0xFD2FB528)) + bytes([0x00, 7 << 3])  # no content size, 128 KiB window
    for i in range(n):
        out += ((block << 3) | (1 << 1) | (i == n - 1)).to_bytes(3, "little") + b"\x00"
    return bytes(out)


def _snappy_bomb() -> bytes:
    """A raw snappy block whose preamble claims 256 MiB (what a decoder would allocate up front)."""
    return _varint_unsigned(256 << 20) + b"\x00" * 16


def _varint_unsigned(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _good(n: int = 4) -> list[bytes]:
    return [_record(i) for i in range(n)]


def _topic(conn: RawConnection, name: str, **configs: str) -> str:
    body = create_topic_body(name, 1, 1, {k.replace("_", "."): v for k, v in configs.items()})
    resp = conn.call(CREATE, 5, body)
    assert resp["Topics"][0]["ErrorCode"] == 0, resp
    return name


def _produce(conn: RawConnection, topic: str, records: bytes, version: int = 9) -> dict[str, Any]:
    resp = conn.call(PRODUCE, version, produce_body(topic, 0, records))
    part: dict[str, Any] = resp["Responses"][0]["PartitionResponses"][0]
    return part


def _leo(broker: Any, topic: str) -> int:
    return int(broker.ctx.topics.get_log(topic, 0).log_end_offset)


def _bad_offset_delta() -> list[bytes]:
    records = _good()
    records[2] = _record(5)
    return records


def _bad_varint() -> list[bytes]:
    records = _good()
    records[1] = _record(1, overlong_length=True)
    return records


def _header_key_not_utf8() -> list[bytes]:
    records = _good()
    records[3] = _record(3, headers=((b"\xff\xfe", b"v"),))
    return records


def _far_future() -> list[bytes]:
    records = _good()
    records[2] = _record(2, ts_delta=10 * 24 * 3600 * 1000)
    return records


def _cut_record_with_headers() -> list[bytes]:
    """The last record (two headers) lost its last 3 bytes: it runs past the records section, its second header
    key beyond the section's end (the numpy walk once handed such bounds to pyarrow: ArrowInvalid, a broker
    traceback, instead of a refusal)."""
    records = _good(3)
    records.append(_record(3, key=None, value=None, headers=((b"", b""), (b"", b"")))[:-3])
    return records


def _no_key() -> list[bytes]:
    records = _good()
    records[1] = _record(1, key=None)
    records[3] = _record(3, key=None)
    return records


CASES = {
    # name: (batch, topic configs, expected error, expected RecordErrors indexes)
    "overlong record length varint": (lambda: _batch(_bad_varint()), {}, ErrorCode.INVALID_RECORD, [1]),
    "offsetDelta not the record index": (
        lambda: _batch(_bad_offset_delta()),
        {},
        ErrorCode.INVALID_RECORD,
        [2],
    ),
    "recordsCount larger than the records": (
        lambda: _batch(_good(3), count=4),
        {},
        ErrorCode.INVALID_RECORD,
        [3],
    ),
    "recordsCount smaller than the records": (
        lambda: _batch(_good(4), count=3),
        {},
        ErrorCode.INVALID_RECORD,
        [2],
    ),
    "record with headers cut short": (
        lambda: _batch(_cut_record_with_headers()),
        {},
        ErrorCode.INVALID_RECORD,
        [3],
    ),
    "header key not UTF-8": (lambda: _batch(_header_key_not_utf8()), {}, ErrorCode.INVALID_RECORD, []),
    "record timestamp out of bounds": (
        lambda: _batch(_far_future()),
        {"message.timestamp.after.max.ms": "3600000"},
        ErrorCode.INVALID_TIMESTAMP,
        [2],
    ),
    "legacy difference bound": (
        lambda: _batch(_good(), base_ts=int(time.time() * 1000) - 7_200_000),
        {"message.timestamp.difference.max.ms": "3600000"},
        ErrorCode.INVALID_TIMESTAMP,
        [0, 1, 2, 3],
    ),
    "missing key on a compacted topic": (
        lambda: _batch(_no_key()),
        {"cleanup.policy": "compact"},
        ErrorCode.INVALID_RECORD,
        [1, 3],
    ),
    "unknown codec id 5": (
        lambda: _batch(_good(), codec=5, payload=b"".join(_good())),
        {},
        ErrorCode.INVALID_RECORD,
        [],
    ),
    "undecodable lz4 stream": (
        lambda: _batch(_good(), codec=3, payload=_compress(3, b"".join(_good()))[:-6]),
        {},
        ErrorCode.CORRUPT_MESSAGE,
        [],
    ),
    "compressed records with a bad offsetDelta": (
        lambda: _batch(_bad_offset_delta(), codec=4),
        {},
        ErrorCode.INVALID_RECORD,
        [2],
    ),
    "gzip bomb": (
        lambda: _batch(_good(), codec=1, payload=_compress(1, bytes(1 << 20)) * 40),  # 40 gzip members
        {},
        ErrorCode.MESSAGE_TOO_LARGE,
        [],
    ),
    "lz4 bomb": (
        lambda: _batch(_good(), codec=3, payload=_compress(3, bytes(1 << 20)) * 40),  # 40 lz4 frames
        {},
        ErrorCode.MESSAGE_TOO_LARGE,
        [],
    ),
    "snappy bomb": (
        lambda: _batch(_good(), codec=2, payload=_snappy_bomb()),
        {},
        ErrorCode.MESSAGE_TOO_LARGE,
        [],
    ),
}


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
def test_bad_batches_are_refused_with_kafka_errors_and_record_indexes(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        for i, (name, (make, configs, code, indexes)) in enumerate(CASES.items()):
            topic = _topic(conn, f"bad-{i}", **configs)
            resp = _produce(conn, topic, make())
            assert resp["ErrorCode"] == code, (name, resp)
            assert resp["ErrorMessage"], name
            assert [e["BatchIndex"] for e in resp["RecordErrors"]] == indexes, (name, resp)
            assert all(e["BatchIndexErrorMessage"] for e in resp["RecordErrors"]), name
            assert _leo(broker, topic) == 0, f"{name}: a refused batch was stored"
            # the same topic still takes a good batch
            ok = _produce(conn, topic, _batch(_good(), codec=4 if i % 2 else 0))
            assert ok["ErrorCode"] == 0, (name, ok)
            assert _leo(broker, topic) == 4


def test_record_errors_need_produce_v8(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        topic = _topic(conn, "compacted", cleanup_policy="compact")
        resp = _produce(conn, topic, _batch(_no_key()), version=7)
    assert resp["ErrorCode"] == ErrorCode.INVALID_RECORD
    assert "RecordErrors" not in resp or resp["RecordErrors"] == []


def _vm_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(field)


def test_zstd_bomb_is_refused_without_its_memory(broker: Any, bootstrap: str) -> None:
    """8 KiB of zstd expanding to 256 MiB: refused at the bound (32 x max.message.bytes) and the broker's
    process (this one: the broker runs in a thread here) never grows by anything near 256 MiB."""
    bomb = _zstd_bomb()
    assert len(bomb) < 9000
    with RawConnection(bootstrap) as conn:
        topic = _topic(conn, "bomb")
        _produce(conn, topic, _batch(_good()))  # warm up the produce path
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")  # reset the peak RSS (VmHWM) to the current RSS
        before = _vm_kib("VmRSS")
        resp = _produce(conn, topic, _batch(_good(), codec=4, payload=bomb))
        peak = _vm_kib("VmHWM")
    growth_mib = (peak - before) / 1024
    assert growth_mib < 128, f"the broker's peak RSS grew by {growth_mib:.0f} MiB for an 8 KiB batch"
    assert resp["ErrorCode"] == ErrorCode.MESSAGE_TOO_LARGE, resp
    assert f"decompress to more than {32 * 1048588} bytes" in resp["ErrorMessage"]
    assert _leo(broker, topic) == 4


@pytest.mark.usefixtures("record_walk")  # the compiled and the numpy record walk
def test_producer_max_timestamp_is_rewritten_from_the_records(broker: Any, bootstrap: str) -> None:
    now = int(time.time() * 1000)
    records = [_record(0), _record(1, ts_delta=5000), _record(2, ts_delta=100)]
    with RawConnection(bootstrap) as conn:
        topic = _topic(conn, "maxts")
        batch = bytearray(_batch(records, base_ts=now))  # the header claims maxTimestamp = baseTimestamp
        assert _produce(conn, topic, bytes(batch))["ErrorCode"] == 0
        fetched = conn.call(FETCH, 11, fetch_body(topic, 0, 0))
    data = fetched["Responses"][0]["Partitions"][0]["Records"]
    header = _HEADER.unpack_from(bytes(data), 0)
    assert header[8] == now + 5000


def test_metadata_v10_v11_null_topic_name_is_answered(bootstrap: str) -> None:
    import uuid

    with RawConnection(bootstrap) as conn:
        for version in (10, 11):
            body = {
                "Topics": [{"TopicId": uuid.uuid4(), "Name": None}],
                "AllowAutoTopicCreation": False,
                "IncludeTopicAuthorizedOperations": False,
            }
            if version < 11:
                body["IncludeClusterAuthorizedOperations"] = False
            resp = conn.call(METADATA, version, body)
            assert [t["ErrorCode"] for t in resp["Topics"]] == [ErrorCode.INVALID_TOPIC_EXCEPTION]


def test_refused_acks0_produce_logs_its_reason_as_the_warning(
    broker: Any, bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    from broker_runtime.server.handlers import produce

    produce._ACKS0_WARNINGS._next = 0.0  # a fresh rate-limit window for this test
    with RawConnection(bootstrap) as conn:
        topic = _topic(conn, "acks0", cleanup_policy="compact")
        with caplog.at_level(logging.DEBUG):
            conn.send_raw(conn.encode(PRODUCE, 9, produce_body(topic, 0, _batch(_no_key()), acks=0)))
            assert conn.is_closed_by_peer()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "acks=0" in warnings[0] and "INVALID_RECORD" in warnings[0] and "without key" in warnings[0]
