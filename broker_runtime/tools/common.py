"""What every tool shares: the ``--bootstrap-server`` argument, ``key=value`` properties, the one-line error
exit and the client a tool talks through.

Exit statuses (every tool): 0 done; 1 the operation failed (the broker refused it, cannot be reached, a file
cannot be read or is corrupt); 2 bad usage (argparse's own status: a missing or malformed argument or
property). A failure prints ONE line to stderr, ``pylog-broker TOOL: CAUSE``, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from broker_runtime.client import KafkaClient

__all__ = [
    "EXIT_FAILED",
    "EXIT_USAGE",
    "ToolError",
    "add_bootstrap",
    "client_for",
    "fail",
    "flag",
    "parse_properties",
    "unescape",
]

EXIT_FAILED = 1
EXIT_USAGE = 2


class ToolError(Exception):
    """A failure the tool reports as one line and an exit status (1 unless given)."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]", help="brokers to connect to"
    )


def client_for(args: argparse.Namespace, client_id: str) -> KafkaClient:
    return KafkaClient(args.bootstrap_server, client_id=client_id, request_timeout_ms=30000)


def parse_properties(items: Iterable[str], option: str, known: Iterable[str]) -> dict[str, str]:
    """``key=value`` strings of a repeatable option into a dict; a malformed item or unknown key is a usage
    error naming the option (no property is ignored quietly)."""
    allowed = set(known)
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ToolError(f"{option} {item!r}: expected key=value", EXIT_USAGE)
        if key not in allowed:
            raise ToolError(
                f"{option} {key}: not supported by this tool (supported: {', '.join(sorted(allowed))})",
                EXIT_USAGE,
            )
        out[key] = value
    return out


def fail(tool: str, message: str, status: int = EXIT_FAILED) -> int:
    print(f"pylog-broker {tool}: {message}", file=sys.stderr, flush=True)
    return status


def flag(props: dict[str, str], key: str, default: bool = False) -> bool:
    """A boolean property (``true``/``false``, any case)."""
    text = props.get(key)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise ToolError(f"property {key}={text!r}: expected true or false", EXIT_USAGE)
    return text.strip().lower() == "true"


def unescape(text: str) -> str:
    """Separators given on a command line may be written escaped, as Kafka's tools accept (``\\t``, ``\\n``)."""
    return text.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")
