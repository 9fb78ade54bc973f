"""The one owner of an open file's descriptor in storage: segments (``.log``) and indexes (``.index``,
``.timeindex``) all reach their files through a :class:`FileHandle`.

Lifetime: the descriptor is opened by the constructor and closed when the last reference to the handle goes
(``__del__``), never explicitly. Owners drop their reference on close; a reader that took the handle before
that keeps a valid descriptor (never a recycled number) until it finishes, even after the file was unlinked
(POSIX keeps the inode alive while a descriptor is open).

Modes: writable handles open ``O_RDWR`` (``create=True`` adds ``O_CREAT``, mode 0644); read-only handles open
``O_RDONLY`` and refuse every mutating call with :class:`~broker_runtime.errors.StorageError`, so a reader in
another process (the connector's direct scan) can never write, truncate or fsync the broker's files.

Thread-safety: ``pread``/``pwrite`` carry their own position, so concurrent calls on one handle are safe;
mutations must be serialized by the owner (the partition lock).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from broker_runtime.errors import StorageError

__all__ = ["FileHandle"]


class FileHandle:
    """An OS file descriptor on ``path``, closed when the last reference goes."""

    __slots__ = ("fd", "path", "writable")

    def __init__(self, path: Path, *, writable: bool, create: bool = False) -> None:
        self.path = path
        self.writable = writable
        flags = (os.O_RDWR | (os.O_CREAT if create else 0)) if writable else os.O_RDONLY
        self.fd = os.open(path, flags, 0o644)

    def __del__(self) -> None:
        fd = getattr(self, "fd", -1)  # unset when os.open failed in __init__
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def size(self) -> int:
        """Current length of the file (``fstat``; the file may keep growing under a read-only handle)."""
        return os.fstat(self.fd).st_size

    def pread(self, size: int, position: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (fewer at the end of the file); one system call."""
        return os.pread(self.fd, size, position) if size > 0 else b""

    def pwrite_all(self, data: bytes | bytearray | memoryview, position: int) -> None:
        """Write all of ``data`` at ``position``."""
        self._check_writable("write")
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self.fd, view[written:], position + written)

    def truncate(self, size: int) -> None:
        """Set the file length to ``size`` (grows with zeros or cuts)."""
        self._check_writable("truncate")
        os.ftruncate(self.fd, size)

    def fsync(self) -> None:
        self._check_writable("fsync")
        os.fsync(self.fd)

    def _check_writable(self, what: str) -> None:
        if not self.writable:
            raise StorageError(f"cannot {what} {self.path.name}: opened read-only")

    def __repr__(self) -> str:
        return f"FileHandle({self.path.name}, fd={getattr(self, 'fd', -1)}, writable={self.writable})"
