"""A minimal blocking Kafka-protocol connection for tests: exact bytes in, decoded bodies out.

Uses the project's codec for well-formed requests and lets tests send arbitrary bytes for malformed ones.
Also builds record batches with kafka-python's (third-party) batch builder, so the broker is checked against
bytes it did not produce itself.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder

from broker_runtime.protocol.messages import decode_response, encode_request

__all__ = [
    "RawConnection",
    "build_batch",
    "create_topic_body",
    "fetch_body",
    "plain_login",
    "produce_body",
    "request",
]


def build_batch(
    count: int = 3,
    *,
    value_size: int = 10,
    timestamp_ms: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
) -> bytearray:
    """A magic-2 batch of ``count`` records built by kafka-python."""
    builder = DefaultRecordBatchBuilder(
        2, compression, False, producer_id, producer_epoch, base_sequence, 1 << 24
    )
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    for i in range(count):
        builder.append(i, ts, f"k{i}".encode(), bytes([65 + i % 26]) * value_size, [])
    return bytearray(builder.build())


class RawConnection:
    """One TCP connection to the broker (over TLS with ``tls``); ``call`` sends a request and reads its
    response."""

    def __init__(self, bootstrap: str, timeout_s: float = 10, tls: ssl.SSLContext | None = None) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encode(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        self.correlation_id += 1
        return encode_request(api_key, version, self.correlation_id, "raw-test", body)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv(4))[0]
        return self._recv(size)

    def read_response(self, api_key: int, version: int) -> tuple[int, dict[str, Any]]:
        return decode_response(api_key, version, self.read_frame())

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.send_raw(self.encode(api_key, version, body))
        correlation_id, response = self.read_response(api_key, version)
        assert correlation_id == self.correlation_id
        return response

    def is_closed_by_peer(self, timeout_s: float = 5) -> bool:
        """True when the broker closed this connection (EOF or reset) within ``timeout_s``."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)


def plain_login(conn: RawConnection, user: str, password: str) -> RawConnection:
    """Log ``conn`` in with SASL/PLAIN (SaslHandshake v1, SaslAuthenticate v2); asserts that it succeeded."""
    handshake = conn.call(17, 1, {"Mechanism": "PLAIN"})  # SASL_HANDSHAKE
    assert handshake["ErrorCode"] == 0, handshake
    answer = conn.call(36, 2, {"AuthBytes": f"\0{user}\0{password}".encode()})  # SASL_AUTHENTICATE
    assert answer["ErrorCode"] == 0, answer
    return conn


def request(bootstrap: str, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """Send one request to the first address of ``bootstrap`` on a fresh connection; the response body."""
    with RawConnection(bootstrap.split(",")[0], timeout_s=30) as conn:
        return conn.call(api_key, version, body)


def produce_body(
    topic: str, partition: int, records: bytes | bytearray | None, acks: int = 1
) -> dict[str, Any]:
    return {
        "TransactionalId": None,
        "Acks": acks,
        "TimeoutMs": 5000,
        "TopicData": [{"Name": topic, "PartitionData": [{"Index": partition, "Records": records}]}],
    }


def create_topic_body(
    name: str, partitions: int = 1, replication: int = 1, configs: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "Topics": [
            {
                "Name": name,
                "NumPartitions": partitions,
                "ReplicationFactor": replication,
                "Assignments": [],
                "Configs": [{"Name": k, "Value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeoutMs": 5000,
        "validateOnly": False,
    }


def fetch_body(
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 1 << 20,
) -> dict[str, Any]:
    return {
        "ReplicaId": -1,
        "MaxWaitMs": max_wait_ms,
        "MinBytes": min_bytes,
        "MaxBytes": max_bytes,
        "IsolationLevel": 0,
        "SessionId": 0,
        "SessionEpoch": -1,
        "Topics": [
            {
                "Topic": topic,
                "Partitions": [
                    {
                        "Partition": partition,
                        "CurrentLeaderEpoch": -1,
                        "FetchOffset": offset,
                        "LogStartOffset": -1,
                        "PartitionMaxBytes": max_bytes,
                    }
                ],
            }
        ],
        "ForgottenTopicsData": [],
        "RackId": "",
    }
