"""Zero-copy Fetch: plaintext answers send their records with ``sendfile`` and must be the frames a read gives.

* the frames of a pipelined mix of Fetch (v4 and v12, a partition large enough for sendfile and a small one
  read as before, a record limit inside the range) and ApiVersions requests are byte for byte the frames of a
  broker with ``pylog.fetch.sendfile=false`` on the same log, in request order, and sendfile really ran;
* a segment deleted (DeleteTopics) while its answer waits on a client that does not read is still sent whole
  (the answer holds the open file);
* a segment file that gets shorter while its answer waits closes the connection (the frame cannot be completed)
  instead of leaving the client waiting for bytes that never come, and is counted in
  ``pylog_network_sendfile_short_sends_total{listener}``.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey, decode_response, encode_request
from broker_runtime.server.network import SENDFILE_MIN_BYTES
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, fetch_body, produce_body
from tests.support.brokers import start_broker

TOPIC = "zc"


class _SendfileSpy:
    """Counts the bytes the broker's loop sent with ``loop.sendfile`` (it wraps the real one)."""

    def __init__(self, broker: Any) -> None:
        loop = broker._loop
        self.real = loop.sendfile
        self.calls = 0
        self.done = 0
        self.bytes = 0

        async def sendfile(
            transport: Any, file: Any, offset: int = 0, count: int | None = None, **kw: Any
        ) -> int:
            self.calls += 1
            sent: int = await self.real(transport, file, offset, count, **kw)
            self.done += 1
            self.bytes += sent
            return sent

        loop.sendfile = sendfile


def _produce(bootstrap: str, topic: str, partition: int, batches: int, **batch: Any) -> None:
    with RawConnection(bootstrap) as conn:
        for _ in range(batches):
            body = conn.call(ApiKey.PRODUCE, 7, produce_body(topic, partition, build_batch(**batch)))
            assert body["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == ErrorCode.NONE


def _fetch2(offsets: dict[int, int], max_bytes: int) -> dict[str, Any]:
    body = fetch_body(TOPIC, 0, 0, max_bytes=max_bytes)
    body["Topics"][0]["Partitions"] = [
        {
            "Partition": p,
            "CurrentLeaderEpoch": -1,
            "FetchOffset": off,
            "LogStartOffset": -1,
            "LastFetchedEpoch": -1,
            "PartitionMaxBytes": max_bytes,
        }
        for p, off in offsets.items()
    ]
    return body


def _requests() -> list[tuple[int, int, dict[str, Any]]]:
    return [
        (ApiKey.FETCH, 12, _fetch2({0: 0, 1: 0}, 1 << 20)),  # sendfile for p0, read for the small p1
        (ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"}),
        (ApiKey.FETCH, 4, _fetch2({0: 250}, 1 << 20)),  # from inside a batch
        (ApiKey.FETCH, 12, _fetch2({0: 0}, 45_000)),  # a byte limit inside the range
        (ApiKey.FETCH, 11, _fetch2({1: 0, 0: 500}, 1 << 20)),  # read first, then a slice
        (ApiKey.FETCH, 12, _fetch2({1: 0}, 1 << 20)),  # small: read
    ]


def _pipelined(bootstrap: str) -> list[bytes]:
    """Every request of :func:`_requests` sent at once on one connection; the response frames as received."""
    with RawConnection(bootstrap, timeout_s=30) as conn:
        data = b"".join(conn.encode(key, version, body) for key, version, body in _requests())
        conn.send_raw(data)
        frames = [conn.read_frame() for _ in _requests()]
    for i, ((key, version, _), frame) in enumerate(zip(_requests(), frames, strict=True)):
        correlation_id, _body = decode_response(key, version, frame)
        assert correlation_id == i + 1  # in request order
    return frames


def test_sendfile_frames_equal_read_frames(tmp_path: Path) -> None:
    broker = start_broker(tmp_path)
    try:
        with RawConnection(broker.bootstrap) as conn:
            assert (
                conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body(TOPIC, 2))["Topics"][0]["ErrorCode"] == 0
            )
        _produce(broker.bootstrap, TOPIC, 0, 8, count=100, value_size=200)  # ~21 KB batches
        _produce(broker.bootstrap, TOPIC, 1, 2, count=3)
        spy = _SendfileSpy(broker)
        with_sendfile = _pipelined(broker.bootstrap)
        assert spy.calls >= 4 and spy.bytes >= 4 * SENDFILE_MIN_BYTES
    finally:
        broker.stop()
    reader = start_broker(tmp_path, {"pylog.fetch.sendfile": "false"})
    try:
        spy = _SendfileSpy(reader)
        with_reads = _pipelined(reader.bootstrap)
        assert spy.calls == 0
    finally:
        reader.stop()
    assert [len(f) for f in with_sendfile] == [len(f) for f in with_reads]
    assert with_sendfile == with_reads
    _, first = decode_response(ApiKey.FETCH, 12, with_reads[0])
    p0, p1 = first["Responses"][0]["Partitions"]
    assert len(p0["Records"]) > SENDFILE_MIN_BYTES > len(p1["Records"]) > 0


@pytest.fixture
def big_log(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """A broker (metrics on) with about 6 MB of records in one segment of ``zc-0``, and that segment's path."""
    broker = start_broker(tmp_path, {"pylog.metrics.listener": "127.0.0.1:0"})
    try:
        with RawConnection(broker.bootstrap) as conn:
            assert (
                conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body(TOPIC, 1))["Topics"][0]["ErrorCode"] == 0
            )
        _produce(broker.bootstrap, TOPIC, 0, 6, count=1000, value_size=1000)
        yield broker, tmp_path / "kafka-logs" / f"{TOPIC}-0" / f"{0:020d}.log"
    finally:
        broker.stop()


def _stalled_fetch(bootstrap: str) -> socket.socket:
    """A connection with a small receive buffer that reads nothing yet, after sending two Fetch requests: the
    whole log (correlation id 7: its sendfile stops when the socket buffers are full) and one at the log end
    offset that waits 500 ms for data (id 8: its answer resolves while the first one is still being sent)."""
    host, _, port = bootstrap.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    waiting = _fetch2({0: 6000}, 1 << 20)
    waiting["MaxWaitMs"] = 500
    sock.sendall(
        encode_request(ApiKey.FETCH, 12, 7, "stalled", _fetch2({0: 0}, 16 << 20))
        + encode_request(ApiKey.FETCH, 12, 8, "stalled", waiting)
    )
    time.sleep(1.5)
    return sock


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket, timeout_s: float) -> bytes:
    sock.settimeout(timeout_s)
    (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
    return _recv_exactly(sock, size)


def test_segment_deleted_while_its_answer_waits_is_sent_whole(big_log: tuple[Any, Path]) -> None:
    broker, segment = big_log
    with RawConnection(broker.bootstrap, timeout_s=30) as conn:
        conn.send_raw(encode_request(ApiKey.FETCH, 12, 7, "stalled", _fetch2({0: 0}, 16 << 20)))
        expected = conn.read_frame()
    _, body = decode_response(ApiKey.FETCH, 12, expected)
    assert len(body["Responses"][0]["Partitions"][0]["Records"]) > 5_000_000
    spy = _SendfileSpy(broker)
    sock = _stalled_fetch(broker.bootstrap)
    try:
        assert (spy.calls, spy.done) == (1, 0), "the answer should still be being sent"
        with RawConnection(broker.bootstrap) as admin:
            deleted = admin.call(ApiKey.DELETE_TOPICS, 4, {"TopicNames": [TOPIC], "TimeoutMs": 5000})
            assert deleted["Responses"][0]["ErrorCode"] == ErrorCode.NONE
        deadline = time.monotonic() + 20
        while segment.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not segment.exists(), "DeleteTopics did not remove the segment"
        assert _read_frame(sock, 30) == expected
        # the answer resolved meanwhile follows, whole and in order
        correlation_id, later = decode_response(ApiKey.FETCH, 12, _read_frame(sock, 30))
        assert correlation_id == 8 and later["ErrorCode"] == ErrorCode.NONE
    finally:
        sock.close()


def test_segment_shortened_while_its_answer_waits_closes_the_connection(
    big_log: tuple[Any, Path], caplog: pytest.LogCaptureFixture
) -> None:
    from tests.server.test_metrics import scrape

    broker, segment = big_log
    key = ("pylog_network_sendfile_short_sends_total", (("listener", "PLAINTEXT"),))
    assert scrape(broker).get(key, 0.0) == 0.0
    sock = _stalled_fetch(broker.bootstrap)
    try:
        os.truncate(segment, 1_000_000)  # as a truncation of the active segment would
        with pytest.raises(ConnectionError, match="connection closed after .* of"):
            _read_frame(sock, 20)
    finally:
        sock.close()
    assert any("shrank below byte" in r.getMessage() for r in caplog.records)
    assert scrape(broker).get(key, 0.0) == 1.0
