"""The ``pylog-broker`` command (also ``python -m broker_runtime``).

Subcommands (argparse subparsers, so later tools add theirs)::

    pylog-broker start --config FILE [--override key=value ...] [--log-level LEVEL]

``start`` runs the broker in the foreground. Once the listener accepts connections it prints exactly one line
to stdout, ``listening on HOST:PORT`` (the real port when ``listeners`` asks for port 0), and flushes it, so a
parent process can wait for it. SIGINT and SIGTERM stop the broker cleanly (LogManager shutdown writes the
clean-shutdown marker); the exit status is 0 then. A bad configuration exits with status 2 and a one-line
message on stderr naming the key; unknown keys only produce a warning line on stderr.

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
