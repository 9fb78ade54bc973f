"""Process helpers shared by tests that start and stop brokers."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

__all__ = ["broker_pid", "kill_broker", "process_state", "running"]


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` in ``/proc/<pid>/stat`` (R, S, T, Z, ...); None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[0]


def running(pid: int) -> bool:
    """True while ``pid`` runs (a zombie left for a non-reaping init does not count)."""
    return process_state(pid) not in (None, "Z", "X")


def broker_pid(data_dir: Path) -> int:
    """The pid of the broker child started on ``data_dir`` (its command line names its properties file)."""
    needle = str(data_dir / "broker.properties").encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if needle in cmdline:
                return int(entry)
    raise AssertionError(f"no broker process for {data_dir}")


def kill_broker(data_dir: Path) -> None:
    """SIGKILL the broker child of ``data_dir`` and wait (up to 10 s) until it is gone."""
    pid = broker_pid(data_dir)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
