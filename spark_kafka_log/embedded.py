"""The connector's zero-configuration broker: the shared broker of ``pylog.dataDir``.

With no ``kafka.bootstrap.servers`` the connector uses the ONE detached broker of its data directory
(``pylog.dataDir``, else ``$PYLOG_DATA_DIR``, else ``./pylog-data`` of the driver -- resolved to an absolute
path on the driver by the options and passed to executors). The broker side -- discovery file, lock, start,
stale detection, stop, and where its files live (``<dataDir>/logs`` for the partitions) -- belongs to
:mod:`broker_runtime.embedded` (``ensure_shared_broker``, ``shared_broker_status``, ``stop_shared_broker``);
this module is the connector-facing layer over it and states where each call runs:

* :func:`ensure_embedded_broker` runs on the **driver** in ``DataSource.writer()`` / ``reader()``, so the broker
  is up before any task starts;
* **executors** only look it up with :func:`embedded_broker_address` at the start of each write task (read one
  small file, open one socket) and fall back to the address the driver resolved -- they never start a broker
  (an executor on another machine has no such broker);
* :func:`stop_embedded_broker` is for users and tools; ``pylog-broker stop --data-dir DIR`` does the same and
  ``pylog-broker status --data-dir DIR`` shows it.

The broker OUTLIVES the Spark job: several jobs share it, and its topics are auto-created with the
``num.partitions`` of ``<dataDir>/broker.properties``.
"""

from __future__ import annotations

import os

from broker_runtime.embedded import (
    DISCOVERY_FILE,
    LOCK_FILE,
    LOG_FILE,
    SharedBrokerError,
    ensure_shared_broker,
    shared_broker_address,
    stop_shared_broker,
)

__all__ = [
    "DISCOVERY_FILE",
    "LOCK_FILE",
    "LOG_FILE",
    "EmbeddedBrokerError",
    "embedded_broker_address",
    "ensure_embedded_broker",
    "stop_embedded_broker",
]

#: The embedded broker could not be started, reached or stopped; the message quotes its log.
EmbeddedBrokerError = SharedBrokerError


def ensure_embedded_broker(data_dir: str | os.PathLike[str], timeout_s: float = 60.0) -> str:
    """Driver: ``host:port`` of the embedded broker of ``data_dir``, started (detached) if none is alive."""
    return ensure_shared_broker(data_dir, timeout_s=timeout_s)


def embedded_broker_address(data_dir: str | os.PathLike[str]) -> str | None:
    """Executor (or anywhere): ``host:port`` of the live embedded broker of ``data_dir``, or None."""
    return shared_broker_address(data_dir)


def stop_embedded_broker(data_dir: str | os.PathLike[str], timeout_s: float = 15.0) -> bool:
    """Stop the embedded broker of ``data_dir``; True if one was running (SIGTERM, SIGKILL after the timeout)."""
    return stop_shared_broker(data_dir, timeout_s=timeout_s)
