"""Where the cluster metadata lives: the one seam between the controller logic and its storage.

:class:`MetadataStore` is what every reader and writer of cluster metadata uses:

* ``read()`` -- the current document (a JSON-shaped dict; see :mod:`broker_runtime.server.cluster` for its
  fields), without locking;
* ``version()`` -- an opaque token that changes whenever the document changes (a cheap check, polled; each
  reader keeps the token it last read at, so several readers may share one store);
* ``update(timeout_s)`` -- a context manager yielding the current document for a read-modify-write; the block's
  changes are written when it ends without an exception, and no other writer runs in between (linearizable).

:class:`FileMetadataStore` is the single-machine implementation: ``<dir>/cluster.json`` written atomically
(``.tmp``, fsync, rename, fsync dir), every update under an exclusive ``flock`` of ``<dir>/cluster.lock``.
Readers need no lock: a rename is atomic, so a reader sees the old or the new document, never a mix. Lock waits
are bounded: a writer stopped (SIGSTOP) while holding the lock makes the others' updates fail with a
:class:`~broker_runtime.errors.WaitTimeoutError` naming the lock, instead of hanging them. A store shared across
hosts (an existing coordination service, or a Raft log as Kafka's KRaft) would implement the same three calls.

Thread-safety: a store object belongs to one thread (the broker's event loop); cross-process safety comes from
the lock and atomic renames.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from broker_runtime.errors import WaitTimeoutError
from broker_runtime.fsutil import lock_exclusive, write_atomically

__all__ = ["CLUSTER_FILE", "CLUSTER_LOCK_FILE", "LOCK_TIMEOUT_S", "FileMetadataStore", "MetadataStore"]

CLUSTER_FILE = "cluster.json"
CLUSTER_LOCK_FILE = "cluster.lock"
#: How long an update waits for the lock before it fails.
LOCK_TIMEOUT_S = 3.0


class MetadataStore(Protocol):
    """See the module docstring."""

    def read(self) -> dict[str, Any]: ...

    def version(self) -> object: ...

    def update(
        self, timeout_s: float = LOCK_TIMEOUT_S
    ) -> contextlib.AbstractContextManager[dict[str, Any]]: ...


class FileMetadataStore:
    """``<dir>/cluster.json`` under ``<dir>/cluster.lock``; see the module docstring."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / CLUSTER_FILE
        self.lock_path = self.dir / CLUSTER_LOCK_FILE

    def version(self) -> object:
        """(inode, mtime, size) of the file: every write is a rename of a new file, so a new inode."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        data: dict[str, Any] = json.loads(text)
        return data

    @contextlib.contextmanager
    def update(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[dict[str, Any]]:
        fd = lock_exclusive(self.lock_path, timeout_s)
        if fd is None:
            raise WaitTimeoutError(
                f"cluster metadata lock {self.lock_path} still held by another broker after {timeout_s:g} s"
            )
        try:
            data = self.read()
            before = json.dumps(data, sort_keys=True)
            yield data
            text = json.dumps(data, indent=1, sort_keys=True)
            if json.dumps(data, sort_keys=True) != before:
                write_atomically(self.path, text.encode("utf-8"))
        finally:
            os.close(fd)  # releases the flock
