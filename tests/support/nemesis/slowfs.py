"""A slow disk for one node: a FUSE passthrough file system whose writes and fsyncs take ``delay`` seconds each
while it is slowed, for the nemesis's ``slow_disk`` fault.

Run as a process of its own (``python -m tests.support.nemesis.slowfs BACKING MOUNTPOINT FLAG``), one per node,
started and stopped by :class:`~.disks.Disks`: every file operation under ``MOUNTPOINT`` is done on the same path
under ``BACKING`` (the node's tmpfs, so a ``disk_full`` fault still fills it; ENOSPC and every other errno pass
through). While the file ``FLAG`` exists it is slow: each ``write``, ``truncate`` and ``fsync`` first sleeps the
number of milliseconds the file holds, as a disk whose queue is long (a signal could not do it: libfuse's loop
holds the main thread in C, where Python's signal handlers never run). Reads are never delayed (the kernel's page cache
answers most of them, as on a real slow disk). Writing is what a broker waits for: pylog's event loop appends
with ``pwrite``, so a slowed node's loop, fetches from its leaders included, runs at the disk's pace.

The kernel does file locking itself (the file system implements no lock operation), so the broker's directory
locks work as on a local disk. Needs ``/dev/fuse``, the right to mount (root) and libfuse 2 (``libfuse.so.2``,
Debian's ``libfuse2``) for the ``fusepy`` binding; :func:`unavailable` says which is missing.

Threading: fusepy serves each request on a thread of its own; each reads the flag file itself.
"""

from __future__ import annotations

import ctypes.util
import errno
import importlib.util
import os
import sys
import time
from typing import Any

from tests.support import apt

__all__ = ["APT_PACKAGE", "install_libfuse", "unavailable"]

#: Debian's package of ``libfuse.so.2``, which fusepy loads.
APT_PACKAGE = "libfuse2"


def unavailable() -> str | None:
    """Why this machine cannot run the slow file system (None when it can)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (the kernel's FUSE device) in this machine"
    if importlib.util.find_spec("fuse") is None:
        return "the Python package fusepy is not installed (pip install 'pylog[test]')"
    if ctypes.util.find_library("fuse") is None:
        return "libfuse 2 is not installed (libfuse.so.2; Debian/Ubuntu: apt-get install libfuse2)"
    if os.geteuid() != 0:
        return "mounting a FUSE file system here needs root"
    return None


def install_libfuse() -> apt.Missing | None:
    """Install libfuse 2 with apt-get when it is missing (:func:`tests.support.apt.install`); None when it is
    there afterwards, else one line saying why not."""
    return apt.install(
        (APT_PACKAGE,),
        "libfuse 2 (libfuse.so.2, which fusepy loads)",
        lambda: ctypes.util.find_library("fuse") is not None,
    )


def _passthrough(backing: str, flag: str) -> Any:
    from fuse import FuseOSError, Operations  # only where the file system runs (needs libfuse.so.2)

    class SlowPassthrough(Operations):  # type: ignore[misc]
        def _path(self, path: str) -> str:
            return os.path.join(backing, path.lstrip("/"))

        def _wait(self) -> None:
            try:
                with open(flag, "rb") as f:
                    delay_ms = int(f.read() or b"0")
            except (OSError, ValueError):
                return
            time.sleep(delay_ms / 1000)

        def __call__(self, op: str, path: str, *args: Any) -> Any:
            try:
                return super().__call__(op, path, *args)
            except OSError as exc:
                raise FuseOSError(exc.errno or errno.EIO) from None

        def access(self, path: str, mode: int) -> None:
            if not os.access(self._path(path), mode):
                raise FuseOSError(errno.EACCES)

        def chmod(self, path: str, mode: int) -> None:
            os.chmod(self._path(path), mode)

        def chown(self, path: str, uid: int, gid: int) -> None:
            os.chown(self._path(path), uid, gid)

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.lstat(self._path(path))
            keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid")
            return {key: getattr(st, key) for key in keys}

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(self._path(path))]

        def readlink(self, path: str) -> str:
            return os.readlink(self._path(path))

        def mknod(self, path: str, mode: int, dev: int) -> None:
            os.mknod(self._path(path), mode, dev)

        def mkdir(self, path: str, mode: int) -> None:
            os.mkdir(self._path(path), mode)

        def rmdir(self, path: str) -> None:
            os.rmdir(self._path(path))

        def statfs(self, path: str) -> dict[str, int]:
            st = os.statvfs(self._path(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag")
            return {key: getattr(st, key) for key in (*keys, "f_frsize", "f_namemax")}

        def unlink(self, path: str) -> None:
            os.unlink(self._path(path))

        def symlink(self, name: str, target: str) -> None:
            os.symlink(target, self._path(name))

        def rename(self, old: str, new: str) -> None:
            os.rename(self._path(old), self._path(new))

        def link(self, target: str, name: str) -> None:
            os.link(self._path(name), self._path(target))

        def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
            os.utime(self._path(path), times)

        def open(self, path: str, flags: int) -> int:
            return os.open(self._path(path), flags)

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            return os.open(self._path(path), os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)

        def read(self, path: str, length: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, length, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            self._wait()
            return os.pwrite(fh, data, offset)

        def truncate(self, path: str, length: int, fh: int | None = None) -> None:
            self._wait()
            if fh is None:
                os.truncate(self._path(path), length)
            else:
                os.ftruncate(fh, length)

        def flush(self, path: str, fh: int) -> None:
            return None

        def release(self, path: str, fh: int) -> None:
            os.close(fh)

        def fsync(self, path: str, datasync: int, fh: int) -> None:
            self._wait()
            if datasync:
                os.fdatasync(fh)
            else:
                os.fsync(fh)

        def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
            self._wait()

    return SlowPassthrough()


def main(argv: list[str]) -> int:
    backing, mountpoint, flag = argv
    from fuse import FUSE

    operations = _passthrough(os.path.abspath(backing), os.path.abspath(flag))
    FUSE(operations, mountpoint, foreground=True, nothreads=False, allow_other=True, fsname="pylog-slowfs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
