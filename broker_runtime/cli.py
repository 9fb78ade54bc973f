"""The ``pylog-broker`` command (also ``python -m broker_runtime``).

Subcommands (argparse subparsers, so later tools add theirs)::

    pylog-broker start --config FILE [--override key=value ...] [--log-level LEVEL]
    pylog-broker cluster --nodes N --config FILE [--override key=value ...] [--log-level LEVEL]
    pylog-broker status --data-dir DIR [--json]
    pylog-broker stop --data-dir DIR [--timeout SECONDS]

``start`` runs the broker in the foreground. Once the listener accepts connections it prints exactly one line
to stdout, ``listening on HOST:PORT`` (the real port when ``listeners`` asks for port 0), and flushes it, so a
parent process can wait for it. SIGINT and SIGTERM stop the broker cleanly (LogManager shutdown writes the
clean-shutdown marker); the exit status is 0 then. A bad configuration exits with status 2 and a one-line
message on stderr naming the key; unknown keys only produce a warning line on stderr.

``cluster`` runs N brokers on this machine as child processes (``start`` each, node.id 0..N-1, logs under
``<log.dirs>/node-<id>``, free loopback ports, the shared cluster metadata in ``<log.dirs>/cluster.json``; see
``broker_runtime.server.cluster``). It prints one ``listening on HOST:PORT`` line per node, in node order,
then ``bootstrap servers: h:p,h:p,...``. SIGINT/SIGTERM stop every node cleanly (exit 0); a node exiting on its
own stops the others (exit 1). The children's logs go to this process's stderr.

``status`` and ``stop`` act on the shared broker of a data directory (``broker_runtime.embedded``: the one the
Spark connector starts when no bootstrap servers are given). ``status`` prints its bootstrap address, pid, log
dir, log file and settings file (``--json``: one JSON object), exit 0; or ``no broker running for DIR``, exit 3.
``stop`` sends SIGTERM (clean shutdown), SIGKILL after ``--timeout`` seconds (default 15), and prints
``stopped the broker of DIR (pid N, HOST:PORT)`` or ``no broker running for DIR``, exit 0 either way; a broker
that cannot be stopped (or a data directory that cannot be locked) exits 1 with the reason on stderr.

Logging goes to stderr; ``--log-level`` (default from the ``PYLOG_LOG_LEVEL`` environment variable, else
WARNING), or a ``logging.ini`` given with ``--logging-config``.
"""

from __future__ import annotations

import argparse
import logging
import logging.config
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from broker_runtime.errors import ConfigError

__all__ = ["build_parser", "main"]

LISTENING_PREFIX = "listening on "


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pylog-broker", description="pylog's Kafka-protocol broker")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    start = sub.add_parser("start", help="run a broker in the foreground until SIGINT/SIGTERM")
    start.add_argument("--config", "-c", required=True, help="broker .properties file (Kafka property names)")
    start.add_argument(
        "--override",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a property, overriding the file (repeatable)",
    )
    start.add_argument(
        "--log-level",
        default=os.environ.get("PYLOG_LOG_LEVEL", "WARNING"),
        help="root log level (DEBUG, INFO, WARNING, ERROR); default WARNING",
    )
    start.add_argument("--logging-config", default=None, help="a logging .ini file (fileConfig format)")
    start.set_defaults(func=_start)

    cluster = sub.add_parser("cluster", help="run N brokers forming one cluster on this machine")
    cluster.add_argument("--nodes", "-n", type=int, required=True, help="number of brokers (node.id 0..N-1)")
    cluster.add_argument("--config", "-c", required=True, help="broker .properties file shared by every node")
    cluster.add_argument(
        "--override",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a property for every node, overriding the file (repeatable)",
    )
    cluster.add_argument(
        "--log-level",
        default=os.environ.get("PYLOG_LOG_LEVEL", "WARNING"),
        help="root log level of every node; default WARNING",
    )
    cluster.set_defaults(func=_cluster)

    status = sub.add_parser("status", help="show the shared broker of a data directory")
    status.add_argument("--data-dir", "-d", required=True, help="the data directory (e.g. the connector's)")
    status.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    status.set_defaults(func=_status)

    stop = sub.add_parser("stop", help="stop the shared broker of a data directory")
    stop.add_argument("--data-dir", "-d", required=True, help="the data directory (e.g. the connector's)")
    stop.add_argument(
        "--timeout", type=float, default=15.0, help="seconds between SIGTERM and SIGKILL; default 15"
    )
    stop.set_defaults(func=_stop)
    return parser


def _setup_logging(level: str, config_file: str | None) -> None:
    if config_file:
        logging.config.fileConfig(config_file, disable_existing_loggers=False)
        return
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _start(args: argparse.Namespace) -> int:
    from broker_runtime.server.broker import Broker
    from broker_runtime.server.config import BrokerConfig

    _setup_logging(args.log_level, args.logging_config)
    try:
        config = BrokerConfig.from_file(args.config, args.override)
    except ConfigError as exc:
        print(f"pylog-broker: configuration error: {exc}", file=sys.stderr)
        return 2
    for warning in config.warnings:
        print(f"pylog-broker: warning: {warning}", file=sys.stderr)
    broker = Broker(config)
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            broker.start()
        except ConfigError as exc:
            print(f"pylog-broker: configuration error: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"pylog-broker: cannot start: {exc}", file=sys.stderr)
            return 1
        print(f"{LISTENING_PREFIX}{broker.bootstrap}", flush=True)
        while not stop_requested.wait(0.5):
            if broker.wait(0):
                print("pylog-broker: broker stopped unexpectedly (see the log)", file=sys.stderr)
                return 1
        broker.stop()
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _cluster(args: argparse.Namespace) -> int:
    import subprocess

    from broker_runtime.embedded import cluster_node_overrides
    from broker_runtime.server.config import BrokerConfig

    if args.nodes < 1:
        print(f"pylog-broker: --nodes {args.nodes}: at least one node is required", file=sys.stderr)
        return 2
    try:
        config = BrokerConfig.from_file(args.config, args.override)
    except ConfigError as exc:
        print(f"pylog-broker: configuration error: {exc}", file=sys.stderr)
        return 2
    base = config.log_dirs[0]
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    procs: list[subprocess.Popen[str]] = []
    try:
        for node_id in range(args.nodes):
            cmd = [sys.executable, "-m", "broker_runtime", "start", "--config", args.config]
            cmd += ["--log-level", args.log_level]
            for item in [
                *args.override,
                *(f"{k}={v}" for k, v in cluster_node_overrides(base, node_id).items()),
            ]:
                cmd += ["--override", item]
            procs.append(
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1)
            )
        addresses = []
        for node_id, proc in enumerate(procs):
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith(LISTENING_PREFIX):
                print(
                    f"pylog-broker: node {node_id} did not start (exit status {proc.wait()})", file=sys.stderr
                )
                return 1
            addresses.append(line[len(LISTENING_PREFIX) :].strip())
            print(line.strip(), flush=True)
        print(f"bootstrap servers: {','.join(addresses)}", flush=True)
        while not stop_requested.wait(0.5):
            dead = [i for i, p in enumerate(procs) if p.poll() is not None]
            if dead:
                print(
                    f"pylog-broker: node(s) {dead} stopped unexpectedly; stopping the cluster",
                    file=sys.stderr,
                )
                return 1
        return 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: ``pylog-broker status`` exit status when no broker runs (as LSB init scripts and ``pg_ctl status``).
STATUS_NOT_RUNNING = 3


def _status(args: argparse.Namespace) -> int:
    import json

    from broker_runtime.embedded import shared_broker_status

    info = shared_broker_status(args.data_dir)
    if info is None:
        print(json.dumps(None) if args.json else f"no broker running for {args.data_dir}")
        return STATUS_NOT_RUNNING
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    for key in ("bootstrap", "pid", "log_dir", "log_file", "config_file", "data_dir"):
        print(f"{key.replace('_', ' ')}: {info[key]}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    from broker_runtime.embedded import shared_broker_status, stop_shared_broker
    from broker_runtime.errors import PylogError

    try:
        info = shared_broker_status(args.data_dir)
        stopped = stop_shared_broker(args.data_dir, timeout_s=args.timeout)
    except (PylogError, OSError) as exc:
        print(f"pylog-broker: cannot stop the broker of {args.data_dir}: {exc}", file=sys.stderr)
        return 1
    if not stopped:
        print(f"no broker running for {args.data_dir}")
    elif info is None:  # started between the two calls
        print(f"stopped the broker of {args.data_dir}")
    else:
        print(f"stopped the broker of {args.data_dir} (pid {info['pid']}, {info['bootstrap']})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
