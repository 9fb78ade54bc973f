"""Where the cluster metadata and the brokers' sessions live: the one seam between the controller and its
storage, and where a multi-host metadata store would plug in.

:class:`MetadataStore` is everything the controller and the brokers need from it:

* ``read()`` -- the current :class:`~.metadata.ClusterMetadata`, without locking (a fresh object per call);
* ``version()`` -- an opaque token that changes whenever the metadata changes (a cheap check, polled; each reader
  keeps the token it last read at, so several readers may share one store);
* ``update(timeout_s)`` -- a context manager yielding the current metadata for a read-modify-write; the block's
  changes are written when it ends without an exception, and no other update runs in between (linearizable);
  the topics of a version-1 document get their topic ids in the first update (see :mod:`.metadata`).
  Only the controller's operations (:mod:`.cluster_control`, :mod:`.replication_control`) call it;
* ``session(node_id)`` -- this broker's side of its liveness: a :class:`Session` it acquires at start, beats
  every ``broker.heartbeat.interval.ms`` and releases at the end (Kafka's broker heartbeats);
* ``broker_alive(node_id, broker_epoch, session_timeout_ms, now)`` -- the controller's side: (live, why not) of a
  registered broker (Kafka's ``BrokerHeartbeatManager``); ``now`` on :meth:`MetadataStore.clock`, the clock the
  heartbeats are stamped with.

:class:`SingleHostMetadataStore` is the implementation for the brokers of ONE machine: ``<dir>/cluster.json``
written atomically (``.tmp``, fsync, rename, fsync dir), every update under an exclusive ``flock`` of
``<dir>/cluster.lock`` (:class:`~broker_runtime.fsutil.FileLock`), and the liveness files of
:mod:`.liveness` (a per-broker ``flock`` that dies with its process, heartbeats stamped with
``time.monotonic()``, a clock only the processes of one machine share). Readers need no lock: a rename is atomic,
so a reader sees the old or the new document, never a mix. Lock waits are bounded: a writer stopped (SIGSTOP)
while holding the lock makes the others' updates fail with a :class:`~broker_runtime.errors.WaitTimeoutError`
naming the lock, instead of hanging them. A store shared across hosts (a coordination service, or a Raft log as
Kafka's KRaft) would implement the same calls: an update as a conditional write of the next version, sessions as
heartbeat requests with the store's own clock.

Thread-safety: a store object belongs to one thread (the broker's event loop); cross-process safety comes from
the lock and atomic renames.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from broker_runtime.controller.liveness import SingleHostSession, session_state
from broker_runtime.controller.metadata import ClusterMetadata
from broker_runtime.controller.replication_control import assign_missing_topic_ids
from broker_runtime.errors import WaitTimeoutError
from broker_runtime.fsutil import FileLock, write_atomically

__all__ = [
    "CLUSTER_FILE",
    "CLUSTER_LOCK_FILE",
    "LOCK_TIMEOUT_S",
    "MetadataStore",
    "Session",
    "SingleHostMetadataStore",
]

CLUSTER_FILE = "cluster.json"
CLUSTER_LOCK_FILE = "cluster.lock"
#: How long an update waits for the lock before it fails.
LOCK_TIMEOUT_S = 3.0


class Session(Protocol):
    """A broker's own session (see the module docstring)."""

    node_id: int
    #: The broker epoch of this broker's registration (-1 before it registers).
    broker_epoch: int
    #: :meth:`MetadataStore.clock` of the last successful beat (0 before the first).
    last_beat: float

    def acquire(self) -> None: ...

    def beat(self, now: float | None = None) -> None: ...

    def release(self) -> None: ...


class MetadataStore(Protocol):
    """See the module docstring."""

    def read(self) -> ClusterMetadata: ...

    def version(self) -> object: ...

    def update(
        self, timeout_s: float = LOCK_TIMEOUT_S
    ) -> contextlib.AbstractContextManager[ClusterMetadata]: ...

    def session(self, node_id: int) -> Session: ...

    def broker_alive(
        self, node_id: int, broker_epoch: int, session_timeout_ms: int, now: float
    ) -> tuple[bool, str]: ...

    def clock(self) -> float: ...


class SingleHostMetadataStore:
    """``<dir>/cluster.json`` under ``<dir>/cluster.lock``, sessions in ``<dir>/brokers/``, for the brokers of
    one machine; see the module docstring."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / CLUSTER_FILE
        self.lock_path = self.dir / CLUSTER_LOCK_FILE

    # -- the document ---------------------------------------------------------------------------------------

    def version(self) -> object:
        """(inode, mtime, size) of the file: every write is a rename of a new file, so a new inode."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def read(self) -> ClusterMetadata:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ClusterMetadata()
        return ClusterMetadata.from_json(json.loads(text), self.path)

    @contextlib.contextmanager
    def update(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[ClusterMetadata]:
        lock = FileLock(self.lock_path)
        if not lock.acquire(timeout_s):
            raise WaitTimeoutError(
                f"cluster metadata lock {self.lock_path} still held by another broker after {timeout_s:g} s"
            )
        try:
            metadata = self.read()
            before = metadata.to_json()
            assign_missing_topic_ids(metadata, self.path)  # a version-1 document: upgraded by this write
            yield metadata
            after = metadata.to_json()
            if after != before:
                # 0600: the dynamic broker configs in it may hold a listener key store's password.
                write_atomically(
                    self.path, json.dumps(after, indent=1, sort_keys=True).encode("utf-8"), mode=0o600
                )
        finally:
            lock.release()

    # -- liveness -------------------------------------------------------------------------------------------

    def session(self, node_id: int) -> SingleHostSession:
        return SingleHostSession(self.dir, node_id)

    def broker_alive(
        self, node_id: int, broker_epoch: int, session_timeout_ms: int, now: float
    ) -> tuple[bool, str]:
        return session_state(self.dir, node_id, broker_epoch, session_timeout_ms, now)

    def clock(self) -> float:
        """``time.monotonic()``: shared by every process of one machine (Linux, macOS), not across machines."""
        return time.monotonic()
