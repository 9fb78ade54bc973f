"""Benchmark section "fetchsessions": the broker's CPU per MB of Fetch for a consumer of 100 partitions with
little new data per fetch, with incremental fetch sessions (KIP-227) and without.

One broker child process holds a topic of 100 partitions, each written as many one-record batches (100-byte
values; quick mode: 10 partitions of 5 batches, to check the section runs). A client written for this section (raw Fetch v12 over one socket, no client library
in between) reads every partition from offset 0 to its end with ``MaxBytes`` 4 KiB per fetch, so each answer
carries records of a few partitions while the others have nothing new -- the case sessions are for:

* sessionless: every fetch names all 100 partitions (SessionId 0, SessionEpoch -1, as librdkafka and pylog's
  own client fetch), and the broker answers all 100;
* sessions: the first fetch is full (epoch 0) and makes a session; each next one is incremental and names only
  the partitions whose position moved (as Kafka's Java consumer does); the broker answers only the partitions
  with records (the session moves those to the end of its order, and the sessionless client rotates the same
  way, so both read the partitions in the same order).

Figures: the broker process's CPU time (user + system, ``/proc/<pid>/stat``, 10 ms ticks) over each full read,
per MB of record bytes served, as ``median (min-max)`` over alternating runs (sessionless, sessions, ...: 5
pairs; quick mode 1), and their ratio. No target: the issue asks for the figure. On a loaded 2-core machine the
client's own loop shares the cores with the broker; the broker's CPU is what is measured.
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
MAX_BYTES = 4096
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


def _write(conn: _Conn, partitions: int, batches: int) -> None:
    """``batches`` one-record batches into every partition (one Produce per round over all partitions)."""
    from broker_runtime.protocol.records import RecordBatchBuilder

    for i in range(batches):
        data = []
        for p in range(partitions):
            builder = RecordBatchBuilder()
            builder.append(1_700_000_000_000 + i, b"k", VALUE)
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


def _read_all(conn: _Conn, partitions: int, end: int, sessions: bool) -> tuple[int, int]:
    """Read every partition from 0 to ``end``; (record bytes served, fetches)."""
    positions = dict.fromkeys(range(partitions), 0)
    order = list(range(partitions))  # the sessionless client's rotation (the session keeps its own)
    changed: set[int] = set(order)
    session_id, epoch = 0, 0 if sessions else -1
    served = fetches = 0
    while any(offset < end for offset in positions.values()):
        named = [p for p in order if p in changed] if sessions else order
        body = {
            "ReplicaId": -1,
            "MaxWaitMs": 0,
            "MinBytes": 1,
            "MaxBytes": MAX_BYTES,
            "IsolationLevel": 0,
            "SessionId": session_id,
            "SessionEpoch": epoch,
            "Topics": [{"Topic": TOPIC, "Partitions": [_partition(p, positions[p]) for p in named]}],
            "ForgottenTopicsData": [],
            "RackId": "",
        }
        answer = conn.call(_FETCH, 12, body)
        fetches += 1
        if answer["ErrorCode"]:
            raise RuntimeError(f"fetch answered error {answer['ErrorCode']}")
        if sessions:
            if answer["SessionId"] == 0:
                raise RuntimeError(
                    "the broker made no fetch session (max.incremental.fetch.session.cache.slots?)"
                )
            session_id, epoch = answer["SessionId"], epoch + 1
        changed = set()
        for topic in answer["Responses"]:
            for part in topic["Partitions"]:
                records = bytes(part["Records"] or b"")
                if part["ErrorCode"] or not records:
                    continue
                p = part["PartitionIndex"]
                served += len(records)
                positions[p] = _next_offset(records, positions[p])
                changed.add(p)
                order.remove(p)
                order.append(p)
    if sessions:  # close it
        conn.call(_FETCH, 12, {**body, "SessionId": session_id, "SessionEpoch": -1, "Topics": []})
    return served, fetches


def run(quick: bool) -> list[Result]:
    from broker_runtime.launch import broker_process, create_topic

    partitions, batches, pairs = (10, 5, 1) if quick else (PARTITIONS, 60, 5)
    cpu_per_mb: dict[bool, list[float]] = {False: [], True: []}
    fetch_counts: dict[bool, int] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-fetchsess-") as data,
        broker_process(data, startup_timeout_s=120) as bootstrap,
    ):
        create_topic(bootstrap, TOPIC, partitions)
        pid = broker_pid(data)
        conn = _Conn(bootstrap)
        try:
            _write(conn, partitions, batches)
            for _ in range(pairs):
                for sessions in (False, True):
                    before = process_cpu_s(pid)
                    served, fetches = _read_all(conn, partitions, batches, sessions)
                    cpu_per_mb[sessions].append((process_cpu_s(pid) - before) * 1000 / (served / 1e6))
                    fetch_counts[sessions] = fetches
        finally:
            conn.close()
    results: list[Result] = []
    for sessions, label in ((False, "sessionless"), (True, "sessions")):
        runs = cpu_per_mb[sessions]
        median = statistics.median(runs)
        results.append(
            Result(
                SECTION,
                f"broker CPU per MB of Fetch, {partitions} partitions, {label} ({fetch_counts[sessions]} fetches)",
                median,
                "ms/MB",
                spread=(min(runs), max(runs)),
            )
        )
    off, on = (statistics.median(cpu_per_mb[s]) for s in (False, True))
    results.append(
        Result(SECTION, "broker CPU per MB, sessions / sessionless", on / off if off else 0.0, "x")
    )
    return results
