"""The sans-IO client side of a connection: correlation ids, the pending FIFO, bounded framing, in-order decoding."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from broker_runtime.errors import CorrelationIdMismatchError, ProtocolError
from broker_runtime.protocol.client_connection import ClientConnection
from broker_runtime.protocol.messages import ApiKey, decode_request, encode_response

_METADATA_BODY: dict[str, Any] = {"Topics": [], "AllowAutoTopicCreation": False}


def _metadata_answer(correlation_id: int, version: int = 9, controller: int = 0) -> bytes:
    return encode_response(ApiKey.METADATA, version, correlation_id, {"ControllerId": controller})


def test_requests_carry_increasing_correlation_ids_and_decode_as_requests() -> None:
    conn = ClientConnection("cid")
    corr1, chunks1 = conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)
    corr2, chunks2 = conn.send_request(ApiKey.API_VERSIONS, 3, {})
    assert (corr1, corr2) == (1, 2)
    assert conn.in_flight == 2
    header, _ = decode_request(b"".join(chunks1)[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 9, 1, "cid")
    assert decode_request(b"".join(chunks2)[4:])[0].correlation_id == 2


def test_responses_split_byte_by_byte_come_out_once_complete() -> None:
    conn = ClientConnection("cid")
    corr, _ = conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)
    data = _metadata_answer(corr, controller=7)
    out = []
    for i in range(len(data)):
        out.extend(conn.receive_data(data[i : i + 1]))
        if i < len(data) - 1:
            assert out == [] and conn.buffered == i + 1
    assert len(out) == 1
    assert (out[0].correlation_id, out[0].api_key, out[0].api_version) == (corr, ApiKey.METADATA, 9)
    assert out[0].body["ControllerId"] == 7
    assert conn.in_flight == 0 and conn.buffered == 0


def test_several_responses_in_one_chunk_decode_in_order_with_their_own_versions() -> None:
    conn = ClientConnection("cid")
    c1, _ = conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)
    c2, _ = conn.send_request(ApiKey.METADATA, 1, _METADATA_BODY)
    c3, _ = conn.send_request(ApiKey.METADATA, 12, _METADATA_BODY)
    chunk = _metadata_answer(c1, 9, 1) + _metadata_answer(c2, 1, 2) + _metadata_answer(c3, 12, 3)[:-1]
    out = conn.receive_data(chunk)
    assert [(r.correlation_id, r.api_version, r.body["ControllerId"]) for r in out] == [
        (c1, 9, 1),
        (c2, 1, 2),
    ]
    last = conn.receive_data(_metadata_answer(c3, 12, 3)[-1:])
    assert [(r.correlation_id, r.body["ControllerId"]) for r in last] == [(c3, 3)]


def test_acks_zero_requests_are_not_pending() -> None:
    conn = ClientConnection("cid")
    conn.send_request(ApiKey.PRODUCE, 3, {"Acks": 0, "TimeoutMs": 1, "TopicData": []}, expect_response=False)
    corr, _ = conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)
    assert conn.in_flight == 1 and corr == 2
    assert [r.correlation_id for r in conn.receive_data(_metadata_answer(corr))] == [2]


def test_unexpected_correlation_id_is_rejected_and_breaks_the_state() -> None:
    conn = ClientConnection("cid")
    corr, _ = conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)
    with pytest.raises(CorrelationIdMismatchError, match=f"correlation id {corr + 1} .* expected {corr}"):
        conn.receive_data(_metadata_answer(corr + 1))
    assert conn.broken
    with pytest.raises(ProtocolError, match="out of step"):
        conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)


def test_a_response_with_nothing_pending_is_rejected() -> None:
    conn = ClientConnection("cid")
    with pytest.raises(ProtocolError, match="no request is pending"):
        conn.receive_data(_metadata_answer(1))


def test_oversized_frame_is_refused_from_its_size_prefix_alone() -> None:
    conn = ClientConnection("cid", max_frame_bytes=1000)
    conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)
    # Only the 4-byte prefix arrives: the error comes before any buffer for the frame exists.
    with pytest.raises(ProtocolError, match=r"2000000000 bytes exceeds max_frame_bytes 1000"):
        conn.receive_data(struct.pack(">i", 2_000_000_000))
    assert conn.broken


def test_reset_forgets_pending_but_keeps_counting_correlation_ids() -> None:
    conn = ClientConnection("cid")
    conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)
    conn.receive_data(_metadata_answer(99)[:3])  # a partial frame, then the socket dies
    conn.reset()
    assert (conn.in_flight, conn.buffered, conn.broken) == (0, 0, False)
    corr, _ = conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)
    assert corr == 2
    assert [r.correlation_id for r in conn.receive_data(_metadata_answer(corr))] == [2]


def test_correlation_ids_wrap_to_zero_after_int32_max() -> None:
    conn = ClientConnection("cid")
    conn._next_correlation_id = 0x7FFFFFFF
    assert conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)[0] == 0x7FFFFFFF
    assert conn.send_request(ApiKey.METADATA, 9, _METADATA_BODY)[0] == 0
