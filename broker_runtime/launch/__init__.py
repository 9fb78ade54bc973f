"""Running pylog brokers from Python: child processes for tests and tools, and the embedded broker of a data dir.

Modules (this package imports only ``protocol``, ``client``, ``errors`` and ``fsutil``)::

    command      the ``pylog-broker start`` command line and the parser of its ``listening on HOST:PORT`` line
    layout       where a launched broker keeps its files under its data directory
    broker_log   a launched broker's stderr file and the error message of a failed start
    process      broker_process / cluster_process (child processes, stopped with the ``with``), create_topic
    supervisor   ``pylog-broker cluster``'s supervisor (restarts dead nodes) and the ``node`` commands' channel
    embedded     the embedded broker: ONE detached broker per data directory, found or started, that outlives
                 its starter (discovery file, lock, start / status / stop)

Every launcher builds its command with :func:`~broker_runtime.launch.command.start_command` and reads the
broker's address with :func:`~broker_runtime.launch.command.parse_listening_line`, as ``pylog-broker cluster``
does. Errors: :class:`~broker_runtime.errors.BrokerStartError` (a child process that did not start) and
:class:`~broker_runtime.errors.EmbeddedBrokerError`; the first line of either states the cause.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker_runtime.launch.embedded import (
        embedded_broker_address,
        embedded_broker_status,
        ensure_embedded_broker,
        stop_embedded_broker,
    )
    from broker_runtime.launch.layout import broker_log_dir, cluster_node_overrides
    from broker_runtime.launch.process import (
        BrokerCluster,
        ClusterNode,
        broker_process,
        cluster_process,
        create_topic,
    )

#: Where each name of ``__all__`` lives. Imported at first use: ``pylog-broker start`` needs only
#: :mod:`.command`, and importing this package must not load the client (and its TLS and SASL modules) then.
_HOMES = {
    "BrokerCluster": "process",
    "ClusterNode": "process",
    "broker_log_dir": "layout",
    "broker_process": "process",
    "cluster_node_overrides": "layout",
    "cluster_process": "process",
    "create_topic": "process",
    "embedded_broker_address": "embedded",
    "embedded_broker_status": "embedded",
    "ensure_embedded_broker": "embedded",
    "stop_embedded_broker": "embedded",
}

__all__ = [
    "BrokerCluster",
    "ClusterNode",
    "broker_log_dir",
    "broker_process",
    "cluster_node_overrides",
    "cluster_process",
    "create_topic",
    "embedded_broker_address",
    "embedded_broker_status",
    "ensure_embedded_broker",
    "stop_embedded_broker",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
