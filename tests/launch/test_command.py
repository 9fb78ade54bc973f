"""The one builder of the ``start`` command and the one parser of its lines (``broker_runtime.launch.command``)."""

from __future__ import annotations

import sys

import pytest

from broker_runtime.launch.command import (
    error_line,
    is_error_line,
    listening_line,
    parse_listening_line,
    start_command,
    startup_failure_cause,
)


@pytest.mark.parametrize(
    ("line", "address"),
    [
        ("listening on 127.0.0.1:9092", "127.0.0.1:9092"),
        ("listening on 127.0.0.1:9092\n", "127.0.0.1:9092"),
        ("listening on 127.0.0.1:9092\r\n", "127.0.0.1:9092"),
        ("listening on localhost:0", "localhost:0"),
        ("listening on [::1]:65535", "[::1]:65535"),
    ],
)
def test_the_exact_listening_line_is_parsed(line: str, address: str) -> None:
    assert parse_listening_line(line) == address


@pytest.mark.parametrize(
    "line",
    [
        # The broker's own INFO log line, as logging formats it and as a bare message.
        "2026-11-23 07:00:00,000 INFO broker_runtime.server.node.broker: broker 0 listening on 127.0.0.1:4242, "
        "log dirs ['/tmp/x/logs']",
        "broker 0 listening on 127.0.0.1:4242, log dirs ['/tmp/x/logs']",
        "listening on 127.0.0.1:4242, log dirs ['/tmp/x/logs']",
        " listening on 127.0.0.1:4242",
        "listening on 127.0.0.1:4242 ",
        "listening on 127.0.0.1:PORT",
        "listening on 127.0.0.1:65536",
        "listening on 127.0.0.1",
        "listening on :4242",
        "pylog-broker: warning: listening on 127.0.0.1:4242",
        "",
    ],
)
def test_anything_but_the_exact_line_is_not_a_listening_line(line: str) -> None:
    assert parse_listening_line(line) is None


def test_listening_line_round_trips() -> None:
    assert parse_listening_line(listening_line("10.0.0.1:19092") + "\n") == "10.0.0.1:19092"


def test_start_command_runs_this_interpreter_with_overrides_in_order() -> None:
    cmd = start_command("/etc/b.properties", [("a", "1"), ("b", "x=y"), ("a", "2")], log_level="INFO")
    assert cmd == [
        sys.executable,
        "-m",
        "broker_runtime",
        "start",
        "--config",
        "/etc/b.properties",
        "--log-level",
        "INFO",
        "--override",
        "a=1",
        "--override",
        "b=x=y",
        "--override",
        "a=2",
    ]
    assert start_command("c", {"k": "v"})[-2:] == ["--override", "k=v"]
    assert "--log-level" not in start_command("c")


def test_error_line_is_one_line() -> None:
    assert error_line("cannot start:\n  log directory /d is in use") == (
        "pylog-broker: cannot start: log directory /d is in use"
    )


def test_startup_failure_cause_is_the_last_error_line_not_a_warning() -> None:
    stderr = (
        "pylog-broker: warning: unknown config key 'x' is ignored\n"
        "2026-11-23 07:00:00,000 DEBUG broker_runtime.cli: the broker cannot start\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "broker_runtime.errors.StorageError: log directory /d is in use by another process\n"
        "pylog-broker: cannot start: log directory /d is in use by another process\n"
    )
    assert startup_failure_cause(stderr) == "cannot start: log directory /d is in use by another process"


def test_startup_failure_cause_without_an_error_line_is_the_last_line() -> None:
    crash = "Traceback (most recent call last):\n  File ...\nImportError: no module named x\n\n"
    assert startup_failure_cause(crash) == "ImportError: no module named x"
    assert startup_failure_cause("pylog-broker: warning: w\n") == "pylog-broker: warning: w"
    assert startup_failure_cause("  \n") is None


def test_is_error_line() -> None:
    assert is_error_line("pylog-broker: cannot start: port in use")
    assert not is_error_line("pylog-broker: warning: unknown config key 'x' is ignored")
    assert not is_error_line("2026-11-23 07:00:00,000 ERROR x: pylog-broker: no")
