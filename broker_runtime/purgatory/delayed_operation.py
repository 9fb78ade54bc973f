"""Delayed operations and the purgatory that parks them (Kafka's ``DelayedOperation`` / ``DelayedOperationPurgatory``).

Design
------
A :class:`DelayedOperation` is a request that cannot be answered yet (e.g. an ``acks=-1`` produce waiting for the
high watermark). It completes exactly once, in one of two ways:

- :meth:`DelayedOperation.try_complete` (subclass logic) finds it can finish now and calls
  :meth:`DelayedOperation.force_complete`;
- its timeout expires: the timer runs it, ``force_complete()`` then :meth:`DelayedOperation.on_expiration`.

``force_complete`` flips the completed flag atomically; only the caller that flips it cancels the timer task and
calls :meth:`DelayedOperation.on_complete`. So ``on_complete`` runs exactly once even when a
``check_and_complete`` races the expiry.

:class:`DelayedOperationPurgatory` keeps, per watch key (any hashable; the broker uses ``(topic, partition)``),
a list of operations waiting on that key. ``try_complete_else_watch(op, keys)`` tries the operation; if it cannot
finish, watches it under every key, tries once more (so an event between the first try and the watching is not
lost), and only then adds it to the timer. ``check_and_complete(key)`` tries the operations watching ``key`` when
the state behind the key changed. An operation completed through one key stays in the lists of its other keys
until they are checked or purged: :meth:`DelayedOperationPurgatory.advance_clock` (and
``try_complete_else_watch``) purge completed operations from every list when the estimated number of completed
but still watched operations exceeds ``purge_interval`` (Kafka's expiration reaper, done inline).

Invariants
----------
- ``on_complete`` is called at most once per operation; ``on_expiration`` only after ``on_complete`` and only when
  the timer completed it.
- An operation that completed is never added to the timer afterwards (or is cancelled right after the add).
- ``watched`` counts list entries (an operation watched under 3 keys counts 3, completed ones until purged);
  ``delayed`` counts operations waiting in the timer.

Thread-safety
-------------
Any method may be called from any thread. ``try_complete`` runs under the operation's own reentrant ``lock``
(Kafka's ``safeTryComplete``), so one operation is never tried concurrently; the purgatory's watcher map has one
lock that is never held while operations are tried. Call ``check_and_complete`` without holding locks that
``try_complete`` implementations take, to avoid lock-order deadlocks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from broker_runtime.errors import IllegalStateError, InvalidArgumentError
from broker_runtime.purgatory.clock import Clock
from broker_runtime.purgatory.timing_wheel import Timer, TimerTask

__all__ = ["DEFAULT_PURGE_INTERVAL", "DelayedOperation", "DelayedOperationPurgatory"]

_log = logging.getLogger(__name__)

DEFAULT_PURGE_INTERVAL = 1000

# Guards the completed flags: a compare-and-set is a few bytecodes, one shared lock costs less than one per op.
_COMPLETION_LOCK = threading.Lock()


class DelayedOperation(TimerTask):
    """An operation that finishes when ``try_complete`` says so, or when ``delay_ms`` expires.

    Subclasses implement :meth:`try_complete`, :meth:`on_complete` and :meth:`on_expiration`.
    """

    __slots__ = ("_completed", "lock")

    def __init__(self, delay_ms: int, lock: threading.RLock | None = None) -> None:
        super().__init__(delay_ms)
        self._completed = False
        #: Held while ``try_complete`` runs; pass a shared lock to serialise related operations.
        self.lock = lock if lock is not None else threading.RLock()

    # -- subclass hooks --------------------------------------------------------------------------------------

    def try_complete(self) -> bool:
        """Check whether the operation can finish now; if so call :meth:`force_complete` and return its result."""
        raise NotImplementedError(f"{type(self).__name__} must implement try_complete()")

    def on_complete(self) -> None:
        """The completion logic (e.g. send the response); called exactly once, by the winning force_complete."""
        raise NotImplementedError(f"{type(self).__name__} must implement on_complete()")

    def on_expiration(self) -> None:
        """Called after ``on_complete`` when the operation completed because its timeout expired."""

    # -- completion ------------------------------------------------------------------------------------------

    def force_complete(self) -> bool:
        """Complete the operation if nobody has; True only for the caller that completed it."""
        with _COMPLETION_LOCK:
            if self._completed:
                return False
            self._completed = True
        self.cancel()
        self.on_complete()
        return True

    @property
    def is_completed(self) -> bool:
        return self._completed

    def safe_try_complete(self) -> bool:
        """``try_complete`` under the operation's lock."""
        with self.lock:
            return self.try_complete()

    def safe_try_complete_or_else(self, otherwise: Callable[[], None]) -> bool:
        """Under the lock: try; if not done, call ``otherwise`` and try a last time."""
        with self.lock:
            if self.try_complete():
                return True
            otherwise()
            return self.try_complete()

    def run(self) -> None:
        """Timer expiry: complete (if still pending) and report the expiration."""
        if self.force_complete():
            self.on_expiration()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(delay_ms={self.delay_ms}, completed={self._completed})"


T = TypeVar("T", bound=DelayedOperation)


class _Watchers(Generic[T]):
    """The operations watching one key, in watch order."""

    __slots__ = ("key", "operations")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.operations: list[T] = []


class DelayedOperationPurgatory(Generic[T]):
    """Parks delayed operations under watch keys until they complete or their timer expires."""

    def __init__(
        self,
        name: str,
        timer: Timer,
        purge_interval: int = DEFAULT_PURGE_INTERVAL,
        *,
        timer_enabled: bool = True,
    ) -> None:
        self.name = name
        self.purge_interval = purge_interval
        self._timer = timer
        self._timer_enabled = timer_enabled
        self._lock = threading.Lock()
        self._watchers: dict[Hashable, _Watchers[T]] = {}
        # Operations watched since the last purge: their excess over `delayed` estimates completed ones still in
        # the watcher lists.
        self._estimated_total = 0
        self._shut_down = False

    # -- counts ---------------------------------------------------------------------------------------------

    @property
    def timer(self) -> Timer:
        return self._timer

    @property
    def clock(self) -> Clock:
        return self._timer.clock

    @property
    def watched(self) -> int:
        """Entries in all watcher lists (an operation counts once per key; completed ones until purged)."""
        with self._lock:
            return sum(len(w.operations) for w in self._watchers.values())

    @property
    def delayed(self) -> int:
        """Operations waiting in the timer for their timeout."""
        return self._timer.size

    @property
    def watched_keys(self) -> int:
        """Number of keys that currently have a watcher list."""
        with self._lock:
            return len(self._watchers)

    # -- operations -----------------------------------------------------------------------------------------

    def try_complete_else_watch(self, operation: T, keys: Iterable[Hashable]) -> bool:
        """Complete ``operation`` now if it can; otherwise watch it under every key and start its timeout.

        Returns True iff the operation was completed by this call (or by a racing completion seen here).
        """
        watch_keys = list(keys)
        if not watch_keys:
            raise InvalidArgumentError(
                f"purgatory {self.name!r}: try_complete_else_watch needs at least one watch key"
            )
        if self._shut_down:
            raise IllegalStateError(f"purgatory {self.name!r} is shut down; cannot park {operation!r}")

        def watch_all() -> None:
            with self._lock:
                for key in watch_keys:
                    watchers = self._watchers.get(key)
                    if watchers is None:
                        watchers = self._watchers[key] = _Watchers(key)
                    watchers.operations.append(operation)
                self._estimated_total += 1

        if operation.safe_try_complete_or_else(watch_all):
            return True
        if not operation.is_completed:
            if self._timer_enabled:
                self._timer.add(operation)
            if operation.is_completed:
                # Completed by another thread between the check and the add: take it back out of the timer.
                operation.cancel()
        self._maybe_purge()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try every operation watching ``key``; returns how many this call completed."""
        with self._lock:
            watchers = self._watchers.get(key)
            if watchers is None:
                return 0
            snapshot = list(watchers.operations)
        completed = 0
        for operation in snapshot:
            if not operation.is_completed and operation.safe_try_complete():
                completed += 1
        self._remove_completed(watchers)
        if completed:
            _log.debug("purgatory %r: key %r unblocked %d operations", self.name, key, completed)
        return completed

    def cancel_for_key(self, key: Hashable) -> list[T]:
        """Stop watching ``key``: its operations are cancelled in the timer and returned, not completed."""
        with self._lock:
            watchers = self._watchers.pop(key, None)
        if watchers is None:
            return []
        for operation in watchers.operations:
            operation.cancel()
        return list(watchers.operations)

    def advance_clock(self, now_ms: int | None = None) -> bool:
        """Advance the timer (expiring due operations), then purge the watcher lists if due.

        Returns True when an operation (or any task of the timer) expired.
        """
        expired = self._timer.advance_clock(now_ms)
        self._maybe_purge()
        return expired

    def next_expiration_ms(self) -> int | None:
        """When the timer next needs :meth:`advance_clock` (see :meth:`Timer.next_expiration_ms`)."""
        return self._timer.next_expiration_ms()

    def purge_completed(self) -> int:
        """Remove completed operations from every watcher list now; returns the number of entries removed."""
        with self._lock:
            self._estimated_total = self._timer.size
            all_watchers = list(self._watchers.values())
        return sum(self._remove_completed(w) for w in all_watchers)

    def shutdown(self) -> None:
        """Stop the timer (pending timeouts never fire) and refuse new operations."""
        self._shut_down = True
        self._timer.shutdown()

    # -- internals ------------------------------------------------------------------------------------------

    def _maybe_purge(self) -> None:
        # Watched-and-counted minus still-delayed estimates the completed operations left in the lists.
        if self._estimated_total - self._timer.size > self.purge_interval:
            purged = self.purge_completed()
            _log.debug("purgatory %r: purged %d completed entries from watcher lists", self.name, purged)

    def _remove_completed(self, watchers: _Watchers[T]) -> int:
        with self._lock:
            before = len(watchers.operations)
            watchers.operations = [op for op in watchers.operations if not op.is_completed]
            removed = before - len(watchers.operations)
            if not watchers.operations and self._watchers.get(watchers.key) is watchers:
                del self._watchers[watchers.key]
            return removed

    def __repr__(self) -> str:
        return f"DelayedOperationPurgatory(name={self.name!r}, delayed={self.delayed})"
