"""Durable file replacement and inter-process file locks, shared by every package (like
:mod:`broker_runtime.errors`).

:func:`write_atomically` is the project's one way to replace a small file so that a crash at any point leaves
either the old or the new content, never a mix: the data goes to a temporary file in the same directory
(``<name>.<pid>.tmp``, so two processes replacing the same file never write into each other's temporary file),
is fsynced, renamed over the target, and then the directory is fsynced so the rename itself is durable.
Temporary files left by a crash end in ``.tmp``; storage removes such strays when it loads a partition.

:class:`FileLock` is the project's one inter-process lock (an exclusive ``flock`` of a lock file, with a bounded,
unbounded or no wait, and a probe telling whether some process holds it). A ``flock`` dies with its process, SIGKILL
included, which is what liveness checks rely on; it is tied to the open file, so two opens in one process conflict
too. Both are single-host mechanisms: they hold between the processes of one machine only.

:data:`LOG_DIR_FAILURE_FILE` is the one fact the broker and its launchers share about a failed log directory: a
broker halting because a write the disk refused (:mod:`broker_runtime.server.node.broker`) leaves it in each log
directory, as text: its CRITICAL line, then ``errno=<number> (<name>)``; the next start of a broker on that
directory removes it (:mod:`broker_runtime.storage.log_manager`); the embedded broker's launcher
(:mod:`broker_runtime.launch.embedded`) refuses to start a broker while it is there, rather than restarting one
that halts again. It is created empty first (an inode, no data block: that still works on a full disk), then
written (which may fail there: an empty file still says "failed").

``write_atomically`` has no state and is thread-safe as far as the file system is (concurrent writers of one path:
the last rename wins); a :class:`FileLock` object belongs to one thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path

__all__ = [
    "LOG_DIR_FAILURE_FILE",
    "FileLock",
    "fsync_dir",
    "read_log_dir_failure",
    "record_log_dir_failure",
    "write_atomically",
    "write_synced",
]

#: In a log directory: the broker halted because a write there failed (see the module docstring).
LOG_DIR_FAILURE_FILE = "log-dir-failure"


class FileLock:
    """An exclusive ``flock`` on one lock file of this host: the project's one inter-process lock.

    ``acquire(timeout_s)`` opens (creating) the file and takes the lock: ``timeout_s`` 0 tries once, a positive
    value retries every ``poll_s`` until it runs out, None waits as long as it takes. It answers False when
    another holder kept the lock (the caller says who holds it and why that matters); any other failure (the
    file cannot be opened, the file system has no ``flock``) raises the ``OSError``. ``release()`` drops it
    (idempotent); as a context manager the lock is waited for without bound and released at the end.
    :meth:`held` probes whether some process holds it, without waiting.

    The lock dies with the process that holds it (the kernel drops a ``flock`` on exit, SIGKILL included) and is
    tied to the open file, so two :class:`FileLock` of one path in one process conflict too. It only works
    between processes of one host (``flock`` on a local file system); a multi-host mechanism needs another
    primitive. One object belongs to one thread.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def locked(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def acquire(self, timeout_s: float | None = 0.0, *, poll_s: float = 0.002) -> bool:
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already locked by this FileLock")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            if deadline is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() >= deadline:
                            os.close(fd)
                            return False
                        time.sleep(poll_s)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the descriptor drops the flock

    def __enter__(self) -> FileLock:
        self.acquire(None)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @staticmethod
    def held(path: str | os.PathLike[str]) -> bool:
        """True while some process holds the lock of ``path`` (never blocks; False when the file is missing):
        a shared lock taken and dropped at once."""
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


def write_synced(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> None:
    """Create (or overwrite) ``path`` with ``data`` and fsync the file (not its directory: the caller renames it
    into place, then fsyncs the directory). ``mode`` (e.g. ``0o600`` for a file holding secrets) is the file's
    permission bits from its creation on, never a chmod after the data is in it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
    with open(fd, "wb") as f:
        if mode is not None:
            os.fchmod(f.fileno(), mode)  # an older file of that name kept its own bits
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_atomically(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data``: write a temporary file, fsync it, rename it over ``path``, fsync the dir.
    ``mode``: as :func:`write_synced` (the temporary file has it before it holds the data)."""
    target = Path(path)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        write_synced(tmp, data, mode)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def record_log_dir_failure(
    log_dir: str | os.PathLike[str], critical_line: str, errno_value: int | None
) -> None:
    """Leave :data:`LOG_DIR_FAILURE_FILE` in ``log_dir``: created empty, then ``critical_line`` and the errno
    written and fsynced. Raises OSError when even the empty file cannot be created; a failed write of the text
    (a full disk) leaves the empty file and raises too (the caller says so in its log)."""
    path = Path(log_dir) / LOG_DIR_FAILURE_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        name = errno_name(errno_value)
        os.write(fd, f"{critical_line}\nerrno={errno_value} ({name})\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def errno_name(errno_value: int | None) -> str:
    """``"ENOSPC"`` for 28; ``"unknown"`` for None or a number without a name."""
    return errno.errorcode.get(errno_value, "unknown") if errno_value is not None else "unknown"


def read_log_dir_failure(log_dir: str | os.PathLike[str]) -> str | None:
    """The text of ``log_dir``'s :data:`LOG_DIR_FAILURE_FILE` ("" when the broker could not write it), or None
    when there is none."""
    try:
        return (Path(log_dir) / LOG_DIR_FAILURE_FILE).read_text(errors="replace")
    except FileNotFoundError:
        return None
