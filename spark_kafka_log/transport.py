"""The writer's wire seam: metadata, InitProducerId and PIPELINED Produce over plain blocking sockets.

Where this runs: on the **driver** (``check_topic`` in ``DataSource.writer()``) and on the **executors**
(one :class:`Transport` per write task, owned by the task's producer). Not thread-safe.

Built on the sans-IO protocol layer (:mod:`broker_runtime.protocol.messages`,
:mod:`broker_runtime.protocol.framing`): requests are encoded there, sent with ``sendall`` and their
responses read back IN ORDER (Kafka answers the requests of one connection in the order they arrived), so
the producer can keep several Produce requests in flight on a connection (:meth:`Transport.send_produce`
returns at once, :meth:`Transport.receive_produce` waits for one answer). API versions are negotiated once
per connection with ApiVersions.

Errors: anything that breaks a connection (refused, reset, closed, no answer within request.timeout.ms,
undecodable bytes) raises :class:`TransportError` and closes that connection; the producer then resends.
A broker error code in a metadata or InitProducerId answer raises :class:`~broker_runtime.errors.KafkaError`.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from broker_runtime.errors import ErrorCode, KafkaError, PylogError
from broker_runtime.protocol.framing import FrameDecoder
from broker_runtime.protocol.messages import decode_response, encode_request

__all__ = ["Transport", "TransportError", "check_topic"]

_PRODUCE, _FETCH, _LIST_OFFSETS, _METADATA, _API_VERSIONS, _INIT_PRODUCER_ID = 0, 1, 2, 3, 18, 22
#: Versions this transport can speak, per API key (the broker's advertised range narrows them).
_WANTED = {
    _PRODUCE: (3, 9),
    _FETCH: (4, 11),
    _LIST_OFFSETS: (1, 7),
    _METADATA: (4, 9),
    _INIT_PRODUCER_ID: (0, 4),
}
_BOOTSTRAP = -1


class TransportError(PylogError):
    """A connection to a broker failed (refused, reset, timed out or undecodable); it is closed."""


@dataclass
class _Conn:
    address: tuple[str, int]
    sock: socket.socket
    versions: dict[int, int] = field(default_factory=dict)
    next_id: int = 1
    pending: deque[tuple[int, int, int]] = field(default_factory=deque)  # (correlation, api, version)
    frames: deque[Any] = field(default_factory=deque)
    decoder: FrameDecoder = field(default_factory=FrameDecoder)


def _parse_servers(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        host, _, port = item.strip().rpartition(":")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    return out


class Transport:
    """Connections to the brokers of one cluster plus the metadata the producer needs."""

    def __init__(self, bootstrap_servers: str, *, client_id: str, request_timeout_ms: int) -> None:
        self._bootstrap = _parse_servers(bootstrap_servers)
        self._client_id = client_id
        self._timeout = request_timeout_ms / 1000.0
        #: Produce connections (pipelined) and control connections (one synchronous call at a time) are
        #: separate, so metadata / ListOffsets / Fetch never wait behind, or interleave with, Produce.
        self._conns: dict[int, _Conn] = {}
        self._control: dict[int, _Conn] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._partitions: dict[str, int] = {}

    # ---------------------------------------------------------------------------------- connections

    def _connect(self, node: int, *, control: bool = False) -> _Conn:
        pool = self._control if control else self._conns
        conn = pool.get(node)
        if conn is not None:
            return conn
        candidates = [self._nodes[node]] if node in self._nodes else list(self._bootstrap)
        last: Exception | None = None
        for address in candidates:
            try:
                sock = socket.create_connection(address, timeout=self._timeout)
            except OSError as exc:
                last = exc
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(address, sock)
            pool[node] = conn
            try:
                self._negotiate(conn)
            except Exception:
                self.disconnect(node, control=control)
                raise
            return conn
        where = ", ".join(f"{h}:{p}" for h, p in candidates)
        raise TransportError(f"cannot connect to broker {where}: {last}")

    def _negotiate(self, conn: _Conn) -> None:
        body = self._call(conn, _API_VERSIONS, 0, {})
        if body["ErrorCode"] != 0:
            raise KafkaError(body["ErrorCode"], "ApiVersions")
        ranges = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in body["ApiKeys"]}
        for api, (lo, hi) in _WANTED.items():
            if api not in ranges:
                continue
            blo, bhi = ranges[api]
            if max(lo, blo) > min(hi, bhi):
                raise TransportError(
                    f"broker {conn.address[0]}:{conn.address[1]} speaks API {api} versions {blo}-{bhi}, "
                    f"pylog's writer needs {lo}-{hi}"
                )
            conn.versions[api] = min(hi, bhi)

    def disconnect(self, node: int, *, control: bool = False) -> None:
        """Close the (produce or control) connection to ``node``; unanswered requests on it are lost."""
        conn = (self._control if control else self._conns).pop(node, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sock.close()

    def close(self) -> None:
        for node in list(self._conns):
            self.disconnect(node)
        for node in list(self._control):
            self.disconnect(node, control=True)

    def _send(self, conn: _Conn, api: int, version: int, body: dict[str, Any]) -> int:
        corr = conn.next_id
        conn.next_id = (conn.next_id + 1) & 0x7FFFFFFF
        try:
            conn.sock.sendall(encode_request(api, version, corr, self._client_id, body))
        except OSError as exc:
            raise TransportError(
                f"sending to broker {conn.address[0]}:{conn.address[1]} failed: {exc}"
            ) from exc
        return corr

    def _receive(self, conn: _Conn, corr: int, api: int, version: int) -> dict[str, Any]:
        deadline = time.monotonic() + self._timeout
        while not conn.frames:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TransportError(
                    f"no answer from broker {conn.address[0]}:{conn.address[1]} within "
                    f"request.timeout.ms={int(self._timeout * 1000)}"
                )
            try:
                conn.sock.settimeout(remaining)
                data = conn.sock.recv(1 << 16)
            except OSError as exc:
                raise TransportError(
                    f"reading from broker {conn.address[0]}:{conn.address[1]}: {exc}"
                ) from exc
            if not data:
                raise TransportError(f"broker {conn.address[0]}:{conn.address[1]} closed the connection")
            try:
                conn.frames.extend(conn.decoder.feed(data))
            except PylogError as exc:
                raise TransportError(f"undecodable answer from broker: {exc}") from exc
        frame = conn.frames.popleft()
        try:
            got, body = decode_response(api, version, frame)
        except PylogError as exc:
            raise TransportError(f"undecodable answer from broker: {exc}") from exc
        if got != corr:
            raise TransportError(f"broker answered correlation id {got}, expected {corr}")
        return body

    def _call(self, conn: _Conn, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if conn.pending:
            raise TransportError("internal: synchronous call on a connection with requests in flight")
        return self._receive(conn, self._send(conn, api, version, body), api, version)

    def _call_on(self, node: int, api: int, body: dict[str, Any]) -> dict[str, Any]:
        conn = self._connect(node, control=True)
        try:
            return self._call(conn, api, conn.versions[api], body)
        except TransportError:
            self.disconnect(node, control=True)
            raise

    def _call_any(self, api: int, body: dict[str, Any]) -> dict[str, Any]:
        return self._call_on(next(iter(self._control), _BOOTSTRAP), api, body)

    # ------------------------------------------------------------------------------------- metadata

    def refresh_metadata(self, topics: list[str] | None = None) -> None:
        """Reload leaders of the known topics (or ``topics``); connection errors are left to the caller."""
        names = topics or list(self._partitions)
        if not names:
            return
        with contextlib.suppress(TransportError, KafkaError):
            self._metadata(names, auto_create=False)

    def _metadata(self, topics: list[str], auto_create: bool) -> dict[str, int]:
        body = self._call_any(
            _METADATA, {"Topics": [{"Name": t} for t in topics], "AllowAutoTopicCreation": auto_create}
        )
        for b in body["Brokers"]:
            self._nodes[b["NodeId"]] = (b["Host"], b["Port"])
        codes: dict[str, int] = {}
        for t in body["Topics"]:
            codes[t["Name"]] = t["ErrorCode"]
            if t["ErrorCode"] != 0:
                continue
            parts = t["Partitions"]
            self._partitions[t["Name"]] = len(parts)
            for p in parts:
                self._leaders[(t["Name"], p["PartitionIndex"])] = p["LeaderId"]
        return codes

    def partition_count(self, topic: str) -> int:
        """Partitions of ``topic``, asking the broker to auto-create it (with its num.partitions)."""
        deadline = time.monotonic() + self._timeout
        while True:
            code = self._metadata([topic], auto_create=True).get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if code == 0 and self._partitions.get(topic):
                return self._partitions[topic]
            err = KafkaError(code, f"topic {topic!r}")
            if not err.retriable or time.monotonic() > deadline:
                raise KafkaError(
                    code,
                    f"topic {topic!r} is not available for writing (auto-creation disabled on the broker? "
                    "create it first)",
                )
            time.sleep(0.1)

    def leader(self, topic: str, partition: int) -> int:
        """Node id leading ``topic``/``partition`` (from the last metadata answer)."""
        node = self._leaders.get((topic, partition))
        if node is None or node < 0:
            self.refresh_metadata([topic])
            node = self._leaders.get((topic, partition), _BOOTSTRAP)
        return node if node is not None and node >= 0 else _BOOTSTRAP

    # ------------------------------------------------------------------------------------- producer

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent producer id and epoch (InitProducerId without a transactional id)."""
        body = self._call_any(
            _INIT_PRODUCER_ID,
            {"TransactionalId": None, "TransactionTimeoutMs": 60000, "ProducerId": -1, "ProducerEpoch": -1},
        )
        if body["ErrorCode"] != 0:
            raise KafkaError(body["ErrorCode"], "InitProducerId")
        return int(body["ProducerId"]), int(body["ProducerEpoch"])

    def send_produce(
        self, node: int, batches: dict[tuple[str, int], bytes], *, acks: int, timeout_ms: int
    ) -> int | None:
        """Send one ProduceRequest to ``node`` without waiting; returns the token for receive_produce."""
        conn = self._connect(node)
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), data in batches.items():
            topics.setdefault(topic, []).append({"Index": partition, "Records": data})
        version = conn.versions[_PRODUCE]
        body = {
            "TransactionalId": None,
            "Acks": acks,
            "TimeoutMs": timeout_ms,
            "TopicData": [{"Name": t, "PartitionData": ps} for t, ps in topics.items()],
        }
        try:
            corr = self._send(conn, _PRODUCE, version, body)
        except TransportError:
            self.disconnect(node)
            raise
        if acks == 0:
            return None
        conn.pending.append((corr, _PRODUCE, version))
        return corr

    def receive_produce(self, node: int, token: object) -> dict[tuple[str, int], tuple[int, int, str]]:
        """Wait for the answer to the oldest Produce in flight on ``node`` (which must be ``token``)."""
        conn = self._conns.get(node)
        if conn is None or not conn.pending:
            raise TransportError(f"connection to broker {node} was lost with requests in flight")
        corr, api, version = conn.pending[0]
        if corr != token:
            raise TransportError(f"internal: answers arrive in order; expected {corr}, asked for {token}")
        try:
            body = self._receive(conn, corr, api, version)
        except TransportError:
            self.disconnect(node)
            raise
        conn.pending.popleft()
        out: dict[tuple[str, int], tuple[int, int, str]] = {}
        for t in body["Responses"]:
            for p in t["PartitionResponses"]:
                out[(t["Name"], p["Index"])] = (
                    int(p["ErrorCode"]),
                    int(p["BaseOffset"]),
                    p.get("ErrorMessage") or "",
                )
        return out

    # ------------------------------------------------------------------- recovery of a failed attempt

    def _call_leader(self, topic: str, partition: int, api: int, body: dict[str, Any]) -> dict[str, Any]:
        return self._call_on(self.leader(topic, partition), api, body)

    def log_end_offset(self, topic: str, partition: int) -> int:
        """The partition's log end offset (ListOffsets "latest", read_uncommitted)."""
        body = self._call_leader(
            topic,
            partition,
            _LIST_OFFSETS,
            {
                "ReplicaId": -1,
                "IsolationLevel": 0,
                "Topics": [{"Name": topic, "Partitions": [{"PartitionIndex": partition, "Timestamp": -1}]}],
            },
        )
        p = body["Topics"][0]["Partitions"][0]
        if p["ErrorCode"] != 0:
            raise KafkaError(p["ErrorCode"], f"ListOffsets {topic}-{partition}")
        return int(p["Offset"])

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 8 << 20) -> tuple[bytes, int]:
        """(record batch bytes from ``offset``, high watermark) of one partition, read_uncommitted."""
        body = self._call_leader(
            topic,
            partition,
            _FETCH,
            {
                "ReplicaId": -1,
                "MaxWaitMs": 0,
                "MinBytes": 0,
                "MaxBytes": max_bytes,
                "IsolationLevel": 0,
                "Topics": [
                    {
                        "Topic": topic,
                        "Partitions": [
                            {"Partition": partition, "FetchOffset": offset, "PartitionMaxBytes": max_bytes}
                        ],
                    }
                ],
                "ForgottenTopicsData": [],
            },
        )
        p = body["Responses"][0]["Partitions"][0]
        if p["ErrorCode"] != 0:
            raise KafkaError(p["ErrorCode"], f"Fetch {topic}-{partition} at offset {offset}")
        return bytes(p["Records"] or b""), int(p["HighWatermark"])


def check_topic(servers: str, topic: str, request_timeout_ms: int = 30000) -> int:
    """Driver-side check: the broker answers and ``topic`` exists (auto-created if allowed); its partitions."""
    transport = Transport(servers, client_id="pylog-writer-driver", request_timeout_ms=request_timeout_ms)
    try:
        return transport.partition_count(topic)
    finally:
        transport.close()
