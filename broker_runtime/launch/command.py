"""The ``pylog-broker start`` command line, and the lines that command prints: one builder, one parser.

Every launcher (``pylog-broker cluster``, :func:`~broker_runtime.launch.process.broker_process`,
:func:`~broker_runtime.launch.process.cluster_process` and the embedded broker) builds its command with
:func:`start_command` and reads the broker's lines with the functions below.

What ``pylog-broker start`` prints::

    stdout:  listening on HOST:PORT          exactly this line, once, when the listener accepts connections
    stderr:  pylog-broker: warning: TEXT     a warning (e.g. an unknown configuration key); the broker goes on
    stderr:  pylog-broker: CAUSE             the last line of a broker that cannot start or stopped on its own

Only a whole line equal to ``listening on HOST:PORT`` (HOST without blanks, PORT 0..65535) counts as the
listening line (:func:`parse_listening_line`): the broker's own log lines, whatever the log level (its INFO
line reads ``broker 0 listening on HOST:PORT, log dirs [...]``), never match. :func:`startup_failure_cause`
finds the one-line cause in a failed broker's stderr.

Pure functions, no I/O; safe from any thread.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping

__all__ = [
    "ERROR_PREFIX",
    "LISTENING_PREFIX",
    "WARNING_PREFIX",
    "error_line",
    "is_error_line",
    "listening_line",
    "parse_listening_line",
    "start_command",
    "startup_failure_cause",
]

#: The stdout line of a listening broker is ``LISTENING_PREFIX + "HOST:PORT"``.
LISTENING_PREFIX = "listening on "
#: Every line the command itself writes to stderr starts with this.
ERROR_PREFIX = "pylog-broker: "
#: ... and a warning (the broker keeps running) with this.
WARNING_PREFIX = ERROR_PREFIX + "warning: "

_LISTENING_LINE = re.compile(re.escape(LISTENING_PREFIX) + r"(?P<host>\S+):(?P<port>[0-9]{1,5})")


def start_command(
    config_file: str | os.PathLike[str],
    overrides: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    *,
    log_level: str | None = None,
) -> list[str]:
    """``python -m broker_runtime start --config FILE [--log-level L] [--override k=v ...]`` (this interpreter).

    Later overrides win over earlier ones and over the file, as the CLI applies them in order.
    """
    cmd = [sys.executable, "-m", "broker_runtime", "start", "--config", os.fspath(config_file)]
    if log_level is not None:
        cmd += ["--log-level", log_level]
    items = overrides.items() if isinstance(overrides, Mapping) else overrides
    for key, value in items:
        cmd += ["--override", f"{key}={value}"]
    return cmd


def listening_line(bootstrap: str) -> str:
    """The stdout line of a broker listening on ``bootstrap`` (``HOST:PORT``), without the newline."""
    return f"{LISTENING_PREFIX}{bootstrap}"


def parse_listening_line(line: str) -> str | None:
    """``HOST:PORT`` when ``line`` (a trailing newline allowed) is exactly a listening line, else None."""
    match = _LISTENING_LINE.fullmatch(line.rstrip("\r\n"))
    if match is None or int(match["port"]) > 65535:
        return None
    return f"{match['host']}:{match['port']}"


def error_line(cause: str) -> str:
    """The one stderr line of a broker that cannot start (or stopped on its own): ``pylog-broker: CAUSE``."""
    return ERROR_PREFIX + " ".join(cause.split())


def is_error_line(line: str) -> bool:
    """True for a ``pylog-broker: CAUSE`` line (not a warning): the broker says why it cannot go on."""
    return line.startswith(ERROR_PREFIX) and not line.startswith(WARNING_PREFIX)


def startup_failure_cause(stderr_text: str) -> str | None:
    """The cause a failed broker printed: its last ``pylog-broker: CAUSE`` line that is not a warning.

    Without one (a crash before the command could say why), the last non-blank line, which for a Python
    traceback is ``SomeError: message``; None for an empty text.
    """
    lines = [line.strip() for line in stderr_text.splitlines() if line.strip()]
    for line in reversed(lines):
        if is_error_line(line):
            return line[len(ERROR_PREFIX) :]
    return lines[-1] if lines else None
