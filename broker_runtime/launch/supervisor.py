"""The supervisor behind ``pylog-broker cluster``: N broker child processes kept running, and the control channel
that ``pylog-broker node stop|start|status`` uses to stop, start and inspect one node of a running cluster.

Use::

    supervisor = ClusterSupervisor(config_file, cluster_dir, nodes=3, overrides=[...], policy=RestartPolicy())
    status = supervisor.run()        # blocks; returns the exit status (call request_stop() from a signal handler)

    read_supervisor_state(cluster_dir)                 # the supervisor.json object, or None when none runs
    request_node_action(cluster_dir, "stop", node_id)  # the supervisor's answer {"ok", "message", "node"}

Nodes: node ``i`` runs :func:`~broker_runtime.launch.command.start_command` with the shared config file, the
common overrides, then :func:`~broker_runtime.launch.layout.cluster_node_overrides` (node.id ``i``, log dir
``<cluster dir>/node-i``, each listener of the configuration by its name on a free loopback port, so secured
client and inter-broker listeners stay secured). A restarted node (after a death, or ``node start``) is the same
command: same node id, config and log dir, and the same port for every listener, as a Kafka broker keeps its
configured ports, so a client that knows only the old addresses (its bootstrap list, metadata it has not
refreshed) finds the node again even when every node has restarted. The ports are the ones the node registered
in ``cluster.json`` (its endpoints, read once it listens; the listening line's for the first listener when the
file cannot be read). Before a restart the supervisor tries to bind each old port itself (with SO_REUSEADDR, as
the broker binds); a port another process holds is not retried: that listener binds a free port and, once the
node listens, one warning line names the old and the new address::

    pylog-broker: warning: node N could not bind its PLAINTEXT port again: 127.0.0.1:OLD is taken (CAUSE); it listens on 127.0.0.1:NEW instead: give clients that name 127.0.0.1:OLD in bootstrap.servers the new address

States of a node (``state`` in supervisor.json)::

    starting    spawned, its ``listening on`` line not seen yet (killed after ``startup_timeout_s``)
    running     listening
    restarting  died on its own; started again at ``restart_at_ms`` (exponential back-off)
    stopping    SIGTERM sent on an operator's request (SIGKILL after ``stop_timeout_s``, with a warning line)
    stopped     stopped by an operator (``node stop``); never restarted until ``node start``
    failed      died more often than the restart policy allows; never restarted until ``node start``

Restart policy (:class:`RestartPolicy`): a node that dies on its own (any exit the supervisor did not ask for,
including exit status 0 and a start that fails or never prints its listening line) is started again after
``backoff_s``, doubled for every further death in a row up to ``backoff_max_s``; a node that had stayed up for
``reset_s`` starts over at ``backoff_s``. When a death is the ``limit + 1``-th of that node within the last
``window_s`` seconds the supervisor gives up on the node (state ``failed``); the other nodes keep running.
When every node has failed there is nothing left to serve: the supervisor exits 1. ``node start`` of a failed or
stopped node clears its history.

What the supervisor prints. stdout, only while the cluster starts: one ``listening on HOST:PORT`` line per node,
in node order, then ``bootstrap servers: h:p,...``; nothing more later, so a parent can read exactly N + 1
lines. stderr: the nodes' own log lines (forwarded as they come; a node's ``pylog-broker: CAUSE`` line is held
back and folded into the supervisor's line about that node) and one line per event::

    pylog-broker: warning: node N (pid P) was killed by SIGKILL; restarting it in 1 s (restart 1 of at most 5 within 300 s)
    pylog-broker: warning: node N (pid P) exited with status 1 before listening: CAUSE; giving up on it: ...
    pylog-broker: node N restarted (pid P), listening on HOST:PORT
    pylog-broker: node N stopped on request (pid P exited with status 0); it stays stopped until `node start`
    pylog-broker: node N started on request (pid P), listening on HOST:PORT

A node that cannot start while the cluster starts ends the command: ``pylog-broker: node N did not start: CAUSE``
(exit 1). SIGINT/SIGTERM (:meth:`ClusterSupervisor.request_stop`) stop every node (SIGCONT, then SIGTERM: clean
shutdown; SIGKILL after ``stop_timeout_s``) and ``run`` returns 0.

Files, all in the cluster directory (``<log.dirs>`` of the cluster, beside ``cluster.json``)::

    supervisor.lock       fcntl lock held exclusively by the running supervisor for its whole life: a second
                          supervisor of the same directory refuses to start, and a ``node`` command that can take
                          the lock (shared, released at once) knows no supervisor runs (the kernel drops the lock
                          the moment the supervisor dies, so a stale file never counts)
    supervisor.json       {"pid", "started_ms", "updated_ms", "cluster_dir", "config_file", "policy": {...},
                          "nodes": [{"node_id", "state", "pid", "address", "log_dir", "restarts", "last_exit",
                          "restart_at_ms"}]}; rewritten atomically (broker_runtime.fsutil.write_atomically) on
                          every change of a node, removed when the supervisor ends
    supervisor-requests/  the control channel: a ``node`` command writes ``<id>.request.json``
                          ({"action": "stop"|"start", "node_id"}) atomically; the supervisor reads and removes it
                          within ``poll_s`` and, once the action is done (node stopped / listening, or failed),
                          writes ``<id>.result.json`` ({"ok", "message", "node"}) atomically, which the command
                          reads and removes. A request is a file until the supervisor takes it, so none is lost
                          while the supervisor runs; files left from an earlier supervisor are removed at start.

Threading: :meth:`ClusterSupervisor.run` owns every node and all state, in the calling thread (it polls every
``poll_s``). Two daemon threads per node process read its stdout (the listening line; then drained) and stderr
(forwarded under one lock, so lines never interleave mid-line). :meth:`~ClusterSupervisor.request_stop` only sets
a flag, so it is safe from a signal handler. The module's functions for ``node`` commands are independent calls.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from broker_runtime.controller.store import SingleHostMetadataStore
from broker_runtime.errors import ClusterSupervisorError, ConfigError, InvalidArgumentError
from broker_runtime.fsutil import FileLock, write_atomically
from broker_runtime.launch.command import (
    WARNING_PREFIX,
    error_line,
    is_error_line,
    listening_line,
    parse_listening_line,
    start_command,
    startup_failure_cause,
)
from broker_runtime.launch.layout import cluster_node_overrides

__all__ = [
    "FAILED",
    "LOCK_FILE",
    "REQUEST_DIR",
    "RESTARTING",
    "RUNNING",
    "STARTING",
    "STATE_FILE",
    "STOPPED",
    "STOPPING",
    "ClusterSupervisor",
    "RestartHistory",
    "RestartPolicy",
    "describe_exit",
    "read_supervisor_state",
    "request_node_action",
    "supervisor_running",
]

STATE_FILE = "supervisor.json"
LOCK_FILE = "supervisor.lock"
REQUEST_DIR = "supervisor-requests"
_REQUEST_SUFFIX = ".request.json"
_RESULT_SUFFIX = ".result.json"

STARTING = "starting"
RUNNING = "running"
RESTARTING = "restarting"
STOPPING = "stopping"
STOPPED = "stopped"
FAILED = "failed"

#: Where every node of the cluster listens (:func:`~broker_runtime.launch.layout.cluster_node_overrides`).
_LOOPBACK = "127.0.0.1"

#: How long a starting supervisor retries its lock (a ``node`` command's probe holds it for an instant).
_LOCK_RETRY_S = 2.0


@dataclass(frozen=True)
class RestartPolicy:
    """When a node that died on its own is started again (see the module docstring)."""

    limit: int = 5
    window_s: float = 300.0
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    reset_s: float = 60.0

    def __post_init__(self) -> None:
        if self.limit < 0:
            raise InvalidArgumentError(f"restart limit {self.limit}: must be 0 or more")
        if self.window_s <= 0:
            raise InvalidArgumentError(f"restart window {self.window_s:g} s: must be positive")
        if self.backoff_s <= 0 or self.backoff_max_s < self.backoff_s:
            raise InvalidArgumentError(
                f"restart back-off {self.backoff_s:g} s .. {self.backoff_max_s:g} s: "
                "the first must be positive and the maximum at least the first"
            )
        if self.reset_s < 0:
            raise InvalidArgumentError(f"restart reset {self.reset_s:g} s: must be 0 or more")

    def delay_s(self, deaths_in_a_row: int) -> float:
        """The back-off before the restart after the ``deaths_in_a_row``-th death in a row (1-based)."""
        return float(min(self.backoff_max_s, self.backoff_s * 2.0 ** min(max(deaths_in_a_row - 1, 0), 60)))


@dataclass
class RestartHistory:
    """One node's deaths, as the restart policy counts them. Pure bookkeeping; times are monotonic seconds."""

    policy: RestartPolicy
    deaths: deque[float] = field(default_factory=deque)
    in_a_row: int = 0

    def on_death(self, now: float, ran_s: float | None) -> float | None:
        """Record a death at ``now`` of a node that had run ``ran_s`` seconds (None: it never listened).

        Returns the delay before its restart, or None when this death exceeds the limit (give up).
        """
        if ran_s is not None and ran_s >= self.policy.reset_s:
            self.in_a_row = 0
        self.deaths.append(now)
        while self.deaths and self.deaths[0] <= now - self.policy.window_s:
            self.deaths.popleft()
        if len(self.deaths) > self.policy.limit:
            return None
        self.in_a_row += 1
        return self.policy.delay_s(self.in_a_row)

    def clear(self) -> None:
        self.deaths.clear()
        self.in_a_row = 0


def describe_exit(returncode: int) -> str:
    """``exited with status N`` or ``was killed by SIGNAME`` for a child's ``returncode``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with status {returncode}"


class _Child:
    """One broker process of a node, with the threads that read its stdout and stderr."""

    def __init__(self, cmd: list[str], err: TextIO, err_lock: threading.Lock) -> None:
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.spawned_at = time.monotonic()
        self.listening_at: float | None = None
        self.address: str | None = None
        self.listening = threading.Event()
        self.killed_for_silence = False
        self.kill_sent = False
        self._err = err
        self._err_lock = err_lock
        self._errors: list[str] = []
        self._stderr_thread = threading.Thread(
            target=self._read_stderr, name=f"node-{self.proc.pid}-stderr", daemon=True
        )
        self._stdout_thread = threading.Thread(
            target=self._read_stdout, name=f"node-{self.proc.pid}-stdout", daemon=True
        )
        self._stderr_thread.start()
        self._stdout_thread.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        with contextlib.suppress(ValueError, OSError):
            for line in self.proc.stdout:
                if self.address is None:
                    address = parse_listening_line(line)
                    if address is not None:
                        self.address = address
                        self.listening_at = time.monotonic()
                        self.listening.set()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        with contextlib.suppress(ValueError, OSError):
            for line in self.proc.stderr:
                if is_error_line(line):
                    self._errors.append(line)
                else:
                    with self._err_lock:
                        self._err.write(line)
                        self._err.flush()

    def cause(self) -> str | None:
        """The cause the exited process printed (its last ``pylog-broker: CAUSE`` line), if any."""
        self._stderr_thread.join(1.0)
        return startup_failure_cause("".join(self._errors))

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.send_signal(sig)


@dataclass
class _Node:
    node_id: int
    log_dir: str
    history: RestartHistory
    state: str = STARTING
    child: _Child | None = None
    address: str | None = None
    restart_at: float | None = None
    stop_deadline: float | None = None
    restarts: int = 0
    last_exit: str | None = None
    on_request: bool = False  # the current start or stop was asked for by an operator
    ports: dict[str, int] = field(
        default_factory=dict
    )  # listener name -> the port it had; bound again on restart
    moved: dict[str, tuple[int, str]] = field(default_factory=dict)  # this start: name -> (old port, why not)
    waiting: list[str] = field(default_factory=list)  # request ids answered when the current action ends


class ClusterSupervisor:
    """Runs and supervises the nodes of ``pylog-broker cluster`` (see the module docstring)."""

    def __init__(
        self,
        config_file: str | os.PathLike[str],
        cluster_dir: str | os.PathLike[str],
        nodes: int,
        *,
        overrides: Iterable[tuple[str, str]] = (),
        listeners: Sequence[str] = ("PLAINTEXT",),
        log_level: str | None = None,
        policy: RestartPolicy | None = None,
        startup_timeout_s: float = 60.0,
        stop_timeout_s: float = 60.0,
        poll_s: float = 0.1,
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:
        if nodes < 1:
            raise InvalidArgumentError(f"--nodes {nodes}: at least one node is required")
        self._config_file = Path(config_file)
        self._dir = Path(cluster_dir)
        self._overrides = list(overrides)
        self._listeners = tuple(listeners)
        self._log_level = log_level
        self._policy = policy or RestartPolicy()
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._poll_s = poll_s
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._err_lock = threading.Lock()
        self._stop_requested = False
        self._started_ms = int(time.time() * 1000)
        self._nodes = [
            _Node(i, cluster_node_overrides(self._dir, i)["log.dirs"], RestartHistory(self._policy))
            for i in range(nodes)
        ]

    # --- public ---------------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop every node and return 0. Only sets a flag: safe from a signal handler."""
        self._stop_requested = True

    def run(self) -> int:
        """Start the nodes, print their addresses, supervise them until :meth:`request_stop`; the exit status."""
        self._dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            requests = self._dir / REQUEST_DIR
            requests.mkdir(exist_ok=True)
            for stale in requests.iterdir():  # requests nobody waits for any more, answers nobody collected
                with contextlib.suppress(OSError):
                    stale.unlink()
            try:
                status = self._start_all()
                if status is not None:
                    return status
                return self._supervise()
            finally:
                self._stop_all()
                (self._dir / STATE_FILE).unlink(missing_ok=True)

    # --- start and supervise ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock = FileLock(self._dir / LOCK_FILE)
        if not lock.acquire(_LOCK_RETRY_S, poll_s=0.05):
            state = _read_json(self._dir / STATE_FILE)
            pid = f" (pid {state['pid']})" if isinstance(state, dict) and "pid" in state else ""
            raise ClusterSupervisorError(
                f"another pylog-broker cluster{pid} already runs the cluster in {self._dir}"
            )
        try:
            yield
        finally:
            lock.release()

    def _spawn(self, node: _Node) -> None:
        ports = dict(node.ports)
        node.moved = {}
        for name, port in node.ports.items():
            taken = _port_taken(_LOOPBACK, port)
            if taken is not None:
                node.moved[name] = (port, taken)
                del ports[name]
        node_overrides = cluster_node_overrides(self._dir, node.node_id, self._listeners, ports=ports)
        overrides = [*self._overrides, *node_overrides.items()]
        node.child = _Child(
            start_command(self._config_file, overrides, log_level=self._log_level), self._err, self._err_lock
        )
        node.state = STARTING
        node.address = None
        node.restart_at = None
        node.stop_deadline = None

    def _learn_ports(self, node: _Node, address: str) -> None:
        """Record the ports the listening node bound (its start binds them again); warn of any that moved."""
        ports = {self._listeners[0] if self._listeners else "PLAINTEXT": int(address.rsplit(":", 1)[1])}
        try:
            broker = SingleHostMetadataStore(self._dir).read().brokers.get(node.node_id)
        except (OSError, ValueError, KeyError, TypeError, ConfigError) as exc:  # a damaged file
            broker = None
            self._say(
                f"cannot read node {node.node_id}'s endpoints from {self._dir} ({exc}); only its first listener "
                "keeps its port when it restarts",
                warning=True,
            )
        if broker is not None:
            ports.update({name: port for name, (_host, port) in broker.endpoints if name in self._listeners})
        for name, (old, why) in sorted(node.moved.items()):
            new = ports.get(name)
            now = f"{_LOOPBACK}:{new}" if new is not None else "a free port"
            self._say(
                f"node {node.node_id} could not bind its {name} port again: {_LOOPBACK}:{old} is taken ({why}); "
                f"it listens on {now} instead: give clients that name {_LOOPBACK}:{old} in bootstrap.servers "
                "the new address",
                warning=True,
            )
        node.moved = {}
        node.ports = ports

    def _start_all(self) -> int | None:
        """Start every node and print the startup lines; an exit status when the cluster cannot start."""
        for node in self._nodes:
            self._spawn(node)
        addresses = []
        for node in self._nodes:
            child = node.child
            assert child is not None
            deadline = child.spawned_at + self._startup_timeout_s
            while not child.listening.wait(self._poll_s):
                if self._stop_requested:
                    return 0
                if child.proc.poll() is not None and not child.listening.is_set():
                    cause = child.cause() or describe_exit(child.proc.returncode)
                    self._say(f"node {node.node_id} did not start: {cause}", warning=False)
                    return 1
                if time.monotonic() > deadline:
                    self._say(
                        f"node {node.node_id} did not start: no listening line within "
                        f"{self._startup_timeout_s:g} s",
                        warning=False,
                    )
                    return 1
            assert child.address is not None
            node.state = RUNNING
            node.address = child.address
            self._learn_ports(node, child.address)
            addresses.append(child.address)
            print(listening_line(child.address), file=self._out, flush=True)
        print(f"bootstrap servers: {','.join(addresses)}", file=self._out, flush=True)
        self._write_state()
        return None

    def _supervise(self) -> int:
        while not self._stop_requested:
            changed = False
            for node in self._nodes:
                changed |= self._tick(node, time.monotonic())
            changed |= self._serve_requests()
            if changed:
                self._write_state()
            if all(node.state == FAILED for node in self._nodes):
                self._say("every node has failed; stopping the cluster", warning=False)
                return 1
            time.sleep(self._poll_s)
        return 0

    def _tick(self, node: _Node, now: float) -> bool:
        """Move one node on; True when its state changed."""
        child = node.child
        if child is not None and node.state == STARTING and child.listening.is_set():
            node.state = RUNNING
            node.address = child.address
            assert child.address is not None
            self._learn_ports(node, child.address)
            how = "started on request" if node.on_request else "restarted"
            message = f"node {node.node_id} {how} (pid {child.pid}), listening on {child.address}"
            self._say(message, warning=False)
            self._answer(node, True, message)
            return True
        if child is not None and child.proc.poll() is not None:
            if self._stop_requested:
                return False
            self._on_exit(node, child, now)
            return True
        if child is not None and node.state == STARTING and now - child.spawned_at > self._startup_timeout_s:
            if not child.kill_sent:
                child.killed_for_silence = child.kill_sent = True
                child.signal(signal.SIGKILL)
            return False
        if child is not None and node.state == STOPPING and node.stop_deadline is not None:
            if now > node.stop_deadline and not child.kill_sent:
                child.kill_sent = True
                self._say(
                    f"node {node.node_id} (pid {child.pid}) did not stop within {self._stop_timeout_s:g} s of "
                    "SIGTERM; killing it (its next start recovers its logs)",
                    warning=True,
                )
                child.signal(signal.SIGKILL)
            return False
        if node.state == RESTARTING and node.restart_at is not None and now >= node.restart_at:
            node.restarts += 1
            node.on_request = False
            self._spawn(node)
            return True
        return False

    def _on_exit(self, node: _Node, child: _Child, now: float) -> None:
        node.child = None
        node.address = None
        exit_text = describe_exit(child.proc.returncode)
        node.last_exit = exit_text
        if node.state == STOPPING:
            node.state = STOPPED
            message = (
                f"node {node.node_id} stopped on request (pid {child.pid} {exit_text}); "
                "it stays stopped until `pylog-broker node start`"
            )
            self._say(message, warning=False)
            self._answer(node, True, message)
            return
        if child.killed_for_silence:
            detail = f"printed no listening line within {self._startup_timeout_s:g} s and was killed"
        else:
            detail = exit_text if child.listening.is_set() else f"{exit_text} before listening"
            cause = child.cause()
            if cause:
                detail += f": {cause}"
        node.last_exit = detail
        what = f"node {node.node_id} (pid {child.pid}) {detail}"
        ran_s = None if child.listening_at is None else now - child.listening_at
        delay = node.history.on_death(now, ran_s)
        if delay is None:
            node.state = FAILED
            self._say(
                f"{what}; giving up on it: {len(node.history.deaths)} deaths within "
                f"{self._policy.window_s:g} s exceed the restart limit of {self._policy.limit} "
                "(the other nodes keep running; `pylog-broker node start` tries again)",
                warning=True,
            )
        else:
            node.state = RESTARTING
            node.restart_at = now + delay
            self._say(
                f"{what}; restarting it in {delay:g} s (restart {len(node.history.deaths)} of at most "
                f"{self._policy.limit} within {self._policy.window_s:g} s)",
                warning=True,
            )
        self._answer(node, False, f"node {node.node_id} did not start: {what}")

    def _stop_all(self) -> None:
        children = [node.child for node in self._nodes if node.child is not None]
        for child in children:
            child.signal(signal.SIGCONT)  # a stopped (SIGSTOP) node could not obey SIGTERM
            child.signal(signal.SIGTERM)
        for child in children:
            try:
                child.proc.wait(self._stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._say(
                    f"node (pid {child.pid}) did not stop within {self._stop_timeout_s:g} s of SIGTERM; "
                    "killing it (its next start recovers its logs)",
                    warning=True,
                )
                child.proc.kill()
                child.proc.wait(10)
        for node in self._nodes:
            if node.state in (STARTING, RUNNING, STOPPING):
                node.state = STOPPED
            node.child = None

    # --- the control channel ------------------------------------------------------------------------------

    def _serve_requests(self) -> bool:
        directory = self._dir / REQUEST_DIR
        try:
            names = sorted(p.name for p in directory.iterdir() if p.name.endswith(_REQUEST_SUFFIX))
        except OSError:
            return False
        changed = False
        for name in names:
            path = directory / name
            request = _read_json(path)
            path.unlink(missing_ok=True)
            request_id = name.removesuffix(_REQUEST_SUFFIX)
            changed |= self._serve(request_id, request)
        return changed

    def _serve(self, request_id: str, request: Any) -> bool:
        action = request.get("action") if isinstance(request, dict) else None
        node_id = request.get("node_id") if isinstance(request, dict) else None
        if action not in ("start", "stop") or not isinstance(node_id, int):
            self._result(request_id, False, f"malformed request {request!r}", None)
            return False
        if not 0 <= node_id < len(self._nodes):
            self._result(
                request_id, False, f"no node {node_id} in this cluster (nodes 0..{len(self._nodes) - 1})"
            )
            return False
        node = self._nodes[node_id]
        if action == "stop":
            if node.state == STOPPED:
                self._result(request_id, True, f"node {node_id} is already stopped", node)
                return False
            if node.state == STOPPING:
                node.waiting.append(request_id)
                return False
            if node.state in (RESTARTING, FAILED):
                message = f"node {node_id} stopped on request (it was {node.state}, with no process)"
                node.state = STOPPED
                node.restart_at = None
                self._say(message, warning=False)
                self._result(request_id, True, message, node)
                return True
            child = node.child
            assert child is not None
            self._answer(node, False, f"node {node_id} was stopped on request before it listened")
            node.state = STOPPING
            node.on_request = True
            node.stop_deadline = time.monotonic() + self._stop_timeout_s
            node.waiting.append(request_id)
            child.signal(signal.SIGCONT)
            child.signal(signal.SIGTERM)
            return True
        # start
        if node.state == RUNNING:
            assert node.child is not None
            self._result(
                request_id,
                True,
                f"node {node_id} is already running (pid {node.child.pid}), listening on {node.address}",
                node,
            )
            return False
        if node.state == STARTING:
            node.waiting.append(request_id)
            return False
        if node.state == STOPPING:
            self._result(request_id, False, f"node {node_id} is stopping; start it once it has stopped", node)
            return False
        node.history.clear()
        node.on_request = True
        self._spawn(node)
        node.waiting.append(request_id)
        return True

    def _answer(self, node: _Node, ok: bool, message: str) -> None:
        for request_id in node.waiting:
            self._result(request_id, ok, message, node)
        node.waiting.clear()

    def _result(self, request_id: str, ok: bool, message: str, node: _Node | None = None) -> None:
        body = {"ok": ok, "message": message, "node": None if node is None else self._node_state(node)}
        path = self._dir / REQUEST_DIR / f"{request_id}{_RESULT_SUFFIX}"
        with contextlib.suppress(OSError):  # the directory is gone: nobody waits any more
            write_atomically(path, json.dumps(body, sort_keys=True).encode())

    # --- supervisor.json ------------------------------------------------------------------------------------

    def _node_state(self, node: _Node) -> dict[str, Any]:
        restart_at_ms = None
        if node.state == RESTARTING and node.restart_at is not None:
            restart_at_ms = int((time.time() + node.restart_at - time.monotonic()) * 1000)
        return {
            "node_id": node.node_id,
            "state": node.state,
            "pid": None if node.child is None else node.child.pid,
            "address": node.address,
            "log_dir": node.log_dir,
            "restarts": node.restarts,
            "last_exit": node.last_exit,
            "restart_at_ms": restart_at_ms,
        }

    def _write_state(self) -> None:
        state = {
            "pid": os.getpid(),
            "started_ms": self._started_ms,
            "updated_ms": int(time.time() * 1000),
            "cluster_dir": str(self._dir),
            "config_file": str(self._config_file),
            "policy": asdict(self._policy),
            "nodes": [self._node_state(node) for node in self._nodes],
        }
        try:
            write_atomically(self._dir / STATE_FILE, json.dumps(state, sort_keys=True, indent=1).encode())
        except OSError as exc:
            self._say(
                f"cannot write {self._dir / STATE_FILE}: {exc} (`node status` shows stale data)", warning=True
            )

    def _say(self, text: str, *, warning: bool) -> None:
        line = WARNING_PREFIX + " ".join(text.split()) if warning else error_line(text)
        with self._err_lock:
            print(line, file=self._err, flush=True)


def _port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound now (another process listens there), or None when it can.

    Binds with SO_REUSEADDR, as the broker does, so the closing connections of a node that just died do not
    count; the socket is closed at once.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


# --- the node commands' side -------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def supervisor_running(cluster_dir: str | os.PathLike[str]) -> bool:
    """True while a supervisor holds ``<cluster_dir>/supervisor.lock`` (never blocks)."""
    return FileLock.held(Path(cluster_dir) / LOCK_FILE)


def read_supervisor_state(cluster_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The running supervisor's ``supervisor.json`` object; None when no supervisor runs for ``cluster_dir``."""
    directory = Path(cluster_dir)
    deadline = time.monotonic() + 5.0
    while supervisor_running(directory):
        state = _read_json(directory / STATE_FILE)
        if isinstance(state, dict):
            return state
        if time.monotonic() > deadline:  # locked, but still starting its nodes
            raise ClusterSupervisorError(
                f"the supervisor of {directory} is still starting its nodes (no {STATE_FILE} yet); try again"
            )
        time.sleep(0.05)
    return None


def request_node_action(
    cluster_dir: str | os.PathLike[str], action: str, node_id: int, *, timeout_s: float = 90.0
) -> dict[str, Any]:
    """Ask the supervisor of ``cluster_dir`` to ``stop`` or ``start`` node ``node_id``; wait for the outcome.

    Returns the supervisor's answer ``{"ok", "message", "node"}``. Raises :class:`ClusterSupervisorError` when
    no supervisor runs, when it stops before answering, or after ``timeout_s`` without an answer.
    """
    if action not in ("start", "stop"):
        raise InvalidArgumentError(f"action {action!r}: expected 'start' or 'stop'")
    directory = Path(cluster_dir)
    if not supervisor_running(directory):
        raise ClusterSupervisorError(f"no pylog-broker cluster is running for {directory}")
    request_id = f"{time.time_ns():020d}-{os.getpid()}-{threading.get_ident()}"
    requests = directory / REQUEST_DIR
    request_path = requests / f"{request_id}{_REQUEST_SUFFIX}"
    result_path = requests / f"{request_id}{_RESULT_SUFFIX}"
    write_atomically(request_path, json.dumps({"action": action, "node_id": node_id}).encode())
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            result = _read_json(result_path)
            if isinstance(result, dict):
                result_path.unlink(missing_ok=True)
                return result
            if not supervisor_running(directory):
                raise ClusterSupervisorError(
                    f"the pylog-broker cluster of {directory} stopped before answering the {action} of node "
                    f"{node_id}"
                )
            if time.monotonic() > deadline:
                taken = not request_path.exists()
                raise ClusterSupervisorError(
                    f"no answer from the supervisor of {directory} within {timeout_s:g} s to the {action} of "
                    f"node {node_id}"
                    + ("; it took the request and may still carry it out" if taken else "; request withdrawn")
                )
            time.sleep(0.05)
    finally:
        request_path.unlink(missing_ok=True)


def node_lines(state: dict[str, Any]) -> Sequence[str]:
    """``node status`` as text: a line for the supervisor, then one per node."""
    lines = [f"supervisor: pid {state['pid']}, cluster dir {state['cluster_dir']}"]
    for node in state["nodes"]:
        parts = [f"node {node['node_id']}: {node['state']}"]
        if node["pid"] is not None:
            parts.append(f"pid {node['pid']}")
        if node["address"]:
            parts.append(str(node["address"]))
        parts.append(f"restarts {node['restarts']}")
        if node["last_exit"]:
            parts.append(f"last exit: {node['last_exit']}")
        if node["restart_at_ms"] is not None:
            wait_s = max(0.0, node["restart_at_ms"] / 1000 - time.time())
            parts.append(f"restart in {wait_s:.1f} s")
        lines.append(", ".join(parts))
    return lines
