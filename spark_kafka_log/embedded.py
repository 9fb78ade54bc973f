"""Find or start the ONE embedded broker of a data directory, shared by every process on the machine.

Where this runs: :func:`ensure_embedded_broker` runs on the **driver** in ``DataSource.writer()`` (so the
broker is up before any task starts); **executors** only look it up with :func:`embedded_broker_address`
at the start of each write task (read one small file, open one socket) and fall back to the address the
driver resolved -- they never start a broker. :func:`stop_embedded_broker` is for users and tools (the
``pylog-broker stop --data-dir DIR`` command).

Files in the data directory (resolved to an absolute path on the driver and passed to executors)::

    embedded-broker.json   discovery file: {"host", "port", "pid", "started_ms", "data_dir"}, written
                           atomically (temp file + rename) once the broker listens
    embedded-broker.lock   fcntl lock file: held exclusively while a process checks / starts the broker,
                           so concurrent tasks and jobs start at most one broker
    embedded-broker.log    the broker's stdout/stderr (appended)
    broker.properties      the broker's settings, written with defaults on first start (editable)
    kafka-logs/            the broker's log.dirs (Kafka's on-disk layout)

Discovery rule: the discovery file names a live broker when its pid is running (not a zombie) AND its
port accepts a TCP connection; otherwise it is stale and is replaced by a freshly started broker.

The broker is a detached process (its own session, started through a short-lived launcher process so it
is re-parented and never left a zombie) that OUTLIVES the Spark job: several jobs share it, and its topics
are auto-created with the broker's ``num.partitions``. Stop it with :func:`stop_embedded_broker`.
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
import time
from collections.abc import Iterator
from pathlib import Path

from broker_runtime.errors import PylogError

__all__ = [
    "DISCOVERY_FILE",
    "LOCK_FILE",
    "LOG_FILE",
    "EmbeddedBrokerError",
    "embedded_broker_address",
    "ensure_embedded_broker",
    "stop_embedded_broker",
]

DISCOVERY_FILE = "embedded-broker.json"
LOCK_FILE = "embedded-broker.lock"
LOG_FILE = "embedded-broker.log"
_LISTENING = "listening on "

#: Starts the broker detached and prints its pid; runs as a separate short-lived process so the broker is
#: re-parented to init (no zombie in the starting process, which may be a long-lived Spark worker).
_LAUNCHER = """
import subprocess, sys
log = open(sys.argv[1], "ab", buffering=0)
p = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                     start_new_session=True, close_fds=True)
print(p.pid, flush=True)
"""


class EmbeddedBrokerError(PylogError):
    """The embedded broker could not be started or reached; the message quotes its log."""


@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    with open(data_dir / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
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
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def _is_broker(pid: int) -> bool:
    """False when ``pid`` is a live process that is not a pylog broker (its pid was reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no procfs (or gone): the port check decides
    return b"broker_runtime" in cmdline


def _port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _read_discovery(data_dir: Path) -> dict[str, object] | None:
    try:
        info = json.loads((data_dir / DISCOVERY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _alive(info: dict[str, object]) -> bool:
    try:
        pid, host, port = int(str(info["pid"])), str(info["host"]), int(str(info["port"]))
    except (KeyError, ValueError):
        return False
    return _pid_alive(pid) and _is_broker(pid) and _port_open(host, port)


def embedded_broker_address(data_dir: str | os.PathLike[str]) -> str | None:
    """``host:port`` of the live embedded broker of ``data_dir``, or None (never starts one)."""
    info = _read_discovery(Path(data_dir))
    if info is None or not _alive(info):
        return None
    return f"{info['host']}:{info['port']}"


#: Written to ``broker.properties`` in the data directory the first time; edit that file to change the
#: embedded broker's settings (``num.partitions`` of auto-created topics, retention, ...) for later starts.
_DEFAULT_PROPERTIES = """# The embedded pylog broker of this data directory (Kafka property names).
# Edits take effect the next time the broker starts (stop it with stop_embedded_broker / pylog-broker stop).
node.id=0
num.partitions=1
auto.create.topics.enable=true
"""


def _broker_command(data_dir: Path) -> list[str]:
    config = data_dir / "broker.properties"
    if not config.exists():
        config.write_text(_DEFAULT_PROPERTIES)
    return [
        sys.executable,
        "-m",
        "broker_runtime",
        "start",
        "--config",
        str(config),
        # Always loopback on a free port, logs inside the data directory, whatever the file says.
        "--override",
        "listeners=PLAINTEXT://127.0.0.1:0",
        "--override",
        f"log.dirs={data_dir / 'kafka-logs'}",
    ]


def _log_tail(path: Path, start: int, limit: int = 2000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return text[-limit:]


def _start(data_dir: Path, timeout_s: float) -> dict[str, object]:
    log_path = data_dir / LOG_FILE
    start_pos = log_path.stat().st_size if log_path.exists() else 0
    env = dict(os.environ)
    # The broker must import the same project as this process, wherever it was started from.
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
    launcher = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, str(log_path), *_broker_command(data_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(data_dir),
        timeout=timeout_s,
        check=False,
    )
    if launcher.returncode != 0:
        raise EmbeddedBrokerError(f"could not launch the embedded broker: {launcher.stderr.strip()}")
    pid = int(launcher.stdout.strip())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tail = _log_tail(log_path, start_pos, limit=1 << 20)
        for line in tail.splitlines():
            if _LISTENING in line:
                address = line.split(_LISTENING, 1)[1].strip().split()[0]
                host, _, port = address.rpartition(":")
                return {
                    "host": host or "127.0.0.1",
                    "port": int(port),
                    "pid": pid,
                    "started_ms": int(time.time() * 1000),
                    "data_dir": str(data_dir),
                }
        if not _pid_alive(pid):
            raise EmbeddedBrokerError(
                f"the embedded broker for {data_dir} exited during start; its log ({log_path}) says:\n"
                + _log_tail(log_path, start_pos)
            )
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    raise EmbeddedBrokerError(
        f"the embedded broker for {data_dir} did not report 'listening on' within {timeout_s:.0f} s; "
        f"its log ({log_path}) says:\n" + _log_tail(log_path, start_pos)
    )


def ensure_embedded_broker(data_dir: str | os.PathLike[str], timeout_s: float = 60.0) -> str:
    """``host:port`` of the embedded broker of ``data_dir``, started (detached) if none is alive."""
    path = Path(data_dir).resolve()
    path.mkdir(parents=True, exist_ok=True)
    info = _read_discovery(path)
    if info is not None and _alive(info):  # fast path without the lock
        return f"{info['host']}:{info['port']}"
    with _locked(path):
        info = _read_discovery(path)
        if info is not None and _alive(info):
            return f"{info['host']}:{info['port']}"
        info = _start(path, timeout_s)
        tmp = path / (DISCOVERY_FILE + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(info))
        os.replace(tmp, path / DISCOVERY_FILE)
        return f"{info['host']}:{info['port']}"


def stop_embedded_broker(data_dir: str | os.PathLike[str], timeout_s: float = 15.0) -> bool:
    """Stop the embedded broker of ``data_dir`` (SIGTERM, then SIGKILL after ``timeout_s``).

    Returns True if a running broker was stopped, False if none was running. Removes the discovery file.
    """
    path = Path(data_dir).resolve()
    if not path.is_dir():
        return False
    with _locked(path):
        info = _read_discovery(path)
        with contextlib.suppress(FileNotFoundError):
            (path / DISCOVERY_FILE).unlink()
        if info is None:
            return False
        try:
            pid = int(str(info["pid"]))
        except (KeyError, ValueError):
            return False
        if not _pid_alive(pid) or not _is_broker(pid):
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _pid_alive(pid):
            time.sleep(0.05)
        if _pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return True
