"""Fixtures of the tool tests: one real broker (a child process) per module; the tools run as
``python -m broker_runtime TOOL ...`` subprocesses, as an operator runs them (``tool``), or, for the many small
error cases, through the same ``pylog-broker`` entry point inside the test process (``tool_here``: same
parser, same code, same exit status and output, without a Python start per case)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.launch import broker_log_dir, broker_process
from tests.support.tools import Tool, assert_one_line_error

__all__ = ["Tool", "assert_one_line_error"]


@pytest.fixture(scope="module")
def broker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tools-broker")


@pytest.fixture(scope="module")
def broker(broker_dir: Path) -> Iterator[str]:
    overrides = {
        "group.initial.rebalance.delay.ms": "0",
        "log.index.interval.bytes": "256",
        "auto.create.topics.enable": "false",
    }
    with broker_process(broker_dir, overrides=overrides) as address:
        yield address


@pytest.fixture(scope="module")
def log_dir(broker_dir: Path, broker: str) -> Path:
    return Path(broker_log_dir(broker_dir))


@pytest.fixture(scope="session")
def tool() -> Tool:
    def run(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "broker_runtime", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture(scope="session")
def tool_here() -> Tool:
    from broker_runtime.cli import main

    def run(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        out, err = io.StringIO(), io.StringIO()
        fake_stdin = io.TextIOWrapper(io.BytesIO((stdin or "").encode()), encoding="utf-8")
        saved = sys.stdin
        sys.stdin = fake_stdin
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    status = main(list(args))
                except SystemExit as exc:  # argparse's usage errors
                    status = int(exc.code or 0)
        finally:
            sys.stdin = saved
        return subprocess.CompletedProcess(["pylog-broker", *args], status, out.getvalue(), err.getvalue())

    return run
