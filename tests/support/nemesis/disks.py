"""Disks of their own for a local cluster's nodes: each node's log dir on a tmpfs of its own, which the nemesis
fills (``disk_full``), seen through a FUSE passthrough that the nemesis slows (``slow_disk``, :mod:`.slowfs`).

Layout (made by :class:`Disks` on entry, before the cluster starts; unmounted on exit, also after a failure,
once the cluster's processes are gone)::

    <data_dir>/disks/node-<i>          tmpfs of SIZE bytes (memory is only used for what is written)
    <data_dir>/disks/node-<i>.slow     present while node i's disk is slow: the delay per write, in ms
    <data_dir>/kafka-logs/node-<i>     node i's log dir: the slow file system over disks/node-<i>

Without FUSE (``slow=False``, or :func:`.slowfs.unavailable`) the tmpfs is mounted at the log dir itself and
only ``disk_full`` can be done.

Filling (:meth:`Disks.fill`): the tmpfs is remounted with its size limit at what it holds now plus ``slack``
bytes (``mount -o remount,size=...``; the kernel refuses a limit under what is used, so this is as full as a
file system can be made without writing a filler file), and the node's next writes fail with ENOSPC, as on a
disk that ran full. :meth:`Disks.free` puts the limit back. A remount changes the file system itself, so a node
running in a mount namespace of its own (``ip netns exec`` makes one) sees it too.

Slowing (:meth:`Disks.slow`): the flag file is written; every write, truncate and fsync of the node then takes
that long more (:mod:`.slowfs`). :meth:`Disks.fast` removes it.

Requires root (or CAP_SYS_ADMIN) and the ``mount`` command; :func:`unavailable` says why not when either is
missing. Threading: one thread.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
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


_REPOSITORY = Path(__file__).resolve().parents[3]
#: How long a slow file system may take to be mounted.
_MOUNT_WAIT_S = 15.0


class Disks:
    """A tmpfs per node (under a slow file system when ``slow``); a context manager (see the module docstring)."""

    def __init__(self, data_dir: Path, nodes: int, size: int = SIZE, *, slow: bool = True) -> None:
        self.size = size
        self.slowable = slow
        self.log_dirs = [Path(data_dir) / CLUSTER_DIR / f"node-{i}" for i in range(nodes)]
        #: The tmpfs of each node (its log dir itself when not slowable).
        self.paths = [Path(data_dir) / "disks" / f"node-{i}" for i in range(nodes)] if slow else self.log_dirs
        self._mounted: list[Path] = []
        self._daemons: list[subprocess.Popen[bytes]] = []
        self.full: set[int] = set()

    def _flag(self, node: int) -> Path:
        return self.paths[node].with_name(f"node-{node}.slow")

    def __enter__(self) -> Disks:
        try:
            for node, path in enumerate(self.paths):
                path.mkdir(parents=True, exist_ok=True)
                _mount(path, self.size)
                self._mounted.append(path)
                if self.slowable:
                    self._start_slowfs(node)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start_slowfs(self, node: int) -> None:
        log_dir = self.log_dirs[node]
        log_dir.mkdir(parents=True, exist_ok=True)
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.nemesis.slowfs",
                str(self.paths[node]),
                str(log_dir),
                str(self._flag(node)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=_REPOSITORY,
        )
        self._daemons.append(daemon)
        self._mounted.append(log_dir)
        deadline = time.monotonic() + _MOUNT_WAIT_S
        while not os.path.ismount(log_dir):
            if daemon.poll() is not None or time.monotonic() > deadline:
                daemon.kill()
                _, err = daemon.communicate()
                raise RuntimeError(
                    f"the slow file system over {self.paths[node]} did not mount at {log_dir}: "
                    f"{err.decode(errors='replace').strip()[-500:] or 'no error output'}"
                )
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        errors = []
        for path in reversed(self._mounted):  # each slow file system before the tmpfs under it
            result = _run("umount", str(path))
            if result.returncode != 0:  # a process still in it: lazily, so no mount outlives the test run
                result = _run("umount", "-l", str(path))
            if result.returncode != 0:
                errors.append(f"umount {path}: {result.stderr.strip()}")
        self._mounted.clear()
        for daemon in self._daemons:  # unmounted: libfuse's loop ends; killed if it did not
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(10)
            if daemon.stderr is not None:
                daemon.stderr.close()
        self._daemons.clear()
        if errors and not any(exc):
            raise RuntimeError("; ".join(errors))

    def slow(self, node: int, delay_ms: int) -> None:
        """Make every write, truncate and fsync of node ``node``'s disk take ``delay_ms`` more."""
        if not self.slowable:
            raise RuntimeError("these disks were made without the slow file system (slow=False)")
        self._flag(node).write_text(str(delay_ms), encoding="ascii")

    def fast(self, node: int) -> None:
        self._flag(node).unlink(missing_ok=True)

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
