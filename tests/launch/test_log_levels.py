"""Every launcher finds its broker at every log level (real processes).

At INFO and DEBUG the broker logs ``broker 0 listening on HOST:PORT, log dirs [...]`` to stderr; only the exact
``listening on HOST:PORT`` line it prints on stdout may be taken for its address.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.launch import (
    broker_process,
    create_topic,
    embedded_broker_status,
    ensure_embedded_broker,
    stop_embedded_broker,
)
from broker_runtime.launch.command import parse_listening_line
from broker_runtime.launch.embedded import LOG_FILE
from tests.support.launch import pylog_broker

pytestmark = pytest.mark.timeout(120)

LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def _serves(bootstrap: str) -> bool:
    with KafkaClient(bootstrap) as client:
        return bool(client.metadata([]).brokers)


@pytest.mark.parametrize("level", LEVELS)
def test_broker_process_at_every_log_level(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYLOG_LOG_LEVEL", level)
    with broker_process(tmp_path) as bootstrap:
        assert parse_listening_line(f"listening on {bootstrap}") == bootstrap
        create_topic(bootstrap, "t", 1)
        assert _serves(bootstrap)


@pytest.mark.parametrize("level", LEVELS)
def test_embedded_broker_at_every_log_level(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYLOG_LOG_LEVEL", level)
    data_dir = tmp_path / "data"
    try:
        bootstrap = ensure_embedded_broker(data_dir)
        info = embedded_broker_status(data_dir)
        assert info is not None and info["bootstrap"] == bootstrap
        assert _serves(bootstrap)
        if level in ("DEBUG", "INFO"):  # the INFO line that once broke the start is there
            assert f"listening on {bootstrap}," in (data_dir / LOG_FILE).read_text()
        # `pylog-broker stop` finds it (a failed start used to leave a broker it could not find).
        stop = subprocess.run(
            pylog_broker("stop", "--data-dir", str(data_dir)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout.startswith(f"stopped the broker of {data_dir}")
        assert embedded_broker_status(data_dir) is None
    finally:
        stop_embedded_broker(data_dir, timeout_s=5)


@pytest.mark.parametrize("level", ["DEBUG", "INFO"])
def test_cluster_command_at_verbose_log_levels(level: str, tmp_path: Path) -> None:
    config = tmp_path / "broker.properties"
    config.write_text(f"log.dirs={tmp_path / 'logs'}\n")
    proc = subprocess.Popen(
        pylog_broker("cluster", "--nodes", "2", "-c", str(config), "--log-level", level),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        addresses = [parse_listening_line(line) for line in lines[:2]]
        assert None not in addresses, lines
        assert lines[2] == f"bootstrap servers: {','.join(str(a) for a in addresses)}"
        proc.terminate()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
