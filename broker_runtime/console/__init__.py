"""``pylog-broker console``: a web console of any Kafka-protocol cluster (pylog's broker or Apache Kafka),
talking to it only through the Kafka protocol with pylog's client.

Usage::

    pylog-broker console --bootstrap-server H:P [--listen 127.0.0.1:8080] [--command-config FILE]
        [--max-transaction-timeout MINUTES] [--allowed-host NAME ...] [--allow-writes]

Pages (server-rendered HTML; one same-origin script draws the topic page's live chart): ``/`` the cluster
(nodes, their listeners, controller, API versions), ``/brokers/N`` a broker's configs (sensitive values hidden), ``/topics`` and ``/topics/T`` (partitions: leader,
replicas, ISR, log start, high watermark, last stable offset, size on disk; live charts of records and bytes in and
records out per group, :mod:`.rates`; the Spark writes recorded for it, :mod:`.spark_writes`; configs with
sensitive values hidden), ``/rates/T`` the chart's JSON,
``/topics/T/P`` a record browser (``offset=`` or ``timestamp=`` ms / ISO-8601, ``max_bytes=`` one bounded Fetch,
``isolation=``, ``render=auto|text|json|hex``, ``filter=`` a key or value substring over at most ``scan_bytes=``),
``/groups`` and ``/groups/G``
(members, assignment, committed offsets, lag), ``/transactions`` (the coordinators' transactions with their age,
open transactions on partitions, hanging ones flagged by Kafka's ``find-hanging`` rule).

Security: ``--command-config`` is the client security file every tool takes (:mod:`broker_runtime.tools.common`);
the console reads as that principal and answers only what it may describe (the broker's errors are shown as
such); credentials are never shown or logged. It listens on loopback by default and has no login of its own:
another ``--listen`` address logs a WARNING saying so. A request for a Host that is not one of its names
(``--allowed-host``, the bound address, on a wildcard binding this machine's IP literal) is a 421 (DNS rebinding,
:mod:`.server`). Nothing in it changes the cluster unless it is started with
``--allow-writes``: then a group's page offers to reset its offsets and a topic's page to delete records, each
after a confirmation page (:mod:`.actions`: CSRF token, origin check, audit log); without it every POST is a 403.

Layout: this module holds the command line only (no aiohttp import until ``run``); :mod:`.model` reads the
cluster, :mod:`.render` writes HTML, :mod:`.server` serves it. Needs the ``console`` extra (``pip install
'pylog[console]'``, aiohttp); without it the command fails with one line saying so.
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from broker_runtime.tools.common import (
    EXIT_USAGE,
    ToolError,
    add_bootstrap,
    command_config_security,
    run_tool,
)

__all__ = ["DEFAULT_LISTEN", "add_parser", "parse_listen", "run"]

TOOL = "console"
DEFAULT_LISTEN = "127.0.0.1:8080"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        TOOL, help="a web console of the cluster, read-only unless --allow-writes (needs the console extra)"
    )
    add_bootstrap(p)
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"where the console listens; default {DEFAULT_LISTEN} (loopback; port 0: any free port)",
    )
    p.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=15,
        metavar="MINUTES",
        help="an open transaction older than this, not known to its coordinator for that partition, is "
        "flagged hanging (kafka-transactions find-hanging's option); default 15",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name (or IP literal; NAME:PORT for another port, e.g. behind a proxy) the console is reached "
        "by, repeatable; any other Host header is refused (421: DNS rebinding). The bound address is always "
        "served; on a wildcard --listen (0.0.0.0, ::) so is this machine's IP address a request arrives at",
    )
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="offer state-changing actions (reset a group's offsets, delete records), each after a "
        "confirmation page; off by default (every POST is refused)",
    )
    p.set_defaults(func=run)


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ToolError(f"--listen {text!r}: expected HOST:PORT (e.g. {DEFAULT_LISTEN})", EXIT_USAGE)
    return host.strip("[]"), int(port)


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        host, port = parse_listen(args.listen)
        if args.max_transaction_timeout < 0:
            raise ToolError("--max-transaction-timeout: must be 0 or more minutes", EXIT_USAGE)
        security = command_config_security(args.command_config)
        try:
            from broker_runtime.console.server import ConsoleServer, allowed_host_names
        except ImportError as exc:
            raise ToolError(
                f"the console needs aiohttp ({exc.name or exc}): pip install 'pylog[console]'"
            ) from None
        try:
            allowed_hosts = allowed_host_names(args.allowed_host)
        except ValueError as exc:
            raise ToolError(str(exc), EXIT_USAGE) from None
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        try:
            server = ConsoleServer(
                args.bootstrap_server,
                security=security,
                host=host,
                port=port,
                request_timeout_ms=args.request_timeout_ms,
                max_transaction_timeout_ms=args.max_transaction_timeout * 60000,
                allow_writes=args.allow_writes,
                allowed_hosts=allowed_hosts,
            ).start()
        except OSError as exc:
            raise ToolError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None
        print(f"console at {server.url} (reading {args.bootstrap_server}; Ctrl-C stops it)", flush=True)
        try:
            stop.wait()
        finally:
            server.stop()
        return 0

    return run_tool(TOOL, body)
