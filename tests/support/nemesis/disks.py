"""Disks of their own for a local cluster's nodes: each node's log dir on a small tmpfs, which the nemesis fills.

Layout (made by :class:`Disks` on entry, before the cluster starts; unmounted on exit, also after a failure,
once the cluster's processes are gone)::

    <data_dir>/kafka-logs/node-<i>     tmpfs of SIZE bytes (memory is only used for what is written)

Filling (:meth:`Disks.fill`): the tmpfs is remounted with its size limit at what it holds now plus ``slack``
bytes (``mount -o remount,size=...``; the kernel refuses a limit under what is used, so this is as full as a
file system can be made without writing a filler file), and the node's next writes fail with ENOSPC, as on a
disk that ran full. :meth:`Disks.free` puts the limit back. A remount changes the file system itself, so a node
running in a mount namespace of its own (``ip netns exec`` makes one) sees it too.

Requires root (or CAP_SYS_ADMIN) and the ``mount`` command; :func:`unavailable` says why not when either is
missing. Threading: one thread.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from broker_runtime.launch.layout import CLUSTER_DIR

__all__ = ["SIZE", "Disks", "unavailable"]

#: Each node's tmpfs: room for a long soak's data (the nemesis workloads write a few MB a minute).
SIZE = 512 * 1024 * 1024
#: What a filled disk still takes: less than one produce request of the workloads.
SLACK = 16 * 1024


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30)


def _mount(path: Path, size: int, *, remount: bool = False) -> None:
    options = f"remount,size={size}" if remount else f"size={size},mode=0755"
    args = (
        ["mount", "-o", options, str(path)]
        if remount
        else ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)]
    )
    result = _run(*args)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")


def unavailable() -> str | None:
    """Why this machine cannot mount a tmpfs (None when it can): tried once, mounted and unmounted at once."""
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "no 'mount'/'umount' command on PATH"
    with tempfile.TemporaryDirectory(prefix="pylog-tmpfs-probe-") as probe:
        result = _run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe)
        if result.returncode != 0:
            return f"cannot mount a tmpfs: {result.stderr.strip() or result.returncode}"
        _run("umount", probe)
    return None


def used_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


class Disks:
    """A tmpfs per node under ``data_dir``'s cluster directory; a context manager (see the module docstring)."""

    def __init__(self, data_dir: Path, nodes: int, size: int = SIZE) -> None:
        self.size = size
        self.paths = [Path(data_dir) / CLUSTER_DIR / f"node-{i}" for i in range(nodes)]
        self._mounted: list[Path] = []
        self.full: set[int] = set()

    def __enter__(self) -> Disks:
        try:
            for path in self.paths:
                path.mkdir(parents=True, exist_ok=True)
                _mount(path, self.size)
                self._mounted.append(path)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        errors = []
        for path in reversed(self._mounted):
            result = _run("umount", str(path))
            if result.returncode != 0:  # a process still in it: lazily, so no mount outlives the test run
                result = _run("umount", "-l", str(path))
            if result.returncode != 0:
                errors.append(f"umount {path}: {result.stderr.strip()}")
        self._mounted.clear()
        if errors and not any(exc):
            raise RuntimeError("; ".join(errors))

    def fill(self, node: int, slack: int = SLACK) -> int:
        """Limit node ``node``'s tmpfs to what it holds plus ``slack`` bytes; returns the new limit."""
        path = self.paths[node]
        limit = used_bytes(path) + slack
        _mount(path, limit, remount=True)
        self.full.add(node)
        return limit

    def free(self, node: int) -> None:
        """Give node ``node``'s tmpfs its whole size again."""
        _mount(self.paths[node], self.size, remount=True)
        self.full.discard(node)
