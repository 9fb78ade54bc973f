"""Fixtures of the tool tests: one real broker (a child process) per module, and the tools run as
``python -m broker_runtime TOOL ...`` subprocesses, as an operator runs them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_runtime.launch import broker_log_dir, broker_process

Tool = Callable[..., subprocess.CompletedProcess[str]]


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


def assert_one_line_error(done: subprocess.CompletedProcess[str], status: int, *fragments: str) -> None:
    """A failed tool: the given exit status and ONE stderr line naming the cause, no traceback."""
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr, done.stderr
    assert lines, "no error line"
    for fragment in fragments:
        assert fragment in done.stderr, (fragment, done.stderr)
