"""The stderr log file of a launched broker, and the message of a broker that failed to start.

A launcher appends each start's stderr to the same file, so it notes the file's size before the start
(:func:`log_size`) and reads only what this start wrote (:func:`read_since`). :func:`startup_failure` builds the
error text: its FIRST line is ``<headline>: <cause>`` (the broker's own one-line error, see
:func:`~broker_runtime.launch.command.startup_failure_cause`), the tail of the log follows for the details.

Plain file reads; safe from any thread.
"""

from __future__ import annotations

from pathlib import Path

from broker_runtime.launch.command import startup_failure_cause

__all__ = ["log_size", "read_since", "startup_failure"]

_TAIL_LINES = 20


def log_size(path: Path) -> int:
    """The size of ``path`` in bytes, 0 when it does not exist yet."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_since(path: Path, start: int) -> str:
    """The text appended to ``path`` after byte ``start`` ('' when unreadable)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def startup_failure(headline: str, log_path: Path, start: int) -> str:
    """``"<headline>: <cause>"``, then the last lines the broker wrote to ``log_path`` since ``start``."""
    text = read_since(log_path, start)
    cause = startup_failure_cause(text) or "it wrote nothing to its log"
    tail = "\n".join(text.splitlines()[-_TAIL_LINES:])
    return f"{headline}: {cause}\nits log ({log_path}) ends with:\n{tail}"
