"""Process helpers shared by tests that start and stop brokers."""

from __future__ import annotations

from pathlib import Path

__all__ = ["process_state", "running"]


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
