"""Helpers of the tool tests: how a tool run is called and judged."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

#: ``tool(*args, stdin=None, timeout=60)``: one run of ``pylog-broker ARGS`` (the ``tool`` and ``tool_here``
#: fixtures of tests/tools).
Tool = Callable[..., subprocess.CompletedProcess[str]]


def assert_one_line_error(done: subprocess.CompletedProcess[str], status: int, *fragments: str) -> None:
    """A failed tool: the given exit status and ONE stderr line naming the cause, no traceback."""
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr, done.stderr
    assert lines, "no error line"
    for fragment in fragments:
        assert fragment in done.stderr, (fragment, done.stderr)
