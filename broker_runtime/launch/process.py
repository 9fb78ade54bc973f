"""A pylog broker -- or a cluster of them -- in child processes of the caller, stopped when the ``with`` ends.

Use::

    with broker_process(tmp_path) as bootstrap:           # "127.0.0.1:PORT"
        create_topic(bootstrap, "events", partitions=4)

    with cluster_process(tmp_path, nodes=3) as cluster:   # a handle: cluster.bootstrap, cluster.nodes[i].pid
        create_topic(cluster.bootstrap, "events", 4, replication_factor=3)

Files (layout in :mod:`broker_runtime.launch.layout`): a single broker keeps its partitions in
``<data_dir>/logs``, its settings in ``<data_dir>/broker.properties`` (rewritten at each start from the
overrides) and its stderr in ``<data_dir>/broker.log``. A cluster is N ``start`` processes (node.id 0..N-1)
sharing ``<data_dir>/kafka-logs`` as the cluster directory, settings in ``<data_dir>/cluster.properties``,
node ``i``'s logs in ``<data_dir>/kafka-logs/node-i`` and its stderr in ``<data_dir>/broker-i.log``. Every
broker listens on a free loopback port; the stderr files are appended to across starts.

Start: each child runs :func:`~broker_runtime.launch.command.start_command`; the bootstrap address is read from
its ``listening on HOST:PORT`` stdout line; then a thread keeps draining stdout so the child never blocks. A
child that exits before that line, or stays silent for ``startup_timeout_s``, raises
:class:`~broker_runtime.errors.BrokerStartError` whose first line states the cause. Stop: SIGCONT (a test may
have stopped a node), SIGTERM (clean shutdown), then SIGKILL if it does not exit within 30 s.

:func:`create_topic` goes through :class:`~broker_runtime.client.KafkaClient`.

Thread-safety: every call is independent; a context manager belongs to the thread that entered it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker_runtime.client import KafkaClient
from broker_runtime.errors import BrokerStartError, ConfigError, ErrorCode, KafkaError
from broker_runtime.launch.broker_log import log_size, startup_failure
from broker_runtime.launch.command import parse_listening_line, start_command
from broker_runtime.launch.layout import (
    CLUSTER_DIR,
    LOOPBACK_LISTENER,
    broker_log_dir,
    cluster_node_overrides,
)

__all__ = ["BrokerCluster", "ClusterNode", "broker_process", "cluster_process", "create_topic"]

_STOP_TIMEOUT_S = 30.0


@dataclass
class ClusterNode:
    """One broker process of a cluster."""

    node_id: int
    proc: subprocess.Popen[str]
    bootstrap: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass
class BrokerCluster:
    """The processes of a running cluster; ``bootstrap`` lists every node."""

    data_dir: Path
    nodes: list[ClusterNode] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)


@dataclass
class _Child:
    proc: subprocess.Popen[str]
    log_path: Path
    log_start: int


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")


def _spawn(config_file: Path, overrides: Mapping[str, str], log_path: Path) -> _Child:
    start = log_size(log_path)
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(
            start_command(config_file, overrides),
            stdout=subprocess.PIPE,
            stderr=log_file,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
    return _Child(proc, log_path, start)


def _wait_listening(child: _Child, timeout_s: float) -> str:
    """The child's bootstrap address from its listening line; then its stdout is drained by a thread."""
    proc = child.proc
    found: list[str] = []

    def read_stdout() -> None:
        assert proc.stdout is not None
        with contextlib.suppress(ValueError, OSError):  # closed by _stop
            for line in proc.stdout:
                if not found:
                    address = parse_listening_line(line)
                    if address is not None:
                        found.append(address)

    reader = threading.Thread(target=read_stdout, name=f"broker-{proc.pid}-stdout", daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    while not found and proc.poll() is None and time.monotonic() < deadline:
        reader.join(0.02)
    if found:
        return found[0]
    reader.join(1.0)  # an exited child's last stdout line may still be in the pipe
    if found:
        return found[0]
    code = proc.poll()
    if code is None:
        headline = f"broker (pid {proc.pid}) did not print its listening line within {timeout_s:g} s"
    else:
        headline = f"broker exited with status {code} before listening"
    raise BrokerStartError(startup_failure(headline, child.log_path, child.log_start))


def _resume(proc: subprocess.Popen[str]) -> None:
    """SIGCONT a child a test may have stopped, so that it can obey SIGTERM."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGCONT)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if proc.stdout is not None:
        with contextlib.suppress(Exception):
            proc.stdout.close()


def _stop_all(children: list[_Child]) -> None:
    for child in children:
        _resume(child.proc)
        if child.proc.poll() is None:
            child.proc.terminate()
    for child in children:
        _stop(child.proc)


@contextlib.contextmanager
def cluster_process(
    data_dir: str | os.PathLike[str],
    nodes: int = 3,
    *,
    overrides: Mapping[str, str] | None = None,
    startup_timeout_s: float = 30.0,
) -> Iterator[BrokerCluster]:
    """Run ``nodes`` broker processes forming one cluster; yields the :class:`BrokerCluster`."""
    if nodes < 1:
        raise ConfigError(f"nodes={nodes}: a cluster needs at least one node")
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    base = data / CLUSTER_DIR
    config_file = data / "cluster.properties"
    _write_properties(
        config_file, {"listeners": LOOPBACK_LISTENER, "log.dirs": str(base), **(overrides or {})}
    )
    cluster = BrokerCluster(data)
    children: list[_Child] = []
    try:
        for node_id in range(nodes):
            log_path = data / f"broker-{node_id}.log"
            children.append(_spawn(config_file, cluster_node_overrides(base, node_id), log_path))
        for node_id, child in enumerate(children):
            address = _wait_listening(child, startup_timeout_s)
            cluster.nodes.append(ClusterNode(node_id, child.proc, address, child.log_path))
        yield cluster
    finally:
        _stop_all(children)


@contextlib.contextmanager
def broker_process(
    data_dir: str | os.PathLike[str],
    overrides: Mapping[str, str] | None = None,
    nodes: int = 1,
    *,
    startup_timeout_s: float = 30.0,
) -> Iterator[str]:
    """Run a broker child process on a free loopback port; yields ``"127.0.0.1:PORT"``.

    With ``nodes`` > 1 this is :func:`cluster_process` and the bootstrap list names every node.
    """
    if nodes > 1:
        with cluster_process(data_dir, nodes, overrides=overrides, startup_timeout_s=startup_timeout_s) as c:
            yield c.bootstrap
        return
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    config_file = data / "broker.properties"
    props = {"listeners": LOOPBACK_LISTENER, "log.dirs": str(broker_log_dir(data)), **(overrides or {})}
    _write_properties(config_file, props)
    child = _spawn(config_file, {}, data / "broker.log")
    try:
        yield _wait_listening(child, startup_timeout_s)
    finally:
        _stop_all([child])


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    configs: Mapping[str, str] | None = None,
    *,
    exist_ok: bool = False,
    timeout_s: float = 30.0,
    replication_factor: int = 1,
) -> None:
    """Create a topic; raises :class:`~broker_runtime.errors.KafkaError` with the broker's code."""
    timeout_ms = int(timeout_s * 1000)
    with KafkaClient(bootstrap, client_id="pylog-launch", request_timeout_ms=timeout_ms) as client:
        codes = client.create_topics(
            {name: (partitions, replication_factor)}, configs=configs, timeout_ms=timeout_ms
        )
    code = codes.get(name, ErrorCode.UNKNOWN_SERVER_ERROR)
    if code == ErrorCode.TOPIC_ALREADY_EXISTS and exist_ok:
        return
    if code != ErrorCode.NONE:
        raise KafkaError(code, f"creating topic {name!r}")
