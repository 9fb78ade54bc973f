"""Bad input costs one connection at most: the broker answers or closes it, keeps serving others, appends nothing."""

from __future__ import annotations

import random
import socket
import struct
import time
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, produce_body

pytestmark = pytest.mark.timeout(60)

_RANDOM = random.Random(20240601)  # reproducible garbage


def _garbage(n: int) -> bytes:
    return _RANDOM.randbytes(n)


API_VERSIONS, PRODUCE, CREATE = ApiKey.API_VERSIONS, ApiKey.PRODUCE, ApiKey.CREATE_TOPICS


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _healthy(bootstrap: str) -> None:
    """Another client still gets answers."""
    with RawConnection(bootstrap) as other:
        resp = other.call(API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
        assert resp["ErrorCode"] == 0


@pytest.fixture
def topic(bootstrap: str) -> str:
    with RawConnection(bootstrap) as conn:
        assert conn.call(CREATE, 5, create_topic_body("t"))["Topics"][0]["ErrorCode"] == 0
    return "t"


def _leo(broker: Any) -> int:
    return broker.ctx.topics.get_log("t", 0).log_end_offset


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\x7f\x01" + _garbage(62), id="random-garbage"),
        pytest.param(b"\x00\x12", id="header-too-short"),
        pytest.param(struct.pack(">hhi", 77, 0, 1) + b"\x00\x00", id="unknown-api-key"),
        pytest.param(struct.pack(">hhi", 0, 99, 1) + b"\x00\x00", id="unknown-produce-version"),
        pytest.param(
            struct.pack(">hhi", 1, 3, 1) + b"\x00\x00" + b"\x00" * 40, id="fetch-version-not-served"
        ),
        pytest.param(struct.pack(">hhi", 0, 9, 1) + b"\x00\x00\x00" + b"\x00\x01\x02", id="truncated-body"),
    ],
)
def test_malformed_request_closes_only_that_connection(
    broker: Any, bootstrap: str, topic: str, payload: bytes
) -> None:
    with RawConnection(bootstrap) as bad:
        bad.send_raw(_frame(payload))
        assert bad.is_closed_by_peer()
    _healthy(bootstrap)
    assert _leo(broker) == 0


def test_truncated_records_field_in_produce_closes_connection(
    broker: Any, bootstrap: str, topic: str
) -> None:
    with RawConnection(bootstrap) as bad:
        wire = bad.encode(PRODUCE, 9, produce_body("t", 0, build_batch(3)))
        body = wire[4:-20]  # cut inside the records field, keep the frame size consistent
        bad.send_raw(_frame(body))
        assert bad.is_closed_by_peer()
    _healthy(bootstrap)
    assert _leo(broker) == 0


def test_oversized_frame_is_refused(bootstrap: str) -> None:
    with RawConnection(bootstrap) as bad:
        bad.send_raw(struct.pack(">i", 200 * 1024 * 1024))
        assert bad.is_closed_by_peer()
    _healthy(bootstrap)


def test_negative_frame_size_is_refused(bootstrap: str) -> None:
    with RawConnection(bootstrap) as bad:
        bad.send_raw(struct.pack(">i", -5))
        assert bad.is_closed_by_peer()
    _healthy(bootstrap)


def test_unknown_api_versions_version_gets_v0_error_body(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        conn.send_raw(_frame(struct.pack(">hhi", 18, 99, 7) + struct.pack(">h", 1) + b"x" + b"\x00\x00\x00"))
        frame = conn.read_frame()
        correlation_id, error_code, count = struct.unpack_from(">ihi", frame, 0)
        assert correlation_id == 7
        assert error_code == ErrorCode.UNSUPPORTED_VERSION
        assert count == 1
        assert struct.unpack_from(">hhh", frame, 10) == (18, 0, 4)
        # Still usable: the client retries with a version we speak.
        assert conn.call(API_VERSIONS, 0, {})["ErrorCode"] == 0


def test_client_disconnecting_mid_request(broker: Any, bootstrap: str, topic: str) -> None:
    conn = RawConnection(bootstrap)
    wire = conn.encode(PRODUCE, 9, produce_body("t", 0, build_batch(3)))
    conn.send_raw(wire[: len(wire) // 2])
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    time.sleep(0.1)
    _healthy(bootstrap)
    assert _leo(broker) == 0


def test_garbage_after_a_valid_request_still_answers_the_valid_one(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        good = conn.encode(API_VERSIONS, 0, {})
        conn.send_raw(good + _frame(b"\x7f\x02" + _garbage(30)))
        correlation_id, body = conn.read_response(API_VERSIONS, 0)
        assert correlation_id == conn.correlation_id and body["ErrorCode"] == 0
        assert conn.is_closed_by_peer()
    _healthy(bootstrap)


def test_many_clients_while_one_misbehaves(broker: Any, bootstrap: str, topic: str) -> None:
    clients = [RawConnection(bootstrap) for _ in range(5)]
    try:
        bad = RawConnection(bootstrap)
        bad.send_raw(b"\x7f\x00\x00\x00" + _garbage(4096))  # size prefix > socket.request.max.bytes
        for c in clients:
            resp = c.call(PRODUCE, 9, produce_body("t", 0, build_batch(1)))
            assert resp["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == 0
        assert bad.is_closed_by_peer()
        bad.close()
    finally:
        for c in clients:
            c.close()
    assert _leo(broker) == 5
