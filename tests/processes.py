"""Process helpers shared by tests that start and stop brokers."""

from __future__ import annotations

from pathlib import Path

__all__ = ["running"]


def running(pid: int) -> bool:
    """True while ``pid`` runs (a zombie left for a non-reaping init does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
