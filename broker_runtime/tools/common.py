"""What every tool shares: ``--bootstrap-server`` (and ``--request-timeout-ms``, ``--command-config``), the
client a tool talks through, ``key=value`` properties, and one way to fail.

``--command-config FILE`` (as Kafka's tools) is a properties file of client security settings
(``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.*``; :class:`ClientSecurity`). Its
values are never printed: a bad file fails naming the key, never the password or JAAS entry in it.

Exit statuses (every tool): 0 done; 1 the operation failed (the broker refused it or cannot be reached, a file
cannot be read or is corrupt; the line names the broker's error code or the address); 2 bad usage (argparse's
own status, a malformed argument, ``k=v`` list, property or JSON file). A failure prints ONE line to stderr,
``pylog-broker TOOL: CAUSE``, never a traceback. Progress and summaries go to stderr, results to stdout (so
stdout can be piped).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

from broker_runtime.client import KafkaClient
from broker_runtime.errors import BrokerConnectionError, KafkaError, PylogError
from broker_runtime.security import ClientSecurity

__all__ = [
    "EXIT_FAILED",
    "EXIT_USAGE",
    "ToolError",
    "add_bootstrap",
    "client_for",
    "command_config_security",
    "fail",
    "flag",
    "parse_pairs",
    "parse_properties",
    "run_tool",
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
        "--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]", help="the brokers to connect to"
    )
    parser.add_argument(
        "--request-timeout-ms",
        type=int,
        default=30000,
        help="how long to wait for each answer; default 30000",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="properties file of client security settings (security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.*)",
    )


def command_config_security(path: str | None) -> ClientSecurity | None:
    """The client security of a ``--command-config`` file (None without one); a usage error names the file
    or the key, never a value."""
    if not path:
        return None
    props: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith(("#", "!")):
                    key, _, value = line.partition("=")
                    props[key.strip()] = value.strip()
    except OSError as exc:
        raise ToolError(f"cannot read --command-config {path}: {exc.strerror}", EXIT_USAGE) from None
    return ClientSecurity.from_properties(props, name_prefix="--command-config: ")


def client_for(args: argparse.Namespace, client_id: str = "pylog-admin") -> KafkaClient:
    """The tool's client (a context manager: ``with client_for(args) as client``)."""
    return KafkaClient(
        args.bootstrap_server,
        client_id=client_id,
        request_timeout_ms=getattr(args, "request_timeout_ms", 30000),
        retries=2,
        security=command_config_security(getattr(args, "command_config", None)),
    )


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
            raise ToolError(f"{what}: expected key=value, got {raw!r}", EXIT_USAGE)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def fail(tool: str, message: str, status: int = EXIT_FAILED) -> int:
    print(f"pylog-broker {tool}: {message}", file=sys.stderr, flush=True)
    return status


def run_tool(name: str, body: Callable[[], int]) -> int:
    """Run a tool's body, turning every expected failure into one stderr line and an exit status."""
    try:
        return body()
    except ToolError as exc:
        return fail(name, str(exc), exc.status)
    except BrokerConnectionError as exc:
        return fail(name, f"cannot reach the broker: {exc}")
    except (KafkaError, PylogError) as exc:
        return fail(name, str(exc))


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
