"""A broker that cannot start says why in ONE line (real processes).

``pylog-broker start`` / ``cluster`` print one ``pylog-broker: CAUSE`` line on stderr and exit non-zero (the
traceback only at DEBUG level); ``broker_process`` and the embedded broker raise an error whose first line
states the same cause.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from broker_runtime.errors import BrokerStartError, EmbeddedBrokerError, PylogError
from broker_runtime.launch import (
    broker_log_dir,
    broker_process,
    cluster_process,
    embedded_broker_status,
    ensure_embedded_broker,
)
from broker_runtime.launch.embedded import DISCOVERY_FILE
from tests.support.launch import pylog_broker

pytestmark = pytest.mark.timeout(120)


def _start(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pylog_broker("start", "--config", str(config), *args),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("pylog-broker: ")
    return lines[0]


def test_log_dir_in_use_is_one_line(tmp_path: Path) -> None:
    with broker_process(tmp_path):
        result = _start(tmp_path / "broker.properties")  # the same log.dirs, another port 0
    assert result.returncode != 0 and result.stdout == ""
    line = _one_line(result.stderr)
    assert str(broker_log_dir(tmp_path)) in line and "in use" in line


def test_log_dir_in_use_shows_the_traceback_at_debug(tmp_path: Path) -> None:
    with broker_process(tmp_path):
        result = _start(tmp_path / "broker.properties", "--log-level", "DEBUG")
    assert result.returncode != 0
    assert "Traceback" in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("pylog-broker: ") and "in use" in last


@pytest.mark.parametrize(("key", "value"), [("num.partitions", "abc"), ("log.segment.bytes", "-1")])
def test_bad_config_value_is_one_line_naming_the_key(tmp_path: Path, key: str, value: str) -> None:
    config = tmp_path / "b.properties"
    config.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path / 'logs'}\n")
    result = _start(config, "--override", f"{key}={value}")
    assert result.returncode == 2
    assert key in _one_line(result.stderr)


def test_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "b.properties"
        config.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={tmp_path / 'logs'}\n")
        result = _start(config)
    assert result.returncode != 0
    line = _one_line(result.stderr)
    assert str(port) in line and "in use" in line


def test_cluster_command_with_a_node_log_dir_in_use_is_one_line(tmp_path: Path) -> None:
    with cluster_process(tmp_path, nodes=1):
        result = subprocess.run(
            pylog_broker("cluster", "--nodes", "2", "-c", str(tmp_path / "cluster.properties")),
            capture_output=True,
            text=True,
            timeout=90,
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode != 0 and result.stdout == ""
    line = _one_line(result.stderr)
    assert line.startswith("pylog-broker: node 0 did not start: ")
    assert str(tmp_path / "kafka-logs" / "node-0") in line and "in use" in line


def test_broker_process_error_states_the_cause_first(tmp_path: Path) -> None:
    overrides = {"log.dirs": str(broker_log_dir(tmp_path / "a"))}
    with (
        broker_process(tmp_path / "a"),
        pytest.raises(BrokerStartError) as failure,
        broker_process(tmp_path / "b", overrides=overrides),
    ):
        pass
    first = str(failure.value).splitlines()[0]
    assert "before listening" in first and "in use" in first
    assert str(broker_log_dir(tmp_path / "a")) in first
    assert isinstance(failure.value, PylogError)


def test_embedded_broker_error_states_the_cause_first(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # broker_process holds <data_dir>/logs, which the embedded broker needs too.
    with broker_process(data_dir), pytest.raises(EmbeddedBrokerError) as failure:
        ensure_embedded_broker(data_dir, timeout_s=60)
    first = str(failure.value).splitlines()[0]
    assert first.startswith(f"the embedded broker of {data_dir} could not start: ")
    assert str(broker_log_dir(data_dir)) in first and "in use" in first
    assert embedded_broker_status(data_dir) is None and not (data_dir / DISCOVERY_FILE).exists()
