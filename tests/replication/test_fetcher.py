"""The follower fetcher against fake leaders (asyncio servers in the test): bounded answers, correlation ids,
and how loudly it reports a leader that goes away."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from broker_runtime.errors import BrokerConnectionError, CorrelationIdMismatchError, ProtocolError
from broker_runtime.protocol.messages import ApiKey, decode_request, encode_response
from broker_runtime.replication.fetcher import FETCH_VERSION, FetcherConfig, ReplicaFetcher

pytestmark = pytest.mark.timeout(30)

Leader = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
_LOGGER = "broker_runtime.replication.fetcher"


def _partition() -> Any:
    log = SimpleNamespace(log_end_offset=0, log_start_offset=0)
    return SimpleNamespace(topic="t", partition=0, leader_epoch=0, last_fetched_epoch=-1, log=log)


async def _read_request(reader: asyncio.StreamReader) -> Any:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    header, _ = decode_request(await reader.readexactly(size))
    return header


async def _run_fetcher(
    leader: Leader, until: Callable[[ReplicaFetcher], bool], **config: Any
) -> ReplicaFetcher:
    """Run a fetcher of one partition against ``leader`` until ``until(fetcher)`` holds, then stop it."""
    server = await asyncio.start_server(leader, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fetcher = ReplicaFetcher(0, lambda _: ("127.0.0.1", port), FetcherConfig(1, **config))
    fetcher.add_partition(_partition())
    fetcher.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while not until(fetcher):
            assert asyncio.get_running_loop().time() < deadline, f"fetcher state: {fetcher.last_error!r}"
            await asyncio.sleep(0.01)
    finally:
        await fetcher.stop()
        server.close()
        await server.wait_closed()
    return fetcher


def test_oversized_answer_is_a_protocol_error_naming_size_and_bound(caplog: pytest.LogCaptureFixture) -> None:
    async def leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            struct.pack(">i", (1 << 20) + 1)
        )  # the size prefix of an answer over the bound, never sent
        await writer.drain()
        await reader.read()

    caplog.set_level(logging.INFO, _LOGGER)
    fetcher = asyncio.run(
        _run_fetcher(leader, lambda f: f.last_error is not None, max_response_bytes=1 << 20, backoff_ms=50)
    )
    assert isinstance(fetcher.last_error, ProtocolError)
    assert f"{(1 << 20) + 1} bytes exceeds max_frame_bytes {1 << 20}" in str(fetcher.last_error)
    assert any(r.levelno == logging.WARNING and "exceeds" in r.getMessage() for r in caplog.records)


def test_answer_with_another_correlation_id_is_rejected() -> None:
    async def leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        header = await _read_request(reader)
        writer.write(
            encode_response(ApiKey.FETCH, FETCH_VERSION, header.correlation_id + 1, {"Responses": []})
        )
        await writer.drain()
        await reader.read()

    fetcher = asyncio.run(_run_fetcher(leader, lambda f: f.last_error is not None, backoff_ms=50))
    assert isinstance(fetcher.last_error, CorrelationIdMismatchError)
    assert fetcher.rounds == 0


def test_answers_complete_rounds_whatever_their_chunking() -> None:
    async def leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            header = await _read_request(reader)
            answer = encode_response(ApiKey.FETCH, FETCH_VERSION, header.correlation_id, {"Responses": []})
            for i in range(len(answer)):  # one byte per write
                writer.write(answer[i : i + 1])
                await writer.drain()

    fetcher = asyncio.run(_run_fetcher(leader, lambda f: f.rounds >= 3))
    assert fetcher.last_error is None


def test_leader_closing_connections_is_info_until_it_outlasts_the_lag_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.close()  # what a stopping leader does to its followers' connections

    caplog.set_level(logging.DEBUG, _LOGGER)

    def warned(f: ReplicaFetcher) -> bool:
        return any(r.name == _LOGGER and r.levelno >= logging.WARNING for r in caplog.records)

    fetcher = asyncio.run(_run_fetcher(leader, warned, backoff_ms=50, lag_time_max_ms=400))
    assert isinstance(fetcher.last_error, BrokerConnectionError)
    failures = [r for r in caplog.records if r.name == _LOGGER and "failed" in r.getMessage()]
    assert failures[0].levelno == logging.INFO
    assert "connection closed by the leader" in failures[0].getMessage()
    first_warning = next(r for r in failures if r.levelno >= logging.WARNING)
    assert first_warning.levelno == logging.WARNING
    assert first_warning.created - failures[0].created >= 0.4
    assert all(r.levelno == logging.INFO for r in failures[: failures.index(first_warning)])


def test_a_stopping_fetcher_reports_nothing_above_debug(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        stop_now = asyncio.Event()

        async def leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _read_request(reader)
            stop_now.set()
            await reader.read()

        server = await asyncio.start_server(leader, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fetcher = ReplicaFetcher(0, lambda _: ("127.0.0.1", port), FetcherConfig(1, lag_time_max_ms=0))
        fetcher.add_partition(_partition())
        fetcher.start()
        await asyncio.wait_for(stop_now.wait(), 10)
        await fetcher.stop()  # cancels the fetch in flight and closes the connection
        server.close()
        await server.wait_closed()

    caplog.set_level(logging.DEBUG, _LOGGER)
    asyncio.run(run())
    assert [r.getMessage() for r in caplog.records if r.name == _LOGGER and r.levelno > logging.INFO] == []


def test_a_refused_follower_warns_that_its_principal_needs_cluster_action(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A leader whose authorizer refuses this broker CLUSTER_ACTION answers TOPIC_AUTHORIZATION_FAILED: nothing
    replicates until an operator acts, so the fetcher says so at WARNING, naming the fix."""

    async def leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            header = await _read_request(reader)
            refused = {"PartitionIndex": 0, "ErrorCode": 29, "Records": None}  # TOPIC_AUTHORIZATION_FAILED
            body = {"Responses": [{"Topic": "t", "Partitions": [refused]}]}
            writer.write(encode_response(ApiKey.FETCH, FETCH_VERSION, header.correlation_id, body))
            await writer.drain()

    caplog.set_level(logging.INFO, _LOGGER)

    def warned(f: ReplicaFetcher) -> bool:
        return any(r.name == _LOGGER and r.levelno >= logging.WARNING for r in caplog.records)

    asyncio.run(_run_fetcher(leader, warned, backoff_ms=50))
    warning = next(r for r in caplog.records if r.name == _LOGGER and r.levelno >= logging.WARNING)
    assert warning.levelno == logging.WARNING
    assert "TOPIC_AUTHORIZATION_FAILED" in warning.getMessage() and "CLUSTER_ACTION" in warning.getMessage()
    assert "super.users" in warning.getMessage() and "t-0" in warning.getMessage()
