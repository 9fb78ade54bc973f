"""A network of its own for a local cluster: each node in its own network namespace with its own address on a
bridge, and links cut and healed with routes, for the nemesis's partitions.

Layout (made by :class:`Network` on entry, removed on exit, also after a failure)::

    this process (the clients)  --  bridge plb<PID>, 10.<A>.<B>.254/24
                                      |-- veth plv<PID>n0 <-> eth0 in namespace pylog-<PID>-0, 10.<A>.<B>.1
                                      |-- veth plv<PID>n1 <-> eth0 in namespace pylog-<PID>-1, 10.<A>.<B>.2
                                      '-- ...

``<PID>`` is this process's pid and ``<A>.<B>`` derived from it, so concurrent runs never share names or a
subnet. Node ``i`` runs as ``ip netns exec pylog-<PID>-i <broker command>`` (``ip`` execs: the pid is the
broker's) listening on its own address, port :data:`PORT` across restarts (:meth:`Network.placement`, for
:func:`~broker_runtime.launch.cluster_process`). Namespaces separate the network only: the nodes still share the
file system, so the cluster's metadata (``cluster.json``, its lock and every broker's liveness lock) is not cut
by any partition made here. That is the single-host cluster's nature, not a shortcut of the test: see the
README's "Network partitions" for what it means.

Cutting (:meth:`Network.cut`): a ``blackhole`` route for the peer's address inside a node's namespace drops
everything that node sends to the peer, TCP answers included, so a route on one side cuts the link both ways
for TCP; :meth:`cut` adds it on both sides anyway. ``CLIENTS`` stands for the bridge's own address: the clients
of this process (and nothing else) reach the nodes from it. :meth:`Network.heal` removes every route it added.

Requires ``ip`` (iproute2) and the right to make namespaces (root, or CAP_NET_ADMIN and CAP_SYS_ADMIN);
:func:`unavailable` says why not when they are missing. Threading: one thread.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Sequence

__all__ = ["CLIENTS", "Network", "unavailable"]

#: The clients' side of a cut: this process, on the bridge's address.
CLIENTS = -1
#: Every node listens on this port of its own address, before and after a restart (a client that knew a node
#: finds it again, as with Kafka brokers, whose ports are configured).
PORT = 9092


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def unavailable() -> str | None:
    """Why this machine cannot make the namespaces (None when it can): tried once, with a namespace made and
    removed at once."""
    if shutil.which("ip") is None:
        return "no 'ip' command (iproute2) on PATH"
    probe = f"pylog-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


class Network:
    """Namespaces, veths and a bridge for ``nodes`` nodes; a context manager (see the module docstring)."""

    def __init__(self, nodes: int) -> None:
        pid = os.getpid()
        self.nodes = nodes
        self.subnet = f"10.{100 + pid % 100}.{pid // 100 % 250}"
        self.bridge = f"plb{pid}"
        self.namespaces = [f"pylog-{pid}-{i}" for i in range(nodes)]
        self._veths = [f"plv{pid}n{i}" for i in range(nodes)]
        self._routes: set[tuple[int, int]] = set()

    def address(self, node: int) -> str:
        """Node ``node``'s address, or the clients' (the bridge's) for :data:`CLIENTS`."""
        return f"{self.subnet}.{254 if node == CLIENTS else node + 1}"

    def placement(self, node: int) -> tuple[Sequence[str], str, int]:
        """For :func:`~broker_runtime.launch.cluster_process`: node ``node`` in its namespace, on its address and
        :data:`PORT` (its own address, so the port is free, and the same after every restart)."""
        return ["ip", "netns", "exec", self.namespaces[node]], self.address(node), PORT

    def __enter__(self) -> Network:
        try:
            self._remove()  # leftovers of a run of the same pid that could not clean up
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.address(CLIENTS)}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for node, (ns, veth) in enumerate(zip(self.namespaces, self._veths, strict=True)):
                _ip("netns", "add", ns)
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("link", "set", veth, "master", self.bridge, "up")
                _ip("-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._remove()

    def _remove(self) -> None:
        _ip("link", "del", self.bridge, check=False)  # takes the root ends of the veths with it
        for ns in self.namespaces:
            _ip("netns", "del", ns, check=False)

    def _route(self, node: int, peer: int, add: bool) -> None:
        if node == CLIENTS:  # the clients' own routing is the machine's: cut from the node's side only
            return
        verb = "add" if add else "del"
        _ip("-n", self.namespaces[node], "route", verb, "blackhole", f"{self.address(peer)}/32", check=add)
        (self._routes.add if add else self._routes.discard)((node, peer))

    def cut(self, a: int, b: int) -> None:
        """Cut the link between ``a`` and ``b`` (node ids or :data:`CLIENTS`), both ways."""
        for node, peer in ((a, b), (b, a)):
            if (node, peer) not in self._routes:
                self._route(node, peer, True)

    def heal(self) -> None:
        """Every link whole again."""
        for node, peer in sorted(self._routes):
            with contextlib.suppress(RuntimeError):
                self._route(node, peer, False)
        self._routes.clear()
