"""The ``pylog-broker`` command (also ``python -m broker_runtime``).

Subcommands (argparse subparsers, so later tools add theirs)::

    pylog-broker start --config FILE [--override key=value ...] [--log-level LEVEL] [--recover-all]
    pylog-broker cluster --nodes N --config FILE [--override key=value ...] [--log-level LEVEL] [--restart-...]
    pylog-broker node stop|start --cluster-dir DIR --node-id N [--timeout SECONDS]
    pylog-broker node status --cluster-dir DIR [--json]
    pylog-broker status --data-dir DIR [--json]
    pylog-broker stop --data-dir DIR [--timeout SECONDS]
    pylog-broker console-producer | console-consumer | dump-log | consumer-groups ...   (Kafka's tools)

The tools (``broker_runtime.tools``, one module each) add their own subparsers; each documents its options,
output and exit statuses in its module docstring.
    pylog-broker users add USER --mechanism SCRAM-SHA-256|SCRAM-SHA-512 [--password PW] [--iterations N]
                       (--config FILE [--override key=value ...] | --dir DIR)
    pylog-broker users delete USER [--mechanism M] (--config FILE | --dir DIR)
    pylog-broker users list (--config FILE | --dir DIR)

``start`` runs the broker in the foreground. Once the listener accepts connections it prints exactly one line
to stdout, ``listening on HOST:PORT`` (the real port when ``listeners`` asks for port 0), and flushes it, so a
parent process can wait for it. SIGINT and SIGTERM stop the broker cleanly (LogManager shutdown writes the
clean-shutdown marker); the exit status is 0 then. A broker that cannot start prints ONE line to stderr,
``pylog-broker: CAUSE``, and exits non-zero: a bad configuration (status 2; the line names the key), a log
directory in use by another broker, a port already in use (status 1). The traceback of such a known cause is
logged only at DEBUG level. Unknown keys only produce a warning line (``pylog-broker: warning: ...``) on
stderr. These lines are built and parsed by :mod:`broker_runtime.launch.command`.

``cluster`` runs N brokers on this machine as child processes and keeps them running
(:mod:`broker_runtime.launch.supervisor`: ``start`` each, node.id 0..N-1, logs under ``<log.dirs>/node-<id>``,
free loopback ports, the shared cluster metadata in ``<log.dirs>/cluster.json``; see
``broker_runtime.server.cluster``). It prints one ``listening on HOST:PORT`` line per node, in node order,
then ``bootstrap servers: h:p,h:p,...``, and nothing more on stdout. A node that dies is restarted (same node
id, config and log dir, the same ports) after a back-off (``--restart-backoff-ms``, doubled per death in a row up to
``--restart-backoff-max-ms``, reset after ``--restart-reset-s`` up), each death and restart announced by one
stderr line; a node that dies more than ``--restart-limit`` times within ``--restart-window-s`` is given up
(one warning line; the others keep running; exit 1 once every node is given up). SIGINT/SIGTERM stop every node
cleanly (exit 0). The children's logs go to this process's stderr; a node that cannot start while the cluster
starts makes the command print one line ``pylog-broker: node N did not start: CAUSE`` and exit 1; a second
``cluster`` for the same ``log.dirs`` exits 1 with one line.

``node stop|start --cluster-dir DIR --node-id N`` ask the running ``cluster`` of ``DIR`` (its ``log.dirs``) to
stop one node cleanly (it is not restarted until ``node start``) or to start it again, and wait for the outcome
(``--timeout``, default 90 s): one line on stdout, exit 0; a failure is one ``pylog-broker: CAUSE`` line on
stderr, exit 1; an unknown node id exits 2. ``node status --cluster-dir DIR [--json]`` prints the supervisor's
pid and each node's state, pid, address, restarts and last exit. With no cluster running for ``DIR`` every
``node`` command prints ``pylog-broker: no pylog-broker cluster is running for DIR`` and exits 3.

``status`` and ``stop`` act on the embedded broker of a data directory (:mod:`broker_runtime.launch.embedded`:
the one the Spark connector starts when no bootstrap servers are given). ``status`` prints its bootstrap address, pid, log
dir, log file and settings file (``--json``: one JSON object), exit 0; or ``no broker running for DIR``, exit 3.
``stop`` sends SIGTERM (clean shutdown), SIGKILL after ``--timeout`` seconds (default 15), and prints
``stopped the broker of DIR (pid N, HOST:PORT)`` or ``no broker running for DIR``, exit 0 either way; a broker
that cannot be stopped (or a data directory that cannot be locked) exits 1 with the reason on stderr.

``users`` edits the SCRAM credentials file offline (:mod:`broker_runtime.security.scram_credentials`; Kafka's
``kafka-configs --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]' --entity-type users``): the
file of the broker configured by ``--config`` (its first ``log.dirs`` entry, or its ``pylog.cluster.dir``; for
``pylog-broker cluster`` the ``log.dirs`` of its config), or of ``--dir``. Running brokers re-read the file at
the next login, so no restart is needed. Only salted keys are stored; without ``--password`` the password is
read from the first line of stdin (keeps it out of the process list). ``add`` prints ``added MECHANISM
credential for USER in PATH``; ``delete`` prints ``deleted ...`` or exits 1 when there was none; ``list`` prints
``USER MECHANISM iterations=N`` lines. Errors are one ``pylog-broker: CAUSE`` line, exit 2.

Logging goes to stderr; ``--log-level`` (default from the ``PYLOG_LOG_LEVEL`` environment variable, else
WARNING), or a ``logging.ini`` given with ``--logging-config``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from broker_runtime.errors import ClusterSupervisorError, ConfigError, InvalidArgumentError, PylogError
from broker_runtime.launch.command import WARNING_PREFIX, error_line, listening_line

__all__ = ["PACKAGES", "TOOLS", "build_parser", "freeze_start_heap", "main"]

_log = logging.getLogger("broker_runtime.cli")

# The operator tools, one line each: module broker_runtime.tools.NAME, subcommand NAME with "-" for "_". A command
# line imports only the tool it names (their clients, numpy and pyarrow cost about a second of CPU per start).
TOOLS = (
    "console_producer",
    "console_consumer",
    "dump_log",
    "consumer_groups",
    "topics",
    "configs",
    "delete_records",
    "get_offsets",
    "acls",
)
_OWN_COMMANDS = ("start", "cluster", "node", "status", "stop", "users")
#: Commands with a package of their own (imported only when a command line names one, or for help): the web
#: console (``broker_runtime.console``, the ``console`` extra).
PACKAGES = {"console": "broker_runtime.console"}


def build_parser(
    tools: Sequence[str] = TOOLS, packages: Sequence[str] = tuple(PACKAGES)
) -> argparse.ArgumentParser:
    """The ``pylog-broker`` parser, with the subcommands of ``tools`` and ``packages`` (default: all of them)."""
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
    start.add_argument(
        "--recover-all",
        action="store_true",
        help="validate every segment of every partition before serving (the same as "
        "--override pylog.log.recover.all=true); truncations are logged at WARNING",
    )
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
    cluster.add_argument(
        "--restart-limit",
        type=int,
        default=5,
        help="restarts of one node allowed within --restart-window-s; one more death gives up on the node "
        "(0: never restart); default 5",
    )
    cluster.add_argument(
        "--restart-window-s", type=float, default=300.0, help="the window of --restart-limit; default 300"
    )
    cluster.add_argument(
        "--restart-backoff-ms",
        type=float,
        default=1000.0,
        help="delay before restarting a node that died; doubled per death in a row; default 1000",
    )
    cluster.add_argument(
        "--restart-backoff-max-ms", type=float, default=30000.0, help="the longest such delay; default 30000"
    )
    cluster.add_argument(
        "--restart-reset-s",
        type=float,
        default=60.0,
        help="a node that stayed up this long starts over at --restart-backoff-ms; default 60",
    )
    cluster.set_defaults(func=_cluster)

    node = sub.add_parser("node", help="stop, start or show the nodes of a running `pylog-broker cluster`")
    node_sub = node.add_subparsers(dest="node_command", required=True, metavar="ACTION")
    for action, text in (
        ("stop", "stop one node cleanly (SIGTERM); the cluster does not restart it until `node start`"),
        ("start", "start a stopped (or given-up) node again; waits until it listens"),
    ):
        one = node_sub.add_parser(action, help=text)
        one.add_argument("--cluster-dir", required=True, help="the cluster's log.dirs (holding cluster.json)")
        one.add_argument("--node-id", type=int, required=True, help="the node (0..N-1)")
        one.add_argument(
            "--timeout", type=float, default=90.0, help="seconds to wait for the outcome; default 90"
        )
        one.set_defaults(func=_node)
    node_status = node_sub.add_parser("status", help="pid, address and state of every node")
    node_status.add_argument(
        "--cluster-dir", required=True, help="the cluster's log.dirs (holding cluster.json)"
    )
    node_status.add_argument("--json", action="store_true", help="print supervisor.json's object")
    node_status.set_defaults(func=_node)

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
    for name in tools:
        importlib.import_module(f"broker_runtime.tools.{name}").add_parser(sub)
    for name in packages:
        importlib.import_module(PACKAGES[name]).add_parser(sub)

    users = sub.add_parser("users", help="add, delete or list SCRAM users (the salted credentials file)")
    users_sub = users.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in (
        ("add", "add or replace a user's SCRAM credential"),
        ("delete", "delete a user's SCRAM credential(s)"),
        ("list", "list users and their mechanisms"),
    ):
        one = users_sub.add_parser(action, help=text)
        where = one.add_mutually_exclusive_group(required=True)
        where.add_argument(
            "--config", "-c", help="the broker's .properties file (finds its credentials file)"
        )
        where.add_argument("--dir", help="the directory holding scram-credentials.json")
        one.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE")
        if action != "list":
            one.add_argument("user", help="the user name (the principal is User:<name>)")
            one.add_argument(
                "--mechanism",
                "-m",
                required=action == "add",
                choices=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                help="the SCRAM mechanism" + ("" if action == "add" else "; default: every one"),
            )
        if action == "add":
            one.add_argument("--password", help="the password (default: read the first line of stdin)")
            one.add_argument("--iterations", type=int, default=8192, help="PBKDF2 iterations; default 8192")
        one.set_defaults(func=_users)
    return parser


def _users(args: argparse.Namespace) -> int:
    from pathlib import Path

    from broker_runtime.security.scram_credentials import (
        CREDENTIALS_FILE,
        credentials_path,
        delete_user,
        list_users,
        upsert_user,
    )
    from broker_runtime.server.config import BrokerConfig

    try:
        if args.config:
            config = BrokerConfig.from_file(args.config, args.override)
            path = credentials_path(config.log_dirs, config.cluster_dir)
        else:
            path = Path(args.dir) / CREDENTIALS_FILE
        if args.action == "add":
            password = args.password
            if password is None:
                password = sys.stdin.readline().rstrip("\r\n")
            upsert_user(path, args.user, args.mechanism, password, args.iterations)
            print(f"added {args.mechanism} credential for {args.user} in {path}")
        elif args.action == "delete":
            if not delete_user(path, args.user, args.mechanism):
                print(
                    error_line(f"no {args.mechanism or 'SCRAM'} credential for {args.user} in {path}"),
                    file=sys.stderr,
                )
                return 1
            print(f"deleted {args.mechanism or 'every SCRAM'} credential of {args.user} in {path}")
        else:
            for user, mechanisms in list_users(path).items():
                for mechanism, iterations in mechanisms.items():
                    print(f"{user} {mechanism} iterations={iterations}")
    except ConfigError as exc:
        print(error_line(str(exc)), file=sys.stderr)
        return 2
    return 0


def _setup_logging(level: str, config_file: str | None) -> None:
    if config_file:
        from logging import config as logging_config  # only for --logging-config

        logging_config.fileConfig(config_file, disable_existing_loggers=False)
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


def freeze_start_heap() -> None:
    """Take what the start built (modules, configs, the loaded logs) out of the cyclic garbage collector's sight
    (``gc.freeze``).

    A full collection walks every tracked object with the GIL held, so it stalls the event loop: measured on
    11-27 (2-core machine at load 15), a started broker held 43,000 tracked objects and a full collection took
    19-20 ms of CPU, four times the acks=1 p99 target; with the start's objects frozen it took 0.01 ms. CPython
    runs one once the old generation grew by a quarter since the last (young collections, 0.1 ms, and middle
    ones, 1.3 ms, are unaffected). No collection first: it would stall the first requests (54 ms of wall time
    at that load) to free what a started broker holds as cyclic garbage, 10 objects measured, which stay.
    Likewise an object of the start that later becomes cyclic garbage (a log of a topic deleted afterwards) is
    never collected: at most the start's own heap. Only the broker process's ``start`` command does this; a
    broker run inside another program leaves that program's collector alone."""
    gc.freeze()


def _start(args: argparse.Namespace) -> int:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    _setup_logging(args.log_level, args.logging_config)
    try:
        overrides = list(args.override) + (["pylog.log.recover.all=true"] if args.recover_all else [])
        config = BrokerConfig.from_file(args.config, overrides)
    except ConfigError as exc:
        return _fail(f"configuration error: {exc}", 2)
    for warning in config.warnings:
        print(f"{WARNING_PREFIX}{warning}", file=sys.stderr)
    # The handler only appends to a list: it runs in the main thread between two bytecodes, possibly while that
    # thread holds a lock (a threading.Event's, inside its wait), so taking any lock here could deadlock the
    # broker's clean shutdown (seen: SIGTERM arriving inside Event.wait hung until the sender's SIGKILL).
    stop_requested: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.append(signum)

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
        freeze_start_heap()
        while not stop_requested:
            time.sleep(0.2)  # bounds how long after a signal the stop begins
            if not stop_requested and broker.wait(0):
                why = broker.failure or "broker stopped unexpectedly (see the log)"
                print(error_line(why), file=sys.stderr)
                return 1
        broker.stop()
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _cluster(args: argparse.Namespace) -> int:
    from broker_runtime.launch.supervisor import ClusterSupervisor, RestartPolicy
    from broker_runtime.server.config import BrokerConfig

    try:
        policy = RestartPolicy(
            limit=args.restart_limit,
            window_s=args.restart_window_s,
            backoff_s=args.restart_backoff_ms / 1000,
            backoff_max_s=args.restart_backoff_max_ms / 1000,
            reset_s=args.restart_reset_s,
        )
    except InvalidArgumentError as exc:
        print(error_line(str(exc)), file=sys.stderr)
        return 2
    if args.nodes < 1:
        print(error_line(f"--nodes {args.nodes}: at least one node is required"), file=sys.stderr)
        return 2
    try:
        config = BrokerConfig.from_file(args.config, args.override)
    except ConfigError as exc:
        print(error_line(f"configuration error: {exc}"), file=sys.stderr)
        return 2
    supervisor = ClusterSupervisor(
        args.config,
        config.log_dirs[0],
        args.nodes,
        overrides=[(key, value) for key, _, value in (item.partition("=") for item in args.override)],
        listeners=[listener.name for listener in config.listeners],
        log_level=args.log_level,
        policy=policy,
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        supervisor.request_stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return supervisor.run()
    except ClusterSupervisorError as exc:
        print(error_line(str(exc)), file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _node(args: argparse.Namespace) -> int:
    import json

    from broker_runtime.launch.supervisor import node_lines, read_supervisor_state, request_node_action

    try:
        state = read_supervisor_state(args.cluster_dir)
    except ClusterSupervisorError as exc:
        print(error_line(str(exc)), file=sys.stderr)
        return 1
    if state is None:
        if args.node_command == "status" and args.json:
            print(json.dumps(None))
        print(error_line(f"no pylog-broker cluster is running for {args.cluster_dir}"), file=sys.stderr)
        return STATUS_NOT_RUNNING
    if args.node_command == "status":
        if args.json:
            print(json.dumps(state, sort_keys=True))
        else:
            print("\n".join(node_lines(state)))
        return 0
    known = [node["node_id"] for node in state["nodes"]]
    if args.node_id not in known:
        print(
            error_line(f"--node-id {args.node_id}: not a node of this cluster (nodes {known})"),
            file=sys.stderr,
        )
        return 2
    try:
        result = request_node_action(
            args.cluster_dir, args.node_command, args.node_id, timeout_s=args.timeout
        )
    except ClusterSupervisorError as exc:
        print(error_line(str(exc)), file=sys.stderr)
        return STATUS_NOT_RUNNING if "no pylog-broker cluster is running" in str(exc) else 1
    if not result["ok"]:
        print(error_line(result["message"]), file=sys.stderr)
        return 1
    print(result["message"])
    return 0


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


def _tools_for(argv: Sequence[str]) -> Sequence[str]:
    """The tools a command line needs: none for the broker's own commands, the one it names, else (help, a typo
    whose error lists the choices) all."""
    command = argv[0] if argv else ""
    if command in _OWN_COMMANDS or command in PACKAGES:
        return ()
    named = command.replace("-", "_")
    return (named,) if named in TOOLS and "_" not in command else TOOLS


def _packages_for(argv: Sequence[str]) -> Sequence[str]:
    """The command packages a command line needs, as :func:`_tools_for` chooses tools: the one it names, none for
    another known command, else (help, a typo) all."""
    command = argv[0] if argv else ""
    if command in PACKAGES:
        return (command,)
    known = command in _OWN_COMMANDS or (command.replace("-", "_") in TOOLS and "_" not in command)
    return () if known else tuple(PACKAGES)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_tools_for(arguments), _packages_for(arguments))
    args = parser.parse_args(arguments)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
