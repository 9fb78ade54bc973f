"""Benchmark section "fetchsessions": the broker's CPU per MB of Fetch for a consumer of 100 partitions with
little new data per fetch, with incremental fetch sessions (KIP-227) and without.

One broker child process holds a topic of 100 partitions (quick mode: 10, to check the section runs). A consumer
written for this section (raw Fetch v12 over one socket, no client library in between; MaxBytes and
PartitionMaxBytes 1 MiB, MaxWaitMs 0) is caught up on every partition; each round writes one record (100-byte
value) into each of the next 5 partitions, then the consumer fetches until it has them (one fetch, in practice).
That is the steady state sessions are for: most partitions have nothing new in most fetches.

* sessionless: every fetch names all 100 partitions (SessionId 0, SessionEpoch -1, as librdkafka and pylog's
  own client fetch), and the broker answers all 100;
* sessions: the first fetch is full (epoch 0) and makes a session; each next one is incremental and names only
  the partitions whose position moved (as Kafka's Java consumer does); the broker reads all 100 and answers only
  those with records or a changed high watermark.

Figures: the broker process's CPU time (user + system, ``/proc/<pid>/stat``) over the fetches only (read before
and after each fetch: the produce requests are not counted; at 10 ms ticks one fetch is below the resolution, the
sum over 600 rounds is a sample of it), per MB of record bytes served, as ``median (min-max)`` over alternating
runs (sessionless, sessions, ...: 5 pairs; quick mode 1 pair of 20 rounds), and their ratio. No target: the issue
asks for the figure. On a loaded 2-core machine the client's own loop shares the cores with the broker.
"""

from __future__ import annotations

import socket
import statistics
import struct
import tempfile
from typing import Any

from jobs.bench.common import Result, broker_pid, process_cpu_s

SECTION = "fetchsessions"
TOPIC = "fs"
PARTITIONS = 100
VALUE = b"v" * 100
MAX_BYTES = 1 << 20
#: Partitions given one new record before each fetch.
NEW_PER_ROUND = 5
_FETCH, _PRODUCE = 1, 0


class _Conn:
    """One socket; ``call`` sends a request and decodes its answer with pylog's codec."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation = 0

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        from broker_runtime.protocol.messages import decode_response, encode_request

        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "bench-fetchsess", body))
        (size,) = struct.unpack(">i", self._recv(4))
        _, answer = decode_response(api_key, version, self._recv(size))
        return answer

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _produce(conn: _Conn, partitions: list[int]) -> None:
    """One record (a one-record batch) into each of ``partitions``, in one Produce request."""
    from broker_runtime.protocol.records import RecordBatchBuilder

    data = []
    for p in partitions:
        builder = RecordBatchBuilder()
        builder.append(1_700_000_000_000, b"k", VALUE)
        data.append({"Index": p, "Records": builder.build()})
    body = {
        "TransactionalId": None,
        "Acks": 1,
        "TimeoutMs": 10000,
        "TopicData": [{"Name": TOPIC, "PartitionData": data}],
    }
    for part in conn.call(_PRODUCE, 9, body)["Responses"][0]["PartitionResponses"]:
        if part["ErrorCode"]:
            raise RuntimeError(f"produce to {TOPIC}-{part['Index']} failed: error {part['ErrorCode']}")


def _next_offset(records: bytes, fetched_from: int) -> int:
    """The offset after the last whole batch of ``records`` (magic-2 batch headers: base offset, length,
    last offset delta at byte 23)."""
    pos, nxt = 0, fetched_from
    while pos + 27 <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        if pos + 12 + length > len(records):
            break
        (delta,) = struct.unpack_from(">i", records, pos + 23)
        nxt = base + delta + 1
        pos += 12 + length
    return nxt


def _partition(p: int, offset: int) -> dict[str, Any]:
    return {
        "Partition": p,
        "CurrentLeaderEpoch": -1,
        "FetchOffset": offset,
        "LastFetchedEpoch": -1,
        "LogStartOffset": -1,
        "PartitionMaxBytes": MAX_BYTES,
    }


class _Consumer:
    """A consumer of every partition from ``ends`` on, with a fetch session or without."""

    def __init__(self, conn: _Conn, ends: list[int], sessions: bool) -> None:
        self.conn = conn
        self.sessions = sessions
        self.positions = dict(enumerate(ends))
        self.changed = set(self.positions)
        self.session_id, self.epoch = 0, (0 if sessions else -1)
        self.served = 0

    def fetch(self) -> None:
        named = sorted(self.changed) if self.sessions else list(self.positions)
        answer = self.conn.call(_FETCH, 12, self._body(named, self.epoch))
        if answer["ErrorCode"]:
            raise RuntimeError(f"fetch answered error {answer['ErrorCode']}")
        if self.sessions:
            if answer["SessionId"] == 0:
                raise RuntimeError(
                    "the broker made no fetch session (max.incremental.fetch.session.cache.slots?)"
                )
            self.session_id, self.epoch = answer["SessionId"], self.epoch + 1
        self.changed = set()
        for topic in answer["Responses"]:
            for part in topic["Partitions"]:
                records = bytes(part["Records"] or b"")
                if part["ErrorCode"] or not records:
                    continue
                p = part["PartitionIndex"]
                self.served += len(records)
                self.positions[p] = _next_offset(records, self.positions[p])
                self.changed.add(p)

    def close(self) -> None:
        if self.sessions and self.session_id:
            body = {**self._body([], -1), "SessionId": self.session_id}
            self.conn.call(_FETCH, 12, body)

    def _body(self, named: list[int], epoch: int) -> dict[str, Any]:
        return {
            "ReplicaId": -1,
            "MaxWaitMs": 0,
            "MinBytes": 1,
            "MaxBytes": MAX_BYTES,
            "IsolationLevel": 0,
            "SessionId": self.session_id,
            "SessionEpoch": epoch,
            "Topics": [{"Topic": TOPIC, "Partitions": [_partition(p, self.positions[p]) for p in named]}],
            "ForgottenTopicsData": [],
            "RackId": "",
        }


def _steady(conn: _Conn, pid: int, ends: list[int], rounds: int, sessions: bool) -> tuple[float, int, int]:
    """``rounds`` of: one record into each of the next :data:`NEW_PER_ROUND` partitions, then fetches until the
    consumer has them. Returns (broker CPU seconds over the fetches only, record bytes served, fetches)."""
    consumer = _Consumer(conn, ends, sessions)
    cpu = 0.0
    fetches = 0
    before = process_cpu_s(pid)
    consumer.fetch()  # the first (full) fetch: nothing new yet
    cpu += process_cpu_s(pid) - before
    fetches += 1
    partitions = len(ends)
    for r in range(rounds):
        chosen = [(r * NEW_PER_ROUND + j) % partitions for j in range(NEW_PER_ROUND)]
        _produce(conn, chosen)
        for p in chosen:
            ends[p] += 1
        while any(consumer.positions[p] < ends[p] for p in chosen):
            before = process_cpu_s(pid)
            consumer.fetch()
            cpu += process_cpu_s(pid) - before
            fetches += 1
    consumer.close()
    return cpu, consumer.served, fetches


def run(quick: bool) -> list[Result]:
    from broker_runtime.launch import broker_process, create_topic

    partitions, rounds, pairs = (10, 20, 1) if quick else (PARTITIONS, 600, 5)
    cpu_per_mb: dict[bool, list[float]] = {False: [], True: []}
    fetch_counts: dict[bool, int] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-fetchsess-") as data,
        broker_process(data, startup_timeout_s=120) as bootstrap,
    ):
        create_topic(bootstrap, TOPIC, partitions)
        pid = broker_pid(data)
        conn = _Conn(bootstrap)
        ends = [0] * partitions
        try:
            for _ in range(pairs):
                for sessions in (False, True):
                    cpu, served, fetches = _steady(conn, pid, ends, rounds, sessions)
                    cpu_per_mb[sessions].append(cpu * 1000 / (served / 1e6))
                    fetch_counts[sessions] = fetches
        finally:
            conn.close()
    results: list[Result] = []
    for sessions, label in ((False, "sessionless"), (True, "sessions")):
        runs = cpu_per_mb[sessions]
        results.append(
            Result(
                SECTION,
                f"broker CPU per MB of Fetch, {partitions} partitions, {label} ({fetch_counts[sessions]} fetches)",
                statistics.median(runs),
                "ms/MB",
                spread=(min(runs), max(runs)),
            )
        )
    off, on = (statistics.median(cpu_per_mb[s]) for s in (False, True))
    results.append(
        Result(SECTION, "broker CPU per MB, sessions / sessionless", on / off if off else 0.0, "x")
    )
    return results
