"""Where a launched broker keeps its files under its data directory, and where it listens; the one place this
layout is decided.

Layout::

    <data_dir>/logs                     log.dirs of the broker of a data directory (child process or embedded)
    <data_dir>/kafka-logs               cluster directory (pylog.cluster.dir, holding cluster.json)
    <data_dir>/kafka-logs/node-<i>      log.dirs of cluster node i

``pylog-broker cluster`` applies :func:`cluster_node_overrides` under its own ``log.dirs``. Listeners: every
node of a cluster on one machine binds each listener of the shared configuration, by the same name (so its
``listener.security.protocol.map`` entry, ``listener.name.<name>.*`` settings and
``inter.broker.listener.name`` still apply), on a free loopback port; ``advertised.listeners`` is cleared, so
each node advertises the ports it bound. The first listener is the one a node announces on stdout (the
bootstrap address printed by ``cluster``): list the client listener first. Pure functions.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "CLUSTER_DIR",
    "LOG_DIR",
    "LOOPBACK_LISTENER",
    "broker_log_dir",
    "cluster_node_overrides",
    "listener_names",
    "loopback_listeners",
]

#: The partition logs of a data directory's broker: ``<data_dir>/logs``.
LOG_DIR = "logs"
#: The cluster directory of a cluster of child processes: ``<data_dir>/kafka-logs`` (node ``i`` in ``node-i``).
CLUSTER_DIR = "kafka-logs"

#: Every launched broker listens on a free loopback port.
LOOPBACK_LISTENER = "PLAINTEXT://127.0.0.1:0"


def broker_log_dir(data_dir: str | os.PathLike[str]) -> Path:
    """``<data_dir>/logs``: where the broker of ``data_dir`` keeps its partitions (its ``log.dirs``)."""
    return Path(data_dir) / LOG_DIR


def listener_names(listeners: str) -> tuple[str, ...]:
    """The names of a ``listeners`` value (``NAME://host:port,...``), upper case, in order; the configuration
    (:class:`~broker_runtime.server.config.BrokerConfig`) has validated the entries."""
    return tuple(entry.split("://", 1)[0].strip().upper() for entry in listeners.split(",") if "://" in entry)


def loopback_listeners(names: Sequence[str], host: str = "127.0.0.1", port: int = 0) -> str:
    """``listeners`` binding each of ``names`` on a free loopback port: ``A://127.0.0.1:0,B://127.0.0.1:0``
    (``host``: another address of this machine instead, e.g. a network namespace's own; ``port``: the first
    listener's port instead of a free one, the others' stay free)."""
    names = names or ("PLAINTEXT",)
    return ",".join(f"{name}://{host}:{port if i == 0 else 0}" for i, name in enumerate(names))


def cluster_node_overrides(
    base_dir: str | os.PathLike[str],
    node_id: int,
    listeners: Sequence[str] = ("PLAINTEXT",),
    host: str = "127.0.0.1",
    port: int = 0,
) -> dict[str, str]:
    """The properties that make a broker node ``node_id`` of the cluster living under ``base_dir``, binding the
    listeners named ``listeners`` (the shared configuration's, see the module docstring) on ``host`` (the first on ``port``, 0: a free one)."""
    base = Path(base_dir)
    return {
        "node.id": str(node_id),
        "log.dirs": str(base / f"node-{node_id}"),
        "pylog.cluster.dir": str(base),
        "listeners": loopback_listeners(listeners, host, port),
        "advertised.listeners": "",
    }
