"""The ``pylog-broker`` command (also ``python -m broker_runtime``).

Subcommands (argparse subparsers, so later tools add theirs)::

    pylog-broker start --config FILE [--override key=value ...] [--log-level LEVEL]
    pylog-broker cluster --nodes N --config FILE [--override key=value ...] [--log-level LEVEL]
    pylog-broker status --data-dir DIR [--json]
    pylog-broker stop --data-dir DIR [--timeout SECONDS]

``start`` runs the broker in the foreground. Once the listener accepts connections it prints exactly one line
to stdout, ``listening on HOST:PORT`` (the real port when ``listeners`` asks for port 0), and flushes it, so a
parent process can wait for it. SIGINT and SIGTERM stop the broker cleanly (LogManager shutdown writes the
clean-shutdown marker); the exit status is 0 then. A broker that cannot start prints ONE line to stderr,
``pylog-broker: CAUSE``, and exits non-zero: a bad configuration (status 2; the line names the key), a log
directory in use by another broker, a port already in use (status 1). The traceback of such a known cause is
logged only at DEBUG level. Unknown keys only produce a warning line (``pylog-broker: warning: ...``) on
stderr. These lines are built and parsed by :mod:`broker_runtime.launch.command`.

``cluster`` runs N brokers on this machine as child processes (``start`` each, node.id 0..N-1, logs under
``<log.dirs>/node-<id>``, free loopback ports, the shared cluster metadata in ``<log.dirs>/cluster.json``; see
``broker_runtime.server.cluster``). It prints one ``listening on HOST:PORT`` line per node, in node order,
then ``bootstrap servers: h:p,h:p,...``. SIGINT/SIGTERM stop every node cleanly (exit 0); a node exiting on its
own stops the others (exit 1). The children's logs go to this process's stderr; a node that cannot start
makes the command print one line ``pylog-broker: node N did not start: CAUSE`` and exit 1.

``status`` and ``stop`` act on the embedded broker of a data directory (:mod:`broker_runtime.launch.embedded`:
the one the Spark connector starts when no bootstrap servers are given). ``status`` prints its bootstrap address, pid, log
dir, log file and settings file (``--json``: one JSON object), exit 0; or ``no broker running for DIR``, exit 3.
``stop`` sends SIGTERM (clean shutdown), SIGKILL after ``--timeout`` seconds (default 15), and prints
``stopped the broker of DIR (pid N, HOST:PORT)`` or ``no broker running for DIR``, exit 0 either way; a broker
that cannot be stopped (or a data directory that cannot be locked) exits 1 with the reason on stderr.

Logging goes to stderr; ``--log-level`` (default from the ``PYLOG_LOG_LEVEL`` environment variable, else
WARNING), or a ``logging.ini`` given with ``--logging-config``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import logging.config
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from broker_runtime.errors import ConfigError, PylogError
from broker_runtime.launch.command import (
    WARNING_PREFIX,
    error_line,
    is_error_line,
    listening_line,
    parse_listening_line,
    start_command,
    startup_failure_cause,
)

__all__ = ["build_parser", "main"]

_log = logging.getLogger("broker_runtime.cli")


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

    status = sub.add_parser("status", help="show the embedded broker of a data directory")
    status.add_argument("--data-dir", "-d", required=True, help="the data directory (e.g. the connector's)")
    status.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    status.set_defaults(func=_status)

    stop = sub.add_parser("stop", help="stop the embedded broker of a data directory")
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


def _fail(cause: str, status: int) -> int:
    """Print the one line of a known cause to stderr (its traceback only at DEBUG) and return ``status``."""
    _log.debug("the broker cannot start", exc_info=True)
    print(error_line(cause), file=sys.stderr, flush=True)
    return status


def _start(args: argparse.Namespace) -> int:
    from broker_runtime.server.broker import Broker
    from broker_runtime.server.config import BrokerConfig

    _setup_logging(args.log_level, args.logging_config)
    try:
        config = BrokerConfig.from_file(args.config, args.override)
    except ConfigError as exc:
        return _fail(f"configuration error: {exc}", 2)
    for warning in config.warnings:
        print(f"{WARNING_PREFIX}{warning}", file=sys.stderr)
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            broker = Broker(config)
            broker.start()
        except ConfigError as exc:
            return _fail(f"configuration error: {exc}", 2)
        except (PylogError, OSError) as exc:  # e.g. a log directory in use, a port in use
            return _fail(f"cannot start: {exc}", 1)
        print(listening_line(broker.bootstrap), flush=True)
        while not stop_requested.wait(0.5):
            if broker.wait(0):
                print(error_line("broker stopped unexpectedly (see the log)"), file=sys.stderr)
                return 1
        broker.stop()
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _NodeStderr:
    """Forwards a cluster node's stderr to ours; while the cluster starts, keeps the node's error line instead,
    so that a failed start ends in one line naming the node and the cause."""

    def __init__(self, proc: subprocess.Popen[str], started: threading.Event) -> None:
        self._proc = proc
        self._started = started
        self._text: list[str] = []
        self._thread = threading.Thread(target=self._run, name=f"node-{proc.pid}-stderr", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._proc.stderr is not None
        with contextlib.suppress(ValueError, OSError):
            for line in self._proc.stderr:
                self._forward(line)

    def _forward(self, line: str) -> None:
        if self._started.is_set() or not is_error_line(line):
            sys.stderr.write(line)
            sys.stderr.flush()
        else:
            self._text.append(line)

    def cause(self) -> str:
        self._thread.join(5.0)
        return startup_failure_cause("".join(self._text)) or f"exit status {self._proc.poll()}"


def _cluster(args: argparse.Namespace) -> int:
    from broker_runtime.launch.layout import cluster_node_overrides
    from broker_runtime.server.config import BrokerConfig

    if args.nodes < 1:
        print(error_line(f"--nodes {args.nodes}: at least one node is required"), file=sys.stderr)
        return 2
    try:
        config = BrokerConfig.from_file(args.config, args.override)
    except ConfigError as exc:
        print(error_line(f"configuration error: {exc}"), file=sys.stderr)
        return 2
    base = config.log_dirs[0]
    common = [(key, value) for key, _, value in (item.partition("=") for item in args.override)]
    stop_requested = threading.Event()
    started = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    procs: list[subprocess.Popen[str]] = []
    stderr: list[_NodeStderr] = []
    try:
        for node_id in range(args.nodes):
            overrides = [*common, *cluster_node_overrides(base, node_id).items()]
            cmd = start_command(args.config, overrides, log_level=args.log_level)
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
            procs.append(proc)
            stderr.append(_NodeStderr(proc, started))
        addresses = []
        for node_id, proc in enumerate(procs):
            address = _read_listening(proc)
            if address is None:
                proc.wait()
                print(error_line(f"node {node_id} did not start: {stderr[node_id].cause()}"), file=sys.stderr)
                return 1
            addresses.append(address)
            print(listening_line(address), flush=True)
        started.set()
        print(f"bootstrap servers: {','.join(addresses)}", flush=True)
        while not stop_requested.wait(0.5):
            dead = [i for i, p in enumerate(procs) if p.poll() is not None]
            if dead:
                print(
                    error_line(f"node(s) {dead} stopped unexpectedly; stopping the cluster"), file=sys.stderr
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


def _read_listening(proc: subprocess.Popen[str]) -> str | None:
    """The address of a node's listening line, or None when its stdout ends first."""
    assert proc.stdout is not None
    for line in proc.stdout:
        address = parse_listening_line(line)
        if address is not None:
            return address
    return None


#: ``pylog-broker status`` exit status when no broker runs (as LSB init scripts and ``pg_ctl status``).
STATUS_NOT_RUNNING = 3


def _status(args: argparse.Namespace) -> int:
    import json

    from broker_runtime.launch.embedded import embedded_broker_status

    info = embedded_broker_status(args.data_dir)
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
    from broker_runtime.launch.embedded import embedded_broker_status, stop_embedded_broker

    try:
        info = embedded_broker_status(args.data_dir)
        stopped = stop_embedded_broker(args.data_dir, timeout_s=args.timeout)
    except (PylogError, OSError) as exc:
        print(error_line(f"cannot stop the broker of {args.data_dir}: {exc}"), file=sys.stderr)
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
