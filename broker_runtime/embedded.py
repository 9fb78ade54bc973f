"""Start a pylog broker -- or a cluster of them -- in child processes for tests, jobs and the Spark connector.

::

    with embedded_broker(tmp_path) as bootstrap:          # "127.0.0.1:PORT"
        create_topic(bootstrap, "events", partitions=4)
        ...

    with embedded_cluster(tmp_path, nodes=3) as bootstrap:   # "127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2"
        create_topic(bootstrap, "events", partitions=4, replication_factor=3)

    with start_cluster(tmp_path, nodes=3) as cluster:     # the processes too (pids, per-node addresses)
        os.kill(cluster.nodes[1].pid, signal.SIGSTOP)

A cluster is N ``start`` processes (node.id 0..N-1) sharing ``<data_dir>/kafka-logs`` as the cluster directory
(``pylog.cluster.dir``, holding ``cluster.json``); node ``i`` keeps its logs in ``<data_dir>/kafka-logs/node-i``
and its stderr in ``<data_dir>/broker-i.log``. :func:`cluster_node_overrides` is the one place that layout is
decided; ``pylog-broker cluster`` uses it too. ``embedded_broker(..., nodes=3)`` is the same as
:func:`embedded_cluster`.

:func:`embedded_broker` runs ``python -m broker_runtime start`` (the same code path as the ``pylog-broker``
console script) with ``listeners=PLAINTEXT://127.0.0.1:0`` and ``log.dirs=<data_dir>/kafka-logs``, waits for
its ``listening on HOST:PORT`` line, yields the bootstrap address, and on exit stops it with SIGTERM (clean
shutdown), waiting, then SIGKILL if it hangs. The child's stderr is kept in ``<data_dir>/broker.log``; a broker
that exits before listening raises :class:`RuntimeError` with the tail of that log.

:func:`create_topic` sends one CreateTopics request over a plain socket with the protocol codec (no client
library needed). This module imports only the protocol layer, so the connector may use it.
Thread-safety: every call is independent; the context manager belongs to the thread that entered it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_runtime.errors import ErrorCode, KafkaError, ProtocolError
from broker_runtime.protocol.messages import decode_response, encode_request

__all__ = [
    "ClusterNode",
    "EmbeddedCluster",
    "cluster_node_overrides",
    "create_topic",
    "embedded_broker",
    "embedded_cluster",
    "request",
    "start_cluster",
]

_LISTENING = "listening on "


def cluster_node_overrides(base_dir: str | os.PathLike[str], node_id: int) -> dict[str, str]:
    """The properties that make a broker node ``node_id`` of the cluster living under ``base_dir``."""
    base = Path(base_dir)
    return {
        "node.id": str(node_id),
        "log.dirs": str(base / f"node-{node_id}"),
        "pylog.cluster.dir": str(base),
        "listeners": "PLAINTEXT://127.0.0.1:0",
    }


@dataclass
class ClusterNode:
    """One broker process of an embedded cluster."""

    node_id: int
    proc: subprocess.Popen[str]
    bootstrap: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass
class EmbeddedCluster:
    """The processes of a running embedded cluster; ``bootstrap`` lists every node."""

    data_dir: Path
    nodes: list[ClusterNode] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def log_tail(self, node_id: int, lines: int = 40) -> str:
        return _tail(self.nodes[node_id].log_path, lines)


def _spawn(config_file: Path, overrides: Mapping[str, str], log_path: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "broker_runtime", "start", "--config", str(config_file)]
    for key, value in overrides.items():
        cmd += ["--override", f"{key}={value}"]
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL, text=True, bufsize=1
        )


@contextlib.contextmanager
def start_cluster(
    data_dir: str | os.PathLike[str],
    nodes: int = 3,
    *,
    overrides: Mapping[str, str] | None = None,
    startup_timeout_s: float = 30,
) -> Iterator[EmbeddedCluster]:
    """Run ``nodes`` broker processes forming one cluster; yields the :class:`EmbeddedCluster`."""
    if nodes < 1:
        raise ValueError(f"nodes={nodes}: a cluster needs at least one node")
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    base = data / "kafka-logs"
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(base)}
    props.update(overrides or {})
    config_file = data / "cluster.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    cluster = EmbeddedCluster(data)
    procs: list[tuple[int, subprocess.Popen[str], Path]] = []
    try:
        for node_id in range(nodes):
            log_path = data / f"broker-{node_id}.log"
            procs.append(
                (node_id, _spawn(config_file, cluster_node_overrides(base, node_id), log_path), log_path)
            )
        for node_id, proc, log_path in procs:
            address = _wait_listening(proc, startup_timeout_s, log_path)
            threading.Thread(target=_drain, args=(proc,), daemon=True).start()
            cluster.nodes.append(ClusterNode(node_id, proc, address, log_path))
        yield cluster
    finally:
        for _, proc, _ in procs:
            _resume(proc)
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in procs:
            _stop(proc)


def _resume(proc: subprocess.Popen[str]) -> None:
    """SIGCONT a child a test may have stopped, so that it can obey SIGTERM."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGCONT)


@contextlib.contextmanager
def embedded_cluster(
    data_dir: str | os.PathLike[str],
    nodes: int = 3,
    *,
    overrides: Mapping[str, str] | None = None,
    startup_timeout_s: float = 30,
) -> Iterator[str]:
    """Run a cluster of ``nodes`` brokers; yields the bootstrap list ``"h:p,h:p,..."``."""
    with start_cluster(data_dir, nodes, overrides=overrides, startup_timeout_s=startup_timeout_s) as cluster:
        yield cluster.bootstrap


@contextlib.contextmanager
def embedded_broker(
    data_dir: str | os.PathLike[str],
    *,
    overrides: Mapping[str, str] | None = None,
    startup_timeout_s: float = 30,
    nodes: int = 1,
) -> Iterator[str]:
    """Run a broker child process on a free loopback port; yields ``"127.0.0.1:PORT"``.

    With ``nodes`` > 1 this is :func:`embedded_cluster` (the bootstrap list names every node).
    """
    if nodes > 1:
        with embedded_cluster(
            data_dir, nodes, overrides=overrides, startup_timeout_s=startup_timeout_s
        ) as servers:
            yield servers
        return
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data / "kafka-logs")}
    props.update(overrides or {})
    config_file = data / "broker.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    log_path = data / "broker.log"
    cmd = [sys.executable, "-m", "broker_runtime", "start", "--config", str(config_file)]
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL, text=True, bufsize=1
        )
    try:
        bootstrap = _wait_listening(proc, startup_timeout_s, log_path)
        # Keep draining stdout so the child never blocks on a full pipe.
        threading.Thread(target=_drain, args=(proc,), daemon=True).start()
        yield bootstrap
    finally:
        _stop(proc)


def _wait_listening(proc: subprocess.Popen[str], timeout_s: float, log_path: Path) -> str:
    assert proc.stdout is not None
    found: list[str] = []

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(_LISTENING):
                found.append(line[len(_LISTENING) :].strip())
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if found:
        return found[0]
    code = proc.poll()
    tail = _tail(log_path)
    if code is None:
        raise RuntimeError(f"broker did not print its listening line within {timeout_s} s; log tail:\n{tail}")
    raise RuntimeError(f"broker exited with status {code} before listening; log tail:\n{tail}")


def _drain(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(Exception):
        assert proc.stdout is not None
        for _ in proc.stdout:
            pass


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if proc.stdout is not None:
        with contextlib.suppress(Exception):
            proc.stdout.close()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def request(
    bootstrap: str, api_key: int, api_version: int, body: Mapping[str, Any], *, timeout_s: float = 30
) -> dict[str, Any]:
    """Send one request to ``bootstrap`` (the first address of a list) on a fresh connection; the response body."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(encode_request(api_key, api_version, 1, "pylog-embedded", body))
        size = int.from_bytes(_recv_exactly(sock, 4), "big", signed=True)
        frame = _recv_exactly(sock, size)
    _, response = decode_response(api_key, api_version, frame)
    return response


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ProtocolError(f"connection closed after {len(chunks)} of {n} response bytes")
        chunks += chunk
    return bytes(chunks)


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    configs: Mapping[str, str] | None = None,
    *,
    exist_ok: bool = False,
    timeout_s: float = 30,
    replication_factor: int = 1,
) -> None:
    """Create a topic; raises :class:`KafkaError` with the broker's code and message."""
    body = {
        "Topics": [
            {
                "Name": name,
                "NumPartitions": partitions,
                "ReplicationFactor": replication_factor,
                "Assignments": [],
                "Configs": [{"Name": k, "Value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeoutMs": int(timeout_s * 1000),
        "validateOnly": False,
    }
    deadline = time.monotonic() + timeout_s
    response = request(bootstrap, 19, 5, body, timeout_s=max(1.0, deadline - time.monotonic()))
    result = response["Topics"][0]
    code = result["ErrorCode"]
    if code == ErrorCode.TOPIC_ALREADY_EXISTS and exist_ok:
        return
    if code != ErrorCode.NONE:
        raise KafkaError(code, f"creating topic {name!r}: {result.get('ErrorMessage') or ''}")
