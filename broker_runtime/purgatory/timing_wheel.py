"""Hierarchical timing wheel and the timer built on it (Kafka's ``TimingWheel`` / ``SystemTimer``).

Design
------
A wheel of ``wheel_size`` buckets, each ``tick_ms`` wide, covers the interval
``[current_time, current_time + tick_ms * wheel_size)``. A task whose expiration falls in that interval goes into
the bucket of its *virtual id* ``expiration // tick_ms`` (slot ``virtual_id % wheel_size``); the bucket's
expiration is ``virtual_id * tick_ms``, i.e. the start of the tick it stands for. A task beyond the interval goes
to the overflow wheel, created on demand, whose tick is the whole interval of the wheel below
(1 ms, 20 ms, 400 ms, 8 s, 160 s, ... with the defaults). A task whose expiration is before
``current_time + tick_ms`` of the lowest wheel is already due and is run at once; so is a task added with
``delay_ms <= 0`` (after the tasks that were already due by then).

Every bucket that receives its first task of a round is pushed onto one delay queue (a ``heapq`` ordered by bucket
expiration) shared by all levels. :meth:`Timer.advance_clock` pops every bucket whose expiration is due, advances
the wheels to that bucket's expiration and re-inserts the bucket's tasks: tasks of an overflow bucket fall into a
finer wheel (or are due and run); tasks of a lowest-level bucket are due and run. Insert costs O(levels) plus
one heap push per bucket per round; cancel is O(1).

Invariants
----------
- A task runs at most once per :meth:`Timer.add`, never before its expiration ``add time + delay_ms`` and, when
  the timer is advanced at least once per tick, in the tick its expiration falls in. Due tasks of one
  ``advance_clock`` call run in the order of their expirations.
- A cancelled task (``TimerTask.cancel``) never runs. Adding a task again moves it: only the newest entry counts.
- A bucket sits in the delay queue while its expiration is set; flushing it resets the expiration to -1 so the
  next round pushes it again. Heap items whose recorded expiration no longer matches the bucket are stale and
  skipped.
- ``Timer.size`` is the number of task entries held in buckets (tasks waiting to expire).

Thread-safety
-------------
One lock per :class:`Timer` guards the wheels, the buckets and the delay queue: ``add``, ``advance_clock``,
``next_expiration_ms``, ``TimerTask.cancel`` and ``shutdown`` may be called from any thread. Tasks run in the
thread that called ``add`` (already due) or ``advance_clock``, *after* the lock is released, so a task may add or
cancel tasks of the same timer. A task belongs to one timer at a time. The broker drives the timer from its event
loop: it sleeps until :meth:`Timer.next_expiration_ms` (or a few ms) and then calls :meth:`Timer.advance_clock`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from broker_runtime.errors import IllegalStateError, InvalidArgumentError
from broker_runtime.purgatory.clock import Clock, SystemClock

__all__ = ["DEFAULT_TICK_MS", "DEFAULT_WHEEL_SIZE", "Timer", "TimerTask"]

_log = logging.getLogger(__name__)

DEFAULT_TICK_MS = 1
DEFAULT_WHEEL_SIZE = 20

_NO_EXPIRATION = -1


class TimerTask:
    """Work to run once ``delay_ms`` milliseconds after it is added to a :class:`Timer`.

    Subclasses override :meth:`run`. :meth:`cancel` removes the task from its timer; a cancelled task never runs.
    """

    __slots__ = ("_entry", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = int(delay_ms)
        self._entry: _TimerTaskEntry | None = None

    def run(self) -> None:
        """Called by the timer when the task expires (outside the timer's lock)."""
        raise NotImplementedError(f"{type(self).__name__} must override TimerTask.run()")

    def cancel(self) -> None:
        """Withdraw the task from its timer. Idempotent; a no-op for a task never added or already run."""
        entry = self._entry
        self._entry = None
        if entry is not None:
            entry.remove()

    @property
    def scheduled(self) -> bool:
        """True while the task waits in a timer bucket (added, not yet expired, not cancelled)."""
        entry = self._entry
        return entry is not None and entry.bucket is not None

    def _set_entry_locked(self, entry: _TimerTaskEntry) -> None:
        old = self._entry
        if old is not None and old is not entry:
            old.remove_locked()
        self._entry = entry


class _Shared:
    """State shared by every wheel and bucket of one timer: its lock, task count and delay queue."""

    __slots__ = ("count", "lock", "queue", "seq")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        #: (bucket expiration, insertion number, bucket); the number breaks ties without comparing buckets.
        self.queue: list[tuple[int, int, _TimerTaskList]] = []
        self.seq = itertools.count()


class _TimerTaskEntry:
    """One scheduling of a task: its absolute expiration and the bucket holding it."""

    __slots__ = ("bucket", "expiration_ms", "shared", "task")

    def __init__(self, task: TimerTask, expiration_ms: int, shared: _Shared) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        self.shared = shared
        self.bucket: _TimerTaskList | None = None

    @property
    def cancelled(self) -> bool:
        """An entry is dead once its task was cancelled or re-added (the task points elsewhere)."""
        return self.task._entry is not self

    def remove(self) -> None:
        with self.shared.lock:
            self.remove_locked()

    def remove_locked(self) -> None:
        bucket = self.bucket
        if bucket is not None:
            bucket.remove_locked(self)


class _TimerTaskList:
    """A bucket: the entries of one tick of one wheel, in insertion order, and the tick's expiration."""

    __slots__ = ("entries", "expiration_ms", "shared")

    def __init__(self, shared: _Shared) -> None:
        self.shared = shared
        # A dict keeps insertion order and removes in O(1); entries hash by identity.
        self.entries: dict[_TimerTaskEntry, None] = {}
        self.expiration_ms = _NO_EXPIRATION

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket's expiration; True when it changed (the bucket must then be queued)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def add_locked(self, entry: _TimerTaskEntry) -> None:
        entry.remove_locked()
        self.entries[entry] = None
        entry.bucket = self
        self.shared.count += 1

    def remove_locked(self, entry: _TimerTaskEntry) -> None:
        if entry.bucket is self:
            del self.entries[entry]
            entry.bucket = None
            self.shared.count -= 1

    def flush_locked(self, consumer: Callable[[_TimerTaskEntry], None]) -> None:
        """Remove every entry, hand each to ``consumer`` in insertion order, and clear the expiration."""
        entries = list(self.entries)
        self.entries.clear()
        self.shared.count -= len(entries)
        self.expiration_ms = _NO_EXPIRATION
        for entry in entries:
            entry.bucket = None
            consumer(entry)


class _TimingWheel:
    """One level of the hierarchy; ``overflow`` is the next coarser level, created when first needed."""

    __slots__ = ("buckets", "current_time_ms", "interval_ms", "overflow", "shared", "tick_ms", "wheel_size")

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, shared: _Shared) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.shared = shared
        self.current_time_ms = start_ms - (start_ms % tick_ms)
        self.buckets = [_TimerTaskList(shared) for _ in range(wheel_size)]
        self.overflow: _TimingWheel | None = None

    def add_locked(self, entry: _TimerTaskEntry) -> bool:
        """Place ``entry``; False when it is cancelled or already due (the caller then runs it or drops it)."""
        expiration = entry.expiration_ms
        if entry.cancelled:
            return False
        if expiration < self.current_time_ms + self.tick_ms:
            return False
        if expiration < self.current_time_ms + self.interval_ms:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % self.wheel_size]
            bucket.add_locked(entry)
            bucket_expiration = virtual_id * self.tick_ms
            if bucket.set_expiration(bucket_expiration):
                # First task of this bucket's round: the bucket enters the delay queue once per round.
                shared = self.shared
                heapq.heappush(shared.queue, (bucket_expiration, next(shared.seq), bucket))
            return True
        if self.overflow is None:
            self.overflow = _TimingWheel(self.interval_ms, self.wheel_size, self.current_time_ms, self.shared)
        return self.overflow.add_locked(entry)

    def advance_clock_locked(self, time_ms: int) -> None:
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - (time_ms % self.tick_ms)
            if self.overflow is not None:
                self.overflow.advance_clock_locked(self.current_time_ms)

    def levels(self) -> int:
        return 1 if self.overflow is None else 1 + self.overflow.levels()


class Timer:
    """Kafka's ``SystemTimer`` over a hierarchical timing wheel, read through a :class:`Clock`.

    ``add(task)`` schedules ``task.run()`` at ``clock.now_ms() + task.delay_ms``; ``advance_clock()`` runs what is
    due. Nothing happens between calls: the owner must advance the timer (see :meth:`next_expiration_ms`).
    """

    __slots__ = ("_clock", "_shared", "_shut_down", "_wheel", "name")

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
        start_ms: int | None = None,
        name: str = "timer",
    ) -> None:
        if tick_ms < 1:
            raise InvalidArgumentError(f"timer {name!r}: tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise InvalidArgumentError(f"timer {name!r}: wheel_size must be >= 2, got {wheel_size}")
        self.name = name
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._shared = _Shared()
        start = self._clock.now_ms() if start_ms is None else start_ms
        self._wheel = _TimingWheel(tick_ms, wheel_size, start, self._shared)
        self._shut_down = False

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def size(self) -> int:
        """Number of tasks waiting in the timer."""
        return self._shared.count

    @property
    def levels(self) -> int:
        """Number of wheels created so far (1 + overflow wheels)."""
        with self._shared.lock:
            return self._wheel.levels()

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` ``task.delay_ms`` ms from now; a task already scheduled is moved.

        A task that is already due (``delay_ms`` <= 0) runs right here, in the caller's thread, after the timer's
        lock is released, and after any other task that was due by now (so deadline order holds).
        """
        shared = self._shared
        due: list[_TimerTaskEntry] = []
        with shared.lock:
            if self._shut_down:
                raise IllegalStateError(f"timer {self.name!r} is shut down; cannot add {task!r}")
            now = self._clock.now_ms()
            entry = _TimerTaskEntry(task, now + task.delay_ms, shared)
            task._set_entry_locked(entry)
            if task.delay_ms <= 0:
                # The wheels may lag the clock (they only move when a bucket expires): expire what is due first.
                self._expire_locked(now, due)
                due.append(entry)
            elif not self._wheel.add_locked(entry):
                due.append(entry)
        if due:
            self._run_entries(due)

    def advance_clock(self, now_ms: int | None = None) -> bool:
        """Expire every bucket due at ``now_ms`` (default: the clock's time) and run the due tasks.

        Returns True when at least one task ran. ``now_ms`` must come from this timer's clock; an earlier time
        than a previous call simply finds nothing due.
        """
        now = self._clock.now_ms() if now_ms is None else now_ms
        due: list[_TimerTaskEntry] = []
        with self._shared.lock:
            if self._shut_down:
                return False
            self._expire_locked(now, due)
        return self._run_entries(due)

    def _expire_locked(self, now: int, due: list[_TimerTaskEntry]) -> None:
        """Flush every bucket expired at ``now``; append the entries that became due to ``due``, in order."""
        wheel = self._wheel
        queue = self._shared.queue

        def reinsert(entry: _TimerTaskEntry) -> None:
            if not wheel.add_locked(entry) and not entry.cancelled:
                due.append(entry)

        while queue and queue[0][0] <= now:
            expiration, _, bucket = heapq.heappop(queue)
            if bucket.expiration_ms != expiration:
                continue  # stale: the bucket was flushed (or dropped) since this push
            wheel.advance_clock_locked(expiration)
            bucket.flush_locked(reinsert)

    def next_expiration_ms(self) -> int | None:
        """Clock time of the earliest non-empty bucket, or None when no task waits.

        Never later than the next task's expiration (an overflow bucket expires at the start of its span and
        then hands its tasks to finer wheels), so sleeping until this time and calling :meth:`advance_clock`
        loses no deadline.
        """
        shared = self._shared
        with shared.lock:
            queue = shared.queue
            while queue:
                expiration, _, bucket = queue[0]
                if bucket.expiration_ms != expiration:
                    heapq.heappop(queue)
                elif not bucket.entries:
                    # Every task of the bucket was cancelled: drop it; a later add re-queues it.
                    heapq.heappop(queue)
                    bucket.expiration_ms = _NO_EXPIRATION
                else:
                    return expiration
            return None

    def shutdown(self) -> None:
        """Drop every waiting task (none of them will run) and refuse further adds."""
        shared = self._shared
        with shared.lock:
            self._shut_down = True

            def drop(entry: _TimerTaskEntry) -> None:
                if entry.task._entry is entry:
                    entry.task._entry = None

            for _, _, bucket in shared.queue:
                bucket.flush_locked(drop)
            shared.queue.clear()

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

    def _run_entries(self, entries: list[_TimerTaskEntry]) -> bool:
        ran = False
        for entry in entries:
            if entry.cancelled:  # cancelled after it was found due, before its turn
                continue
            ran = True
            try:
                entry.task.run()
            except Exception:
                _log.exception("timer %r: task %r raised while running", self.name, entry.task)
        return ran

    def __repr__(self) -> str:
        return f"Timer(name={self.name!r}, size={self.size}, shut_down={self._shut_down})"
