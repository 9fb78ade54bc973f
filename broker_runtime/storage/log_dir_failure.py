"""The offline state of a log manager's directories (Kafka's ``LogDirFailureChannel`` and the
``hasOfflineLogDir`` check at the top of ``LocalLog.maybeHandleIOException``).

A write the disk refused (ENOSPC, EIO) leaves the failed log's memory out of step with its files, and the broker
halts (see :mod:`broker_runtime.server.node.broker`). Between that failure and the halt, nothing may touch the
directories again: :meth:`LogDirFailureChannel.mark_offline` flips one flag, shared by the :class:`LogManager
<broker_runtime.storage.log_manager.LogManager>` and every log it holds, and from then on every append, read,
truncation, segment deletion or swap, flush and checkpoint write raises
:class:`~broker_runtime.errors.LogDirOfflineError` (a :class:`~broker_runtime.errors.StorageError`: the request
is answered KAFKA_STORAGE_ERROR) before any I/O. The flag is never cleared: the next start recovers from the
files.

pylog fails all its directories at once (the broker halts on the first failed one), so one flag serves a manager.

Thread-safety: the flag is one attribute written once (first reason wins, under a lock) and read without a lock
by any thread; a check that runs concurrently with the failure may still let one operation through, as Kafka's.
"""

from __future__ import annotations

import threading

from broker_runtime.errors import LogDirOfflineError

__all__ = ["LogDirFailureChannel"]


class LogDirFailureChannel:
    """Whether the directories failed, and why (the first reason given)."""

    __slots__ = ("_lock", "_reason")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None

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

    def check(self, what: str) -> None:
        """Raise :class:`~broker_runtime.errors.LogDirOfflineError` naming ``what`` once the directories failed."""
        reason = self._reason
        if reason is not None:
            raise LogDirOfflineError(f"{what} refused: the log directory is offline ({reason})")
