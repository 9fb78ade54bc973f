"""Durable file replacement, shared by every package (like :mod:`broker_runtime.errors`).

:func:`write_atomically` is the project's one way to replace a small file so that a crash at any point leaves
either the old or the new content, never a mix: the data goes to a temporary file in the same directory
(``<name>.<pid>.tmp``, so two processes replacing the same file never write into each other's temporary file),
is fsynced, renamed over the target, and then the directory is fsynced so the rename itself is durable.
Temporary files left by a crash end in ``.tmp``; storage removes such strays when it loads a partition.

No state; thread-safe as far as the file system is (concurrent writers of one path: the last rename wins).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "write_atomically"]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so renames and new files in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data``: write a temporary file, fsync it, rename it over ``path``, fsync the dir."""
    target = Path(path)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
