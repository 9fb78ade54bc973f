"""Where a launched broker keeps its files under its data directory; the one place this layout is decided.

Layout::

    <data_dir>/logs                     log.dirs of the broker of a data directory (child process or embedded)
    <data_dir>/kafka-logs               cluster directory (pylog.cluster.dir, holding cluster.json)
    <data_dir>/kafka-logs/node-<i>      log.dirs of cluster node i

``pylog-broker cluster`` applies :func:`cluster_node_overrides` under its own ``log.dirs``. Pure functions.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CLUSTER_DIR", "LOG_DIR", "LOOPBACK_LISTENER", "broker_log_dir", "cluster_node_overrides"]

#: The partition logs of a data directory's broker: ``<data_dir>/logs``.
LOG_DIR = "logs"
#: The cluster directory of a cluster of child processes: ``<data_dir>/kafka-logs`` (node ``i`` in ``node-i``).
CLUSTER_DIR = "kafka-logs"

#: Every launched broker listens on a free loopback port.
LOOPBACK_LISTENER = "PLAINTEXT://127.0.0.1:0"


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
        "listeners": LOOPBACK_LISTENER,
    }
