"""A pylog broker -- or a cluster of them -- in child processes of the caller, stopped when the ``with`` ends.

Use::

    with broker_process(tmp_path) as bootstrap:           # "127.0.0.1:PORT"
        create_topic(bootstrap, "events", partitions=4)

    with cluster_process(tmp_path, nodes=3) as cluster:   # a handle: cluster.bootstrap, cluster.nodes[i].pid
        create_topic(cluster.bootstrap, "events", 4, replication_factor=3)
        cluster.kill(1)                                   # SIGKILL node 1 and wait for its exit
        cluster.start(1)                                  # node 1 again: same settings and log dir, new port
        cluster.restart(2)                                # clean stop (SIGTERM) of node 2, then start

Files (layout in :mod:`broker_runtime.launch.layout`): a single broker keeps its partitions in
``<data_dir>/logs``, its settings in ``<data_dir>/broker.properties`` (rewritten at each start from the
overrides) and its stderr in ``<data_dir>/broker.log``. A cluster is N ``start`` processes (node.id 0..N-1)
sharing ``<data_dir>/kafka-logs`` as the cluster directory, settings in ``<data_dir>/cluster.properties``,
node ``i``'s logs in ``<data_dir>/kafka-logs/node-i`` and its stderr in ``<data_dir>/broker-i.log``. Every
broker listens on a free loopback port; the stderr files are appended to across starts.

One node of a cluster (tests of failures): :meth:`BrokerCluster.kill` sends a signal (waiting for the exit after
SIGKILL or SIGTERM), :meth:`BrokerCluster.stop` stops it cleanly, :meth:`BrokerCluster.start` spawns it again
with the same overrides and log dir, waits for its listening line and updates ``cluster.nodes[i]`` in place
(``proc``, ``bootstrap``: a new port), :meth:`BrokerCluster.restart` is stop + start. ``cluster.bootstrap``
lists only the nodes whose process runs. When the ``with`` ends every process the cluster ever started that still
runs is stopped.

Placement (tests of network partitions): ``cluster_process(..., placement=f)`` runs node ``i`` as
``f(i) = (prefix, host, port)`` says: its command after ``prefix`` (e.g. ``["ip", "netns", "exec", "ns-i"]``,
which execs, so the node's pid stays the broker's), its listeners bound on ``host`` instead of loopback, the first
on ``port`` unless 0 (a node with an address of its own can keep its port across restarts, as a Kafka broker
does, so clients that knew it still find it).

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
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from broker_runtime.client import KafkaClient
from broker_runtime.errors import (
    BrokerStartError,
    ConfigError,
    ErrorCode,
    IllegalStateError,
    KafkaError,
    WaitTimeoutError,
)
from broker_runtime.launch.broker_log import log_size, startup_failure
from broker_runtime.launch.command import parse_listening_line, start_command
from broker_runtime.launch.layout import (
    CLUSTER_DIR,
    LOOPBACK_LISTENER,
    broker_log_dir,
    cluster_node_overrides,
    listener_names,
)

__all__ = ["BrokerCluster", "ClusterNode", "broker_process", "cluster_process", "create_topic"]

_log = logging.getLogger(__name__)

_STOP_TIMEOUT_S = 30.0

#: Where node ``i`` of a cluster runs: a command prefix, the host its listeners bind and the first one's port
#: (0: a free one); see the module docstring.
Placement = Callable[[int], tuple[Sequence[str], str, int]]


def _loopback(_node_id: int) -> tuple[Sequence[str], str, int]:
    return (), "127.0.0.1", 0


@dataclass
class ClusterNode:
    """One broker node of a cluster: its current process (replaced by :meth:`BrokerCluster.start`)."""

    node_id: int
    proc: subprocess.Popen[str]
    bootstrap: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        """True until its process has exited (a SIGSTOPped node still runs)."""
        return self.proc.poll() is None


@dataclass
class BrokerCluster:
    """The nodes of a running cluster; ``bootstrap`` lists the nodes whose process runs.

    ``kill``, ``stop``, ``start`` and ``restart`` act on one node, from the thread that entered
    :func:`cluster_process`; every process any of them started is stopped when the ``with`` ends.
    """

    data_dir: Path
    nodes: list[ClusterNode] = field(default_factory=list)
    startup_timeout_s: float = 30.0
    #: The listener names every node binds (the configuration's ``listeners``), each on a free loopback port.
    listeners: tuple[str, ...] = ("PLAINTEXT",)
    #: Where each node runs (see the module docstring); loopback in this process's network by default.
    placement: Placement = _loopback
    _procs: list[subprocess.Popen[str]] = field(default_factory=list, repr=False)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes if n.running)

    def kill(self, node_id: int, sig: int = signal.SIGKILL, *, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """Send ``sig`` to node ``node_id``; for SIGKILL and SIGTERM, wait until it has exited.

        SIGTERM is preceded by SIGCONT (a stopped node could not obey it). Raises
        :class:`~broker_runtime.errors.WaitTimeoutError` when it is still running after ``timeout_s``.
        """
        node = self.nodes[node_id]
        if not node.running:
            return
        if sig == signal.SIGTERM:
            _resume(node.proc)
        with contextlib.suppress(ProcessLookupError):
            node.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            try:
                node.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                raise WaitTimeoutError(
                    f"node {node_id} (pid {node.pid}) still runs {timeout_s:g} s after {signal.Signals(sig).name}"
                ) from None

    def stop(self, node_id: int) -> None:
        """Stop node ``node_id`` cleanly (SIGCONT, SIGTERM: clean shutdown), SIGKILL after 30 s."""
        node = self.nodes[node_id]
        _resume(node.proc)
        _stop(node.proc)

    def start(self, node_id: int) -> str:
        """Start node ``node_id`` again (it must have exited): same settings and log dir, a new free port.

        Waits for its listening line, updates ``nodes[node_id]`` (``proc``, ``bootstrap``) in place and returns
        the new address; raises :class:`~broker_runtime.errors.BrokerStartError` when it does not start.
        """
        node = self.nodes[node_id]
        if node.running:
            raise IllegalStateError(f"node {node_id} (pid {node.pid}) is running; stop or kill it first")
        prefix, host, port = self.placement(node_id)
        overrides = cluster_node_overrides(self._base_dir, node_id, self.listeners, host, port)
        child = _spawn(self._config_file, overrides, node.log_path, prefix)
        self._procs.append(child.proc)
        node.proc = child.proc
        node.bootstrap = _wait_listening(child, self.startup_timeout_s)
        return node.bootstrap

    def restart(self, node_id: int) -> str:
        """:meth:`stop` (clean) node ``node_id`` if it runs, then :meth:`start` it; returns its new address."""
        if self.nodes[node_id].running:
            self.stop(node_id)
        return self.start(node_id)

    @property
    def _config_file(self) -> Path:
        return Path(self.data_dir) / "cluster.properties"

    @property
    def _base_dir(self) -> Path:
        return Path(self.data_dir) / CLUSTER_DIR


@dataclass
class _Child:
    proc: subprocess.Popen[str]
    log_path: Path
    log_start: int


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")


def _spawn(
    config_file: Path, overrides: Mapping[str, str], log_path: Path, prefix: Sequence[str] = ()
) -> _Child:
    start = log_size(log_path)
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(
            [*prefix, *start_command(config_file, overrides)],
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
    # Set by the reader at the listening line or at the end of stdout (the child exited): no polling delay.
    settled = threading.Event()

    def read_stdout() -> None:
        assert proc.stdout is not None
        with contextlib.suppress(ValueError, OSError):  # closed by _stop
            for line in proc.stdout:
                if not found:
                    address = parse_listening_line(line)
                    if address is not None:
                        found.append(address)
                        settled.set()
        settled.set()

    reader = threading.Thread(target=read_stdout, name=f"broker-{proc.pid}-stdout", daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    while not settled.is_set() and proc.poll() is None and time.monotonic() < deadline:
        settled.wait(min(0.5, max(0.0, deadline - time.monotonic())))
    if found:
        return found[0]
    reader.join(1.0)  # an exited child's last stdout line may still be in the pipe
    if found:
        return found[0]
    closed = not reader.is_alive()  # stdout ended: the child is exiting, though it may not be reaped yet
    if closed:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(_STOP_TIMEOUT_S)
    code = proc.poll()
    if code is None and closed:
        headline = f"broker (pid {proc.pid}) closed its output before listening"
    elif code is None:
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
            # A broker that ignores SIGTERM this long did not stop cleanly: say so, its next start recovers.
            _log.warning(
                "broker process %d did not stop within %.0f s of SIGTERM: killed (an unclean stop)",
                proc.pid,
                _STOP_TIMEOUT_S,
            )
            proc.kill()
            proc.wait(10)
    if proc.stdout is not None:
        with contextlib.suppress(Exception):
            proc.stdout.close()


def _stop_all(procs: list[subprocess.Popen[str]]) -> None:
    """Stop every process that still runs: SIGCONT and SIGTERM to all first, then wait (SIGKILL after 30 s)."""
    for proc in procs:
        _resume(proc)
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        _stop(proc)


@contextlib.contextmanager
def cluster_process(
    data_dir: str | os.PathLike[str],
    nodes: int = 3,
    *,
    overrides: Mapping[str, str] | None = None,
    startup_timeout_s: float = 30.0,
    placement: Placement = _loopback,
) -> Iterator[BrokerCluster]:
    """Run ``nodes`` broker processes forming one cluster; yields the :class:`BrokerCluster`."""
    if nodes < 1:
        raise ConfigError(f"nodes={nodes}: a cluster needs at least one node")
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    base = data / CLUSTER_DIR
    config_file = data / "cluster.properties"
    props = {"listeners": LOOPBACK_LISTENER, "log.dirs": str(base), **(overrides or {})}
    _write_properties(config_file, props)
    names = listener_names(props["listeners"])
    cluster = BrokerCluster(data, startup_timeout_s=startup_timeout_s, listeners=names, placement=placement)
    try:
        children = []
        for node_id in range(nodes):
            log_path = data / f"broker-{node_id}.log"
            prefix, host, port = placement(node_id)
            overrides = cluster_node_overrides(base, node_id, names, host, port)
            children.append(_spawn(config_file, overrides, log_path, prefix))
            cluster._procs.append(children[-1].proc)
        for node_id, child in enumerate(children):
            address = _wait_listening(child, startup_timeout_s)
            cluster.nodes.append(ClusterNode(node_id, child.proc, address, child.log_path))
        yield cluster
    finally:
        _stop_all(cluster._procs)


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
        _stop_all([child.proc])


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
        codes = client.admin.create_topics(
            {name: (partitions, replication_factor)}, configs=configs, timeout_ms=timeout_ms
        )
    code = codes.get(name, ErrorCode.UNKNOWN_SERVER_ERROR)
    if code == ErrorCode.TOPIC_ALREADY_EXISTS and exist_ok:
        return
    if code != ErrorCode.NONE:
        raise KafkaError(code, f"creating topic {name!r}")
