"""The web console of the embedded broker: :func:`start_console` serves ``pylog-broker console``'s pages for the
broker of a data directory, on loopback, from the caller's process, and prints its URL.

Runs on: driver (session).

Use (a notebook, or any driver program that wrote or read with ``format("pylog")``)::

    console = spark_kafka_log.start_console("/path/to/pylog-data")   # prints: pylog console at http://...
    ...
    console.stop()                                                    # or: with start_console(...) as console:

It never starts a broker: the embedded broker of ``data_dir`` must run (the first write or read with
``format("pylog")`` starts it, as :func:`~broker_runtime.launch.ensure_embedded_broker` does), else
:class:`~broker_runtime.errors.EmbeddedBrokerError` says so. It needs the ``console`` extra (aiohttp); without it
:class:`~broker_runtime.errors.ConfigError` names the ``pip install`` that brings it. The console listens on
127.0.0.1 only (it has no login of its own) and serves from two daemon threads of this process (an HTTP loop and
the one worker that owns its Kafka client) until ``stop()`` or the process ends. A secured cluster's consoles are
started with ``pylog-broker console --command-config``: the embedded broker is plaintext on loopback.
``allow_writes=True`` offers the state-changing actions (``pylog-broker console --allow-writes``: reset a group's
offsets, delete records, each after a confirmation page); off by default.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from broker_runtime.errors import ConfigError, EmbeddedBrokerError
from broker_runtime.launch import embedded_broker_address

if TYPE_CHECKING:
    from broker_runtime.console.server import ConsoleServer

__all__ = ["start_console"]


def start_console(
    data_dir: str | os.PathLike[str], *, port: int = 0, allow_writes: bool = False
) -> ConsoleServer:
    """Serve the console of the embedded broker of ``data_dir`` on ``127.0.0.1:port`` (0: any free port), print
    its URL and return it (``.url``; ``.stop()`` stops it). See the module docstring for what it raises."""
    try:
        from broker_runtime.console.server import ConsoleServer
    except ImportError as exc:
        raise ConfigError(
            f"the console needs the console extra ({exc.name or exc} is missing): pip install 'pylog[console]'"
        ) from None
    bootstrap = embedded_broker_address(data_dir)
    if bootstrap is None:
        raise EmbeddedBrokerError(
            f"no embedded broker runs for {os.fspath(data_dir)!r}: write or read with format('pylog') and "
            "option('pylog.dataDir', ...) first, or start it with ensure_embedded_broker(data_dir)"
        )
    server = ConsoleServer(bootstrap, host="127.0.0.1", port=port, allow_writes=allow_writes).start()
    print(
        f"pylog console at {server.url} (the embedded broker of {os.fspath(data_dir)} at {bootstrap})",
        flush=True,
    )
    return server
