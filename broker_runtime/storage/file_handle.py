"""The one owner of an open file's descriptor in storage: segments (``.log``) and indexes (``.index``,
``.timeindex``) all reach their files through a :class:`FileHandle`.

Lifetime: the descriptor is opened by the constructor and closed when the last reference to the handle goes
(``__del__``), never explicitly. Owners drop their reference on close; a reader that took the handle before
that keeps a valid descriptor (never a recycled number) until it finishes, even after the file was unlinked
(POSIX keeps the inode alive while a descriptor is open).

Modes: writable handles open ``O_RDWR`` (``create=True`` adds ``O_CREAT``, mode 0644); read-only handles open
``O_RDONLY`` and refuse every mutating call with :class:`~broker_runtime.errors.StorageError`, so a reader in
another process (the connector's direct scan) can never write, truncate or fsync the broker's files.

A :class:`FileSlice` is a byte range of a handle, kept for later: a Fetch answer records the batches it
returns as a slice and the connection sends them straight from the page cache (``sendfile``) when it writes the
answer (see :mod:`broker_runtime.server.network`). The slice holds the handle, so the descriptor stays valid
even when retention deletes or the cleaner replaces the segment meanwhile (its bytes are those of the unlinked
inode). The range is not re-validated when sent: the bytes were whole batches below the high watermark (or a
follower's log end offset) when the slice was made, and closed segments never change; only a truncation of
the active segment (a leader demoted and truncated while its answer waits) could shorten the file, and a short
send is then detected by the writer (fewer bytes than :func:`len`), which closes the connection.

Thread-safety: ``pread``/``pwrite`` carry their own position, so concurrent calls on one handle are safe;
mutations must be serialized by the owner (the partition lock).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from broker_runtime.errors import StorageError

__all__ = ["FileHandle", "FileSlice"]


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


class FileSlice:
    """``length`` bytes of ``handle`` from ``position``, to be sent later (``sendfile``) or read (:meth:`read`).

    ``len()`` is the byte count; :meth:`fileno` lets ``asyncio``'s ``loop.sendfile`` use it as its file (it
    changes the descriptor's file position, which no :class:`FileHandle` user relies on: all I/O is positional).
    """

    __slots__ = ("handle", "length", "position")

    def __init__(self, handle: FileHandle, position: int, length: int) -> None:
        self.handle = handle
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    def fileno(self) -> int:
        return self.handle.fd

    def read(self) -> bytes:
        """The slice's bytes (one ``pread``); StorageError when the file got shorter than the slice."""
        data = self.handle.pread(self.length, self.position)
        if len(data) != self.length:
            raise StorageError(
                f"{self.handle.path.name} shrank below byte {self.position + self.length} before its range "
                f"[{self.position}, {self.position + self.length}) was sent ({len(data)} bytes left)"
            )
        return data

    def __repr__(self) -> str:
        return f"FileSlice({self.handle.path.name}, {self.position}, {self.length})"
