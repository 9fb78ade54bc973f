"""The failure of a log manager's directories: the one place every write the disk refused goes (Kafka's
``LogDirFailureChannel`` with ``maybeAddOfflineLogDir``, and the ``hasOfflineLogDir`` check at the top of
``LocalLog.maybeHandleIOException``).

Who reports: every write in a log directory whose OSError Kafka routes to its channel calls
:meth:`LogDirFailureChannel.maybe_add_offline_log_dir` with what it was writing and the error, then raises the
error on as before: a partition log's append, follower append, roll, flush, truncation, segment deletion
(retention, DeleteRecords) and cleaned-segment swap, the roll flush and its producer snapshot
(:mod:`.partition_log`); the offset checkpoints (:mod:`.checkpoint`), the cleaner, the renames of a deleted or
stray partition and the rewrites of its ``topic.config`` and ``partition.metadata`` (:mod:`.log_manager`); the
leader-epoch checkpoint (:mod:`broker_runtime.replication.epoch_cache`). Kafka's rule is every ``IOException``, so
it is every ``OSError`` here, whatever its errno (a full disk, an I/O error, a read-only remount, a directory
gone); :func:`describe_failure` names those the disk itself refuses with what the operator does about each. What
Kafka tolerates stays tolerated at its call site, with a comment (deleting a file that is already gone; removing a
``-delete`` directory; the producer snapshot of a log's close). Unlike Kafka's ``getOrCreateLog``, a new log's files
failing do not fail the directories (the creation is rolled back, which needs them: see ``LogManager.create_log``).

What follows: the first report marks the directories offline, and from then on every append, read, truncation,
segment deletion or swap, flush and checkpoint write raises :class:`~broker_runtime.errors.LogDirOfflineError`
(a :class:`~broker_runtime.errors.StorageError`: the request is answered KAFKA_STORAGE_ERROR) before any I/O.
The flag is never cleared: the next start recovers from the files. Then :attr:`LogDirFailureChannel.on_offline`
is called once, with the reason and the error, on the reporting thread: the broker sets it to its halt (Kafka's
``LogManager.handleLogDirFailure`` with its only log dir gone; see :mod:`broker_runtime.server.node.broker`),
which is thread-safe; without one, the reason is logged at ERROR. pylog fails all its directories at once (the
broker halts on the first failed one), so one flag serves a manager.

Thread-safety: any thread reports. The flag is one attribute written once (first reason wins, under a lock) and
read without a lock by any thread; a check that runs concurrently with the failure may still let one operation
through, as Kafka's. The listener is called outside the lock, once.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable

from broker_runtime.errors import LogDirOfflineError

__all__ = ["LogDirFailureChannel", "describe_failure"]

_log = logging.getLogger(__name__)

#: What an operator does about the errors the disk itself refuses a write with (the others need no hint).
_REMEDIES = {
    errno.ENOSPC: "free space on that file system, then start the broker again",
    errno.EDQUOT: "raise the disk quota or free space, then start the broker again",
    errno.EIO: "the device reported an I/O error: check the disk before starting the broker again",
    errno.EROFS: "the file system went read-only (often after I/O errors): check the disk, remount it read-write",
}


def describe_failure(what: str, exc: OSError) -> str:
    """``writing <what> raised <type>: <error>``, with the remedy for ENOSPC, EDQUOT, EIO and EROFS."""
    remedy = _REMEDIES.get(exc.errno) if exc.errno is not None else None
    return f"writing {what} raised {type(exc).__name__}: {exc}" + (f" ({remedy})" if remedy else "")


class LogDirFailureChannel:
    """Whether the directories failed, and why (the first reason given); see the module docstring."""

    __slots__ = ("_lock", "_reason", "on_offline")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None
        #: Called once, on the reporting thread, with the reason and the error of the first failure.
        self.on_offline: Callable[[str, OSError], None] | None = None

    @property
    def offline(self) -> str | None:
        """Why the directories failed; None while they serve."""
        return self._reason

    def mark_offline(self, reason: str) -> bool:
        """Refuse every later I/O; True for the first call (the others keep the first reason)."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            return True

    def maybe_add_offline_log_dir(self, what: str, exc: OSError) -> None:
        """Writing ``what`` failed with ``exc``: mark the directories offline and, the first time, tell
        :attr:`on_offline` (Kafka's ``maybeAddOfflineLogDir``). Any thread; the caller raises ``exc`` on."""
        reason = describe_failure(what, exc)
        if not self.mark_offline(reason):
            _log.debug("log directory already offline; also %s", reason)
            return
        listener = self.on_offline
        if listener is None:
            _log.error("log directory offline: %s", reason)
        else:
            listener(reason, exc)

    def check(self, what: str) -> None:
        """Raise :class:`~broker_runtime.errors.LogDirOfflineError` naming ``what`` once the directories failed."""
        reason = self._reason
        if reason is not None:
            raise LogDirOfflineError(f"{what} refused: the log directory is offline ({reason})")
