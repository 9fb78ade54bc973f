"""The embedded broker of a data directory: ONE detached broker, found or started, that outlives its starter.

Use::

    bootstrap = ensure_embedded_broker(data_dir)          # found, or started detached
    embedded_broker_address(data_dir)                     # "host:port" or None; never starts one
    embedded_broker_status(data_dir)                      # {"bootstrap", "pid", "log_dir", ...} or None
    stop_embedded_broker(data_dir)                        # also ``pylog-broker stop --data-dir DIR``

It is the Spark connector's zero-configuration default, shared by every process on the machine. Its files, all
in the data directory::

    embedded-broker.json   discovery file: {"host", "port", "pid", "started_ms", "data_dir", "log_dir"},
                           replaced atomically (broker_runtime.fsutil.write_atomically) once the broker listens
    embedded-broker.lock   fcntl lock file: held exclusively while a process checks / starts / stops the
                           broker, so concurrent processes start at most one broker
    embedded-broker.log    the broker's stderr: its log and its error lines (appended)
    embedded-broker.out    the broker's stdout: its ``listening on HOST:PORT`` line (appended)
    broker.properties      its settings, written with defaults on first start (editable; read at each start)
    logs/                  its log.dirs (Kafka's on-disk layout)

Start: the broker runs :func:`~broker_runtime.launch.command.start_command` with ``listeners`` on a free
loopback port and ``log.dirs=<data_dir>/logs`` (these two cannot be overridden), through a short-lived
launcher process in its own session, so it is re-parented to init and never left a zombie in the starting
process (which may be a long-lived Spark worker). Its address is read from ``embedded-broker.out`` with
:func:`~broker_runtime.launch.command.parse_listening_line` only, so no log line at any log level is mistaken
for it. A broker that exits before listening, or stays silent for the timeout, raises
:class:`~broker_runtime.errors.EmbeddedBrokerError` whose first line states the cause, followed by the tail of
its log.

Discovery rule: the discovery file names a live broker when its pid is running (not a zombie), that process's
command line is the broker of THIS data directory (``broker_runtime start --config <data_dir>/broker.properties``;
so a reused pid is never trusted, nor signalled), AND its port accepts a TCP connection; otherwise the file is
stale and :func:`ensure_embedded_broker` replaces it with a freshly started broker -- except after a halt on a
failed write (a full disk): while ``logs/log-dir-failure`` (:data:`~broker_runtime.fsutil.LOG_DIR_FAILURE_FILE`)
is there, it raises :class:`~broker_runtime.errors.EmbeddedBrokerError` naming the log directory, the failure and
its errno, and how to recover (free space, then remove that file), instead of starting a broker that recovers
and halts again at each Spark job. :func:`stop_embedded_broker`
sends SIGTERM (clean shutdown), then SIGKILL after its timeout.

Thread-safety: every call is independent; start and stop are serialized across processes by the lock file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from broker_runtime.errors import ConfigError, EmbeddedBrokerError
from broker_runtime.fsutil import LOG_DIR_FAILURE_FILE, FileLock, read_log_dir_failure, write_atomically
from broker_runtime.launch.broker_log import log_size, read_since, startup_failure
from broker_runtime.launch.command import parse_listening_line, start_command
from broker_runtime.launch.layout import LOOPBACK_LISTENER, broker_log_dir

__all__ = [
    "CONFIG_FILE",
    "DISCOVERY_FILE",
    "LOCK_FILE",
    "LOG_FILE",
    "OUT_FILE",
    "embedded_broker_address",
    "embedded_broker_status",
    "ensure_embedded_broker",
    "stop_embedded_broker",
]

DISCOVERY_FILE = "embedded-broker.json"
LOCK_FILE = "embedded-broker.lock"
LOG_FILE = "embedded-broker.log"
OUT_FILE = "embedded-broker.out"
CONFIG_FILE = "broker.properties"

#: Starts the broker detached (stdout, stderr appended to two files) and prints its pid; runs as a separate
#: short-lived process so the broker is re-parented to init.
_LAUNCHER = """
import subprocess, sys
out = open(sys.argv[1], "ab", buffering=0)
log = open(sys.argv[2], "ab", buffering=0)
p = subprocess.Popen(sys.argv[3:], stdin=subprocess.DEVNULL, stdout=out, stderr=log,
                     start_new_session=True, close_fds=True)
print(p.pid, flush=True)
"""

#: Written to ``broker.properties`` in the data directory the first time; edit that file to change the embedded
#: broker's settings (``num.partitions`` of auto-created topics, retention, ...) for later starts.
_DEFAULT_PROPERTIES = """# The embedded pylog broker of this data directory (Kafka property names).
# Edits take effect the next time the broker starts (stop it with: pylog-broker stop --data-dir DIR).
node.id=0
num.partitions=1
auto.create.topics.enable=true
"""

#: Decided by the data directory, whatever ``broker.properties`` or the overrides say.
_FIXED_KEYS = frozenset({"listeners", "log.dirs", "log.dir"})


@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    with FileLock(data_dir / LOCK_FILE):
        yield


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
    fixed = {"listeners": LOOPBACK_LISTENER, "log.dirs": str(broker_log_dir(data_dir))}
    return start_command(config, [*overrides.items(), *fixed.items()])  # the fixed keys last: they win


def _listening_address(out_path: Path, start: int) -> str | None:
    for line in read_since(out_path, start).splitlines():
        address = parse_listening_line(line)
        if address is not None:
            return address
    return None


def _start(data_dir: Path, overrides: Mapping[str, str], timeout_s: float) -> dict[str, Any]:
    log_path, out_path = data_dir / LOG_FILE, data_dir / OUT_FILE
    log_start, out_start = log_size(log_path), log_size(out_path)
    env = dict(os.environ)
    # The broker must import the same project as this process, wherever it was started from.
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
    launcher = subprocess.run(
        [
            sys.executable,
            "-c",
            _LAUNCHER,
            str(out_path),
            str(log_path),
            *_broker_command(data_dir, overrides),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(data_dir),
        timeout=timeout_s,
        check=False,
    )
    if launcher.returncode != 0:
        cause = " ".join(launcher.stderr.strip().splitlines()[-1:]) or f"status {launcher.returncode}"
        raise EmbeddedBrokerError(f"could not launch the embedded broker of {data_dir}: {cause}")
    pid = int(launcher.stdout.strip())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        address = _listening_address(out_path, out_start)
        if address is not None:
            host, _, port = address.rpartition(":")
            return {
                "host": host,
                "port": int(port),
                "pid": pid,
                "started_ms": int(time.time() * 1000),
                "data_dir": str(data_dir),
                "log_dir": str(broker_log_dir(data_dir)),
            }
        if not _pid_alive(pid):
            headline = f"the embedded broker of {data_dir} could not start"
            raise EmbeddedBrokerError(startup_failure(headline, log_path, log_start))
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    headline = f"the embedded broker of {data_dir} did not report 'listening on' within {timeout_s:g} s"
    raise EmbeddedBrokerError(startup_failure(headline, log_path, log_start))


def _refuse_after_log_dir_failure(data_dir: Path) -> None:
    """Raise EmbeddedBrokerError when the last broker of ``data_dir`` halted on a failed write (see the module
    docstring)."""
    log_dir = broker_log_dir(data_dir)
    recorded = read_log_dir_failure(log_dir)
    if recorded is None:
        return
    lines = recorded.splitlines()
    why = lines[0] if lines else "(no details recorded: see the broker's log)"
    cause = ""
    if len(lines) > 1 and lines[1].startswith("errno="):
        number = lines[1].split()[0].removeprefix("errno=")
        if number.isdigit():
            cause = f" [{lines[1]}: {os.strerror(int(number))}]"
    raise EmbeddedBrokerError(
        f"the embedded broker of {data_dir} halted because a write to its log directory {log_dir} failed, and is "
        f"not started again (it would halt again): {why}{cause}. To recover: free space on that file system "
        f"(or fix the disk), then remove {log_dir / LOG_DIR_FAILURE_FILE}; the next start recovers the logs "
        f"from their files. Its log: {data_dir / LOG_FILE}"
    )


def _address(info: Mapping[str, Any]) -> str:
    return f"{info['host']}:{info['port']}"


def ensure_embedded_broker(
    data_dir: str | os.PathLike[str],
    *,
    overrides: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
) -> str:
    """``host:port`` of the embedded broker of ``data_dir``, started (detached) if none is alive.

    ``overrides`` (Kafka property names) apply only when this call starts the broker; ``listeners`` and
    ``log.dirs`` are decided by the data directory and may not be overridden
    (:class:`~broker_runtime.errors.ConfigError`, a ValueError). Raises
    :class:`~broker_runtime.errors.EmbeddedBrokerError` (cause first, then its log's tail) when the broker
    cannot start, and when its last run halted on a failed write (see the module docstring).
    """
    fixed = sorted(_FIXED_KEYS.intersection(overrides or {}))
    if fixed:
        raise ConfigError(f"{', '.join(fixed)}: decided by the data directory, cannot be overridden")
    path = Path(data_dir).resolve()
    path.mkdir(parents=True, exist_ok=True)
    info = _read_discovery(path)
    if info is not None and _alive(info, path):  # fast path without the lock
        return _address(info)
    with _locked(path):
        info = _read_discovery(path)
        if info is not None and _alive(info, path):
            return _address(info)
        _refuse_after_log_dir_failure(path)
        info = _start(path, overrides or {}, timeout_s)
        write_atomically(path / DISCOVERY_FILE, json.dumps(info).encode("utf-8"))
        return _address(info)


def embedded_broker_address(data_dir: str | os.PathLike[str]) -> str | None:
    """``host:port`` of the live embedded broker of ``data_dir``, or None; never starts one, takes no lock."""
    status = embedded_broker_status(data_dir)
    return None if status is None else str(status["bootstrap"])


def embedded_broker_status(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The live embedded broker of ``data_dir``, or None when none runs (a stale discovery file is left alone).

    Keys: ``bootstrap`` (``host:port``), ``host``, ``port``, ``pid``, ``started_ms``, ``data_dir``,
    ``log_dir`` (its partitions), ``log_file`` (its stderr), ``config_file``.
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


def stop_embedded_broker(data_dir: str | os.PathLike[str], timeout_s: float = 15.0) -> bool:
    """Stop the embedded broker of ``data_dir``: SIGTERM (clean shutdown), SIGKILL after ``timeout_s``.

    Returns True if a running broker was stopped, False if none was running (a stale discovery file is
    removed). Only a process whose command line is this data directory's broker is signalled. Raises
    :class:`~broker_runtime.errors.EmbeddedBrokerError` when the process cannot be signalled or survives SIGKILL.
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
            if not _wait_exit(pid, timeout_s):
                os.kill(pid, signal.SIGKILL)
                _wait_exit(pid, 10.0)
        except ProcessLookupError:
            pass  # it exited between the checks
        except PermissionError as exc:
            raise EmbeddedBrokerError(
                f"cannot signal the embedded broker of {path} (pid {pid}): {exc}"
            ) from exc
        if _pid_alive(pid):
            raise EmbeddedBrokerError(
                f"the embedded broker of {path} (pid {pid}) is still running after SIGKILL"
            )
        _remove_discovery(path)
        return True


def _wait_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.05)
    return not _pid_alive(pid)


def _remove_discovery(data_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (data_dir / DISCOVERY_FILE).unlink()
