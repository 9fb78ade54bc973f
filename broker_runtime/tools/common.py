"""What every admin tool shares: ``--bootstrap-server``, one client, and one way to fail.

A tool fails with exactly one line on stderr, ``pylog-broker <tool>: CAUSE``, and an exit status: 2 for bad
input (an argument, a ``k=v`` list, a JSON file), 1 when the broker refused or could not be reached (the
line names the broker's error code or the address). No traceback reaches the operator. Progress and
summaries go to stderr, results to stdout (so stdout can be piped).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from broker_runtime.client import KafkaClient
from broker_runtime.errors import BrokerConnectionError, KafkaError, PylogError

__all__ = ["BAD_INPUT", "FAILED", "ToolError", "add_bootstrap", "client_for", "parse_pairs", "run_tool"]

BAD_INPUT = 2
FAILED = 1


class ToolError(Exception):
    """A failure to report as one line with an exit status."""

    def __init__(self, message: str, status: int = FAILED) -> None:
        super().__init__(message)
        self.status = status


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]", help="the brokers to connect to"
    )
    parser.add_argument(
        "--request-timeout-ms",
        type=int,
        default=30000,
        help="how long to wait for each answer; default 30000",
    )


@contextmanager
def client_for(args: argparse.Namespace) -> Iterator[KafkaClient]:
    client = KafkaClient(
        args.bootstrap_server, client_id="pylog-admin", request_timeout_ms=args.request_timeout_ms, retries=2
    )
    try:
        yield client
    finally:
        client.close()


def parse_pairs(text: str, what: str) -> dict[str, str]:
    """``k=v,k2=v2`` (Kafka's ``--add-config`` syntax; ``[a,b]`` keeps commas inside a value)."""
    out: dict[str, str] = {}
    depth, item, items = 0, "", []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(item)
            item = ""
        else:
            item += ch
    items.append(item)
    for raw in items:
        if not raw.strip():
            continue
        key, sep, value = raw.partition("=")
        if not sep or not key.strip():
            raise ToolError(f"{what}: expected key=value, got {raw!r}", BAD_INPUT)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def run_tool(name: str, body: Callable[[], int]) -> int:
    """Run a tool's body, turning every expected failure into one stderr line and an exit status."""
    try:
        return body()
    except ToolError as exc:
        print(f"pylog-broker {name}: {exc}", file=sys.stderr)
        return exc.status
    except BrokerConnectionError as exc:
        print(f"pylog-broker {name}: cannot reach the broker: {exc}", file=sys.stderr)
        return FAILED
    except KafkaError as exc:
        print(f"pylog-broker {name}: {exc}", file=sys.stderr)
        return FAILED
    except PylogError as exc:
        print(f"pylog-broker {name}: {exc}", file=sys.stderr)
        return FAILED
