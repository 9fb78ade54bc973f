"""Start a pylog broker -- or a cluster of them -- in child processes, and the shared broker of a data dir.

Two ways to run a broker from Python, both keeping its partition logs in ``<data_dir>/logs``
(:func:`broker_log_dir`; a cluster keeps node ``i`` in ``<data_dir>/kafka-logs/node-i``)::

    with embedded_broker(tmp_path) as bootstrap:          # a child process, stopped on exit
        create_topic(bootstrap, "events", partitions=4)

    bootstrap = ensure_shared_broker(data_dir)            # THE detached broker of data_dir, found or started
    shared_broker_status(data_dir)                        # {"bootstrap", "pid", "log_dir", ...} or None
    stop_shared_broker(data_dir)                          # also ``pylog-broker stop --data-dir DIR``

**Child-process brokers.** :func:`embedded_broker` runs ``python -m broker_runtime start`` (the same code path
as the ``pylog-broker`` console script) with ``listeners=PLAINTEXT://127.0.0.1:0`` and
``log.dirs=<data_dir>/logs``, waits for its ``listening on HOST:PORT`` line, yields the bootstrap address, and on
exit stops it with SIGTERM (clean shutdown), waiting, then SIGKILL if it hangs. The child's stderr is kept in
``<data_dir>/broker.log``; a broker that exits before listening raises :class:`RuntimeError` with the tail of
that log. ``embedded_broker(..., nodes=3)`` is :func:`embedded_cluster`.

A cluster (:func:`start_cluster`, :func:`embedded_cluster`) is N ``start`` processes (node.id 0..N-1) sharing
``<data_dir>/kafka-logs`` as the cluster directory (``pylog.cluster.dir``, holding ``cluster.json``); node ``i``
keeps its logs in ``<data_dir>/kafka-logs/node-i`` and its stderr in ``<data_dir>/broker-i.log``.
:func:`cluster_node_overrides` is the one place that layout is decided; ``pylog-broker cluster`` uses it too.

**The shared broker of a data directory** (the Spark connector's zero-configuration default): ONE detached
broker per data directory, shared by every process on the machine, that outlives whoever started it. Its files,
all in the data directory::

    embedded-broker.json   discovery file: {"host", "port", "pid", "started_ms", "data_dir", "log_dir"},
                           written atomically (temp file + rename) once the broker listens
    embedded-broker.lock   fcntl lock file: held exclusively while a process checks / starts / stops the
                           broker, so concurrent processes start at most one broker
    embedded-broker.log    the broker's stdout/stderr (appended)
    broker.properties      its settings, written with defaults on first start (editable; read at each start)
    logs/                  its log.dirs (Kafka's on-disk layout)

Discovery rule: the discovery file names a live broker when its pid is running (not a zombie), that process's
command line is the broker of THIS data directory (``broker_runtime start --config <data_dir>/broker.properties``;
so a reused pid is never trusted, nor signalled), AND its port accepts a TCP connection; otherwise the file is
stale and :func:`ensure_shared_broker` replaces it with a freshly started broker. The broker is started through
a short-lived launcher process in its own session, so it is re-parented to init and never left a zombie in the
starting process (which may be a long-lived Spark worker). :func:`stop_shared_broker` sends SIGTERM (clean
shutdown), then SIGKILL after its timeout.

:func:`create_topic` sends one CreateTopics request over a plain socket with the protocol codec (no client
library needed). This module imports only the protocol layer, so the connector may use it.
Thread-safety: every call is independent; the context manager belongs to the thread that entered it; the shared
broker's start and stop are serialized across processes by the lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
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

from broker_runtime.errors import ErrorCode, KafkaError, ProtocolError, PylogError
from broker_runtime.protocol.messages import decode_response, encode_request

__all__ = [
    "DISCOVERY_FILE",
    "LOCK_FILE",
    "LOG_DIR",
    "LOG_FILE",
    "ClusterNode",
    "EmbeddedCluster",
    "SharedBrokerError",
    "broker_log_dir",
    "cluster_node_overrides",
    "create_topic",
    "embedded_broker",
    "embedded_cluster",
    "ensure_shared_broker",
    "request",
    "shared_broker_address",
    "shared_broker_status",
    "start_cluster",
    "stop_shared_broker",
]

_LISTENING = "listening on "

#: The partition logs of a data directory's broker (shared or child process): ``<data_dir>/logs``.
LOG_DIR = "logs"
#: The cluster directory of :func:`start_cluster`: ``<data_dir>/kafka-logs`` (node ``i`` in ``node-i``).
CLUSTER_DIR = "kafka-logs"
DISCOVERY_FILE = "embedded-broker.json"
LOCK_FILE = "embedded-broker.lock"
LOG_FILE = "embedded-broker.log"
CONFIG_FILE = "broker.properties"


def broker_log_dir(data_dir: str | os.PathLike[str]) -> Path:
    """``<data_dir>/logs``: where the broker of ``data_dir`` keeps its partitions (its ``log.dirs``)."""
    return Path(data_dir) / LOG_DIR


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
    base = data / CLUSTER_DIR
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
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(broker_log_dir(data))}
    props.update(overrides or {})
    config_file = data / CONFIG_FILE
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


# --- The shared broker of a data directory --------------------------------------------------------------------


class SharedBrokerError(PylogError):
    """The shared broker of a data directory could not be started, reached or stopped; the message says why."""


#: Starts the broker detached and prints its pid; runs as a separate short-lived process so the broker is
#: re-parented to init (no zombie in the starting process, which may be a long-lived Spark worker).
_LAUNCHER = """
import subprocess, sys
log = open(sys.argv[1], "ab", buffering=0)
p = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                     start_new_session=True, close_fds=True)
print(p.pid, flush=True)
"""

#: Written to ``broker.properties`` in the data directory the first time; edit that file to change the shared
#: broker's settings (``num.partitions`` of auto-created topics, retention, ...) for later starts.
_DEFAULT_PROPERTIES = """# The shared pylog broker of this data directory (Kafka property names).
# Edits take effect the next time the broker starts (stop it with: pylog-broker stop --data-dir DIR).
node.id=0
num.partitions=1
auto.create.topics.enable=true
"""

#: Decided by the data directory, whatever ``broker.properties`` or the overrides say.
_FIXED_KEYS = frozenset({"listeners", "log.dirs", "log.dir"})


@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    with open(data_dir / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped by a non-reaping init) does not count."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _is_our_broker(pid: int, data_dir: Path) -> bool:
    """False when ``pid`` is a live process other than the broker of ``data_dir`` (e.g. its pid was reused)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no procfs (or just gone): the port check decides
    return b"broker_runtime" in args and os.fsencode(str(data_dir / CONFIG_FILE)) in args


def _port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _read_discovery(data_dir: Path) -> dict[str, Any] | None:
    try:
        info = json.loads((data_dir / DISCOVERY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _discovered_pid(info: Mapping[str, Any]) -> int | None:
    try:
        return int(str(info["pid"]))
    except (KeyError, ValueError):
        return None


def _alive(info: Mapping[str, Any], data_dir: Path) -> bool:
    pid = _discovered_pid(info)
    try:
        host, port = str(info["host"]), int(str(info["port"]))
    except (KeyError, ValueError):
        return False
    return pid is not None and _pid_alive(pid) and _is_our_broker(pid, data_dir) and _port_open(host, port)


def _broker_command(data_dir: Path, overrides: Mapping[str, str]) -> list[str]:
    config = data_dir / CONFIG_FILE
    if not config.exists():
        config.write_text(_DEFAULT_PROPERTIES, encoding="utf-8")
    cmd = [sys.executable, "-m", "broker_runtime", "start", "--config", str(config)]
    fixed = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(broker_log_dir(data_dir))}
    for key, value in [*overrides.items(), *fixed.items()]:  # always loopback, logs in the data directory
        cmd += ["--override", f"{key}={value}"]
    return cmd


def _log_tail(path: Path, start: int, limit: int = 2000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return text[-limit:]


def _start_shared(data_dir: Path, overrides: Mapping[str, str], timeout_s: float) -> dict[str, Any]:
    log_path = data_dir / LOG_FILE
    start_pos = log_path.stat().st_size if log_path.exists() else 0
    env = dict(os.environ)
    # The broker must import the same project as this process, wherever it was started from.
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
    launcher = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, str(log_path), *_broker_command(data_dir, overrides)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(data_dir),
        timeout=timeout_s,
        check=False,
    )
    if launcher.returncode != 0:
        raise SharedBrokerError(f"could not launch the broker of {data_dir}: {launcher.stderr.strip()}")
    pid = int(launcher.stdout.strip())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in _log_tail(log_path, start_pos, limit=1 << 20).splitlines():
            if _LISTENING in line:
                address = line.split(_LISTENING, 1)[1].strip().split()[0]
                host, _, port = address.rpartition(":")
                return {
                    "host": host or "127.0.0.1",
                    "port": int(port),
                    "pid": pid,
                    "started_ms": int(time.time() * 1000),
                    "data_dir": str(data_dir),
                    "log_dir": str(broker_log_dir(data_dir)),
                }
        if not _pid_alive(pid):
            raise SharedBrokerError(
                f"the broker of {data_dir} exited during start; its log ({log_path}) says:\n"
                + _log_tail(log_path, start_pos)
            )
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    raise SharedBrokerError(
        f"the broker of {data_dir} did not report 'listening on' within {timeout_s:.0f} s; "
        f"its log ({log_path}) says:\n" + _log_tail(log_path, start_pos)
    )


def _address(info: Mapping[str, Any]) -> str:
    return f"{info['host']}:{info['port']}"


def ensure_shared_broker(
    data_dir: str | os.PathLike[str],
    *,
    overrides: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
) -> str:
    """``host:port`` of the shared broker of ``data_dir``, started (detached) if none is alive.

    ``overrides`` (Kafka property names) apply only when this call starts the broker; ``listeners`` and
    ``log.dirs`` are decided by the data directory and may not be overridden (:class:`ValueError`).
    Raises :class:`SharedBrokerError` with the tail of its log when the broker cannot start.
    """
    fixed = sorted(_FIXED_KEYS.intersection(overrides or {}))
    if fixed:
        raise ValueError(f"{', '.join(fixed)}: decided by the data directory, cannot be overridden")
    path = Path(data_dir).resolve()
    path.mkdir(parents=True, exist_ok=True)
    info = _read_discovery(path)
    if info is not None and _alive(info, path):  # fast path without the lock
        return _address(info)
    with _locked(path):
        info = _read_discovery(path)
        if info is not None and _alive(info, path):
            return _address(info)
        info = _start_shared(path, overrides or {}, timeout_s)
        tmp = path / f"{DISCOVERY_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(info), encoding="utf-8")
        os.replace(tmp, path / DISCOVERY_FILE)
        return _address(info)


def shared_broker_address(data_dir: str | os.PathLike[str]) -> str | None:
    """``host:port`` of the live shared broker of ``data_dir``, or None; never starts one, takes no lock."""
    status = shared_broker_status(data_dir)
    return None if status is None else str(status["bootstrap"])


def shared_broker_status(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The live shared broker of ``data_dir``, or None when none runs (a stale discovery file is left alone).

    Keys: ``bootstrap`` (``host:port``), ``host``, ``port``, ``pid``, ``started_ms``, ``data_dir``,
    ``log_dir`` (its partitions), ``log_file`` (its stdout/stderr), ``config_file``.
    """
    path = Path(data_dir).resolve()
    info = _read_discovery(path)
    if info is None or not _alive(info, path):
        return None
    return {
        "bootstrap": _address(info),
        "host": str(info["host"]),
        "port": int(str(info["port"])),
        "pid": _discovered_pid(info),
        "started_ms": info.get("started_ms"),
        "data_dir": str(path),
        "log_dir": str(info.get("log_dir") or broker_log_dir(path)),
        "log_file": str(path / LOG_FILE),
        "config_file": str(path / CONFIG_FILE),
    }


def stop_shared_broker(data_dir: str | os.PathLike[str], timeout_s: float = 15.0) -> bool:
    """Stop the shared broker of ``data_dir``: SIGTERM (clean shutdown), SIGKILL after ``timeout_s``.

    Returns True if a running broker was stopped, False if none was running (a stale discovery file is
    removed). Only a process whose command line is this data directory's broker is signalled. Raises
    :class:`SharedBrokerError` when the process cannot be signalled or survives SIGKILL.
    """
    path = Path(data_dir).resolve()
    if not path.is_dir():
        return False
    with _locked(path):
        info = _read_discovery(path)
        pid = None if info is None else _discovered_pid(info)
        if pid is None or not _pid_alive(pid) or not _is_our_broker(pid, path):
            _remove_discovery(path)
            return False
        try:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and _pid_alive(pid):
                time.sleep(0.05)
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and _pid_alive(pid):
                    time.sleep(0.05)
        except ProcessLookupError:
            pass  # it exited between the checks
        except PermissionError as exc:
            raise SharedBrokerError(f"cannot signal the broker of {path} (pid {pid}): {exc}") from exc
        if _pid_alive(pid):
            raise SharedBrokerError(f"the broker of {path} (pid {pid}) is still running after SIGKILL")
        _remove_discovery(path)
        return True


def _remove_discovery(data_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (data_dir / DISCOVERY_FILE).unlink()
