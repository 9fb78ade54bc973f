"""Broker liveness on a single host: sessions kept by heartbeats, and a process lock that dies with its broker
(the liveness half of :class:`~.store.SingleHostMetadataStore`; the controller asks it through the store).

Files, under ``<cluster dir>/brokers/``::

    <id>.lock         held (exclusive ``flock``) by broker <id> from before it registers until its process ends
    <id>.heartbeat    {"broker_epoch": 4, "pid": 1234, "at": 81234.5}  rewritten (tmp + rename) every beat

``at`` is ``time.monotonic()`` of the beat. On Linux (and macOS) that clock is shared by every process of the
machine, so any broker can tell a heartbeat's age without trusting the wall clock.

A broker is **live** for the controller when both hold (Kafka fences a broker whose heartbeats stop for
``broker.session.timeout.ms``; the lock adds what one machine can know for certain):

* its process holds ``<id>.lock``: the kernel drops a ``flock`` the moment a process dies, SIGKILL included, so
  a crashed broker is fenced within one controller tick instead of a whole session timeout;
* its last heartbeat is younger than ``broker.session.timeout.ms`` and carries its registered broker epoch: a
  broker that still exists but does not run (SIGSTOP, a hung event loop) is fenced when its session expires.

Both facts hold only between the processes of one machine (a ``flock`` of a local file, a monotonic clock); a
multi-host store keeps sessions otherwise (heartbeat requests timed by the controller's own clock).

Probing the lock takes a shared lock for an instant (:meth:`~broker_runtime.fsutil.FileLock.held`); a broker that is
starting and finds its lock taken retries for a few seconds, so a probe never keeps a broker from starting.

Thread-safety: :class:`SingleHostSession` belongs to its broker's event-loop thread; :func:`session_state`,
:func:`process_alive` and :func:`read_heartbeat` are stateless.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from broker_runtime.errors import IllegalStateError
from broker_runtime.fsutil import FileLock

__all__ = [
    "BROKERS_DIR",
    "Heartbeat",
    "SingleHostSession",
    "process_alive",
    "read_heartbeat",
    "session_state",
]

BROKERS_DIR = "brokers"
_ACQUIRE_TIMEOUT_S = 10.0


def _lock_path(cluster_dir: Path, node_id: int) -> Path:
    return cluster_dir / BROKERS_DIR / f"{node_id}.lock"


def _heartbeat_path(cluster_dir: Path, node_id: int) -> Path:
    return cluster_dir / BROKERS_DIR / f"{node_id}.heartbeat"


@dataclass(frozen=True)
class Heartbeat:
    broker_epoch: int
    pid: int
    at: float

    def age_s(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self.at


def read_heartbeat(cluster_dir: str | os.PathLike[str], node_id: int) -> Heartbeat | None:
    """The last heartbeat of ``node_id``, or None when it never beat (or the file is unreadable)."""
    try:
        data = json.loads(_heartbeat_path(Path(cluster_dir), node_id).read_text(encoding="utf-8"))
        return Heartbeat(int(data["broker_epoch"]), int(data["pid"]), float(data["at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def process_alive(cluster_dir: str | os.PathLike[str], node_id: int) -> bool:
    """True while some process holds ``node_id``'s lock (see the module docstring)."""
    return FileLock.held(_lock_path(Path(cluster_dir), node_id))


def session_state(
    cluster_dir: str | os.PathLike[str], node_id: int, broker_epoch: int, session_timeout_ms: int, now: float
) -> tuple[bool, str]:
    """(live, why not) of registered broker ``node_id`` of ``broker_epoch`` at ``now`` (``time.monotonic()``);
    see the module docstring."""
    if not process_alive(cluster_dir, node_id):
        return False, "its process is gone"
    beat = read_heartbeat(cluster_dir, node_id)
    if beat is None or beat.broker_epoch != broker_epoch:
        return False, f"no heartbeat of broker epoch {broker_epoch}"
    age_ms = (now - beat.at) * 1000
    if age_ms > session_timeout_ms:
        return False, (
            f"its session expired: last heartbeat {age_ms:.0f} ms ago > broker.session.timeout.ms="
            f"{session_timeout_ms}"
        )
    return True, ""


class SingleHostSession:
    """This broker's side: hold the process lock, beat (see :class:`~.store.Session`)."""

    def __init__(self, cluster_dir: str | os.PathLike[str], node_id: int) -> None:
        self.dir = Path(cluster_dir)
        self.node_id = node_id
        self.broker_epoch = -1
        self._lock = FileLock(_lock_path(self.dir, node_id))
        #: ``time.monotonic()`` of the last successful beat (0 before the first).
        self.last_beat = 0.0

    def acquire(self) -> None:
        """Take the process lock; IllegalStateError when another live process is this node already."""
        (self.dir / BROKERS_DIR).mkdir(parents=True, exist_ok=True)
        if not self._lock.acquire(_ACQUIRE_TIMEOUT_S, poll_s=0.01):
            raise IllegalStateError(
                f"node {self.node_id} of cluster {self.dir} is already running (its lock {self._lock.path} is held "
                "by another process)"
            )

    def beat(self, now: float | None = None) -> None:
        """Write a fresh heartbeat (no fsync: a heartbeat only matters while this process runs); ``now``
        defaults to ``time.monotonic()`` (tests pass their own clock)."""
        now = time.monotonic() if now is None else now
        path = _heartbeat_path(self.dir, self.node_id)
        tmp = path.with_name(f"{path.name}.tmp")
        tmp.write_text(
            json.dumps({"broker_epoch": self.broker_epoch, "pid": os.getpid(), "at": now}), encoding="utf-8"
        )
        os.replace(tmp, path)
        self.last_beat = now

    def release(self) -> None:
        self._lock.release()
