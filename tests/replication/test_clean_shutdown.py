"""Ctrl-C of ``pylog-broker cluster`` with followers fetching: every node stops at once, exit 0, and the whole
log has nothing above INFO (a follower whose leader closes the connection on the way down is not a warning)."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_runtime.client import KafkaClient
from tests.server.rawclient import build_batch
from tests.support.cluster import isr, wait_for

pytestmark = pytest.mark.timeout(120)

_CONFIG = Path(__file__).resolve().parents[2] / "conf" / "broker.properties"
_ABOVE_INFO = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback")


def _fully_replicated(bootstrap: str, partition: int) -> bool:
    return isr(bootstrap.split(",")[0], "replicated", partition) == [0, 1, 2]


def test_sigint_of_a_replicating_cluster_exits_0_and_logs_nothing_above_info(tmp_path: Path) -> None:
    log_path = tmp_path / "cluster.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "broker_runtime",
                "cluster",
                "--nodes",
                "3",
                "--config",
                str(_CONFIG),
                "--override",
                "listeners=PLAINTEXT://127.0.0.1:0",
                "--override",
                f"log.dirs={tmp_path / 'logs'}",
                "--log-level",
                "INFO",
            ],
            stdout=subprocess.PIPE,
            stderr=log_file,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # its own process group, so the signal reaches every node as Ctrl-C does
        )
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline().strip() for _ in range(4)]
            assert lines[3].startswith("bootstrap servers: "), (lines, log_path.read_text())
            bootstrap = lines[3].removeprefix("bootstrap servers: ")
            with KafkaClient(bootstrap, request_timeout_ms=20000) as client:
                assert client.admin.create_topics({"replicated": (3, 3)}) == {"replicated": 0}
                for partition in range(3):
                    wait_for(
                        functools.partial(_fully_replicated, bootstrap, partition),
                        what=f"partition {partition} fully replicated",
                    )
                    leader = client.leader_for("replicated", partition)
                    result = client.produce(
                        leader, {("replicated", partition): build_batch(5)}, acks=-1, timeout_ms=20000
                    )
                    assert result is not None and result[("replicated", partition)].error == 0
            time.sleep(1)  # followers are parked in fetches at their leaders
            os.killpg(proc.pid, signal.SIGINT)
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    log = log_path.read_text()
    assert "stopped cleanly" in log
    assert [line for line in log.splitlines() if _ABOVE_INFO.search(line)] == []
