"""``pylog-broker cluster``: N child brokers, their listening lines, the bootstrap line, clean stop on SIGTERM;
and ``broker_process(..., nodes=N)``."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from broker_runtime.launch import broker_process, create_topic
from tests.replication.conftest import metadata, wait_for

pytestmark = pytest.mark.timeout(90)


def _read_lines(proc: subprocess.Popen[str], n: int, timeout_s: float) -> list[str]:
    lines: list[str] = []

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if len(lines) == n:
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return lines


def test_cluster_command_prints_nodes_and_bootstrap_and_stops_cleanly(tmp_path: Path) -> None:
    config = tmp_path / "broker.properties"
    config.write_text(f"log.dirs={tmp_path / 'logs'}\nlisteners=PLAINTEXT://127.0.0.1:9092\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_runtime", "cluster", "--nodes", "2", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = _read_lines(proc, 3, 30)
        assert len(lines) == 3, lines
        assert all(line.startswith("listening on 127.0.0.1:") for line in lines[:2])
        addresses = [line.removeprefix("listening on ") for line in lines[:2]]
        assert lines[2] == f"bootstrap servers: {','.join(addresses)}"
        md = metadata(addresses[1])
        assert sorted(f"{b['Host']}:{b['Port']}" for b in md["Brokers"]) == sorted(addresses)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    for node in (0, 1):
        assert (tmp_path / "logs" / f"node-{node}" / ".kafka_cleanshutdown").exists()
    assert (tmp_path / "logs" / "cluster.json").exists()


def test_embedded_broker_with_nodes_yields_the_bootstrap_list(tmp_path: Path) -> None:
    with broker_process(tmp_path, nodes=2) as bootstrap:
        assert len(bootstrap.split(",")) == 2
        create_topic(bootstrap, "two", 2, replication_factor=2)
        wait_for(
            lambda: (
                [
                    p["ReplicaNodes"]
                    for p in metadata(bootstrap.split(",")[1], ["two"])["Topics"][0]["Partitions"]
                ]
                == [[0, 1], [1, 0]]
            ),
            what="assignment visible on node 1",
        )
