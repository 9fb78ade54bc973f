"""Durable file replacement and inter-process file locks, shared by every package (like
:mod:`broker_runtime.errors`).

:func:`write_atomically` is the project's one way to replace a small file so that a crash at any point leaves
either the old or the new content, never a mix: the data goes to a temporary file in the same directory
(``<name>.<pid>.tmp``, so two processes replacing the same file never write into each other's temporary file),
is fsynced, renamed over the target, and then the directory is fsynced so the rename itself is durable.
Temporary files left by a crash end in ``.tmp``; storage removes such strays when it loads a partition.

:func:`lock_exclusive` takes an exclusive ``flock`` with a bounded wait (None when the wait runs out: the caller
says who holds it and why that matters); :func:`lock_held` tells whether some process holds a lock, without
waiting (a shared probe lock taken and dropped at once). A ``flock`` dies with its process, SIGKILL included, which
is what liveness checks rely on; it is tied to the open file, so two opens in one process conflict too.

No state; thread-safe as far as the file system is (concurrent writers of one path: the last rename wins).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

__all__ = ["fsync_dir", "lock_exclusive", "lock_held", "write_atomically", "write_synced"]


def lock_exclusive(path: str | os.PathLike[str], timeout_s: float, poll_s: float = 0.002) -> int | None:
    """Open (creating) ``path`` and take an exclusive ``flock``, waiting up to ``timeout_s``; the descriptor that
    holds it (closing it releases the lock), or None when another holder kept it that long."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(poll_s)


def lock_held(path: str | os.PathLike[str]) -> bool:
    """True while some process holds an exclusive ``flock`` on ``path`` (never blocks; False when it is missing)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so renames and new files in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: str | os.PathLike[str], data: bytes) -> None:
    """Create (or overwrite) ``path`` with ``data`` and fsync the file (not its directory: the caller renames it
    into place, then fsyncs the directory)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data``: write a temporary file, fsync it, rename it over ``path``, fsync the dir."""
    target = Path(path)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        write_synced(tmp, data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
