"""The clock seam of the purgatory: every timer reads time through a :class:`Clock`.

Design: time is an ``int`` of milliseconds on a monotonic scale. Its origin is arbitrary; only differences
matter, so the same clock must be used for adding tasks and for advancing the timer.

- :class:`SystemClock` reads the process's monotonic clock (never jumps back when the wall clock is set).
- :class:`ManualClock` only moves when a test moves it, so timer tests run without sleeping.

Invariant: ``now_ms()`` never decreases. :class:`ManualClock` refuses to be moved backwards.

Thread-safety: both clocks may be read from any thread. :class:`ManualClock` serialises its writers with a lock
so that concurrent ``advance`` calls add up.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

from broker_runtime.errors import InvalidArgumentError

__all__ = ["Clock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Anything that tells the current time in integral milliseconds, never going backwards."""

    def now_ms(self) -> int: ...


class SystemClock:
    """The process's monotonic clock in milliseconds (``time.monotonic_ns() // 1_000_000``)."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that stands still until told to move: ``advance(ms)`` or ``set(ms)``."""

    __slots__ = ("_lock", "_now_ms")

    def __init__(self, start: int = 0) -> None:
        self._now_ms = int(start)
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` (>= 0) milliseconds; returns the new time."""
        if ms < 0:
            raise InvalidArgumentError(
                f"cannot advance a ManualClock by {ms} ms: the clock is monotonic (now {self._now_ms})"
            )
        with self._lock:
            self._now_ms += int(ms)
            return self._now_ms

    def set(self, ms: int) -> None:
        """Move the clock to ``ms``, which must not be before the current time."""
        with self._lock:
            if ms < self._now_ms:
                raise InvalidArgumentError(
                    f"cannot set a ManualClock back to {ms} ms: it already reads {self._now_ms} ms (monotonic)"
                )
            self._now_ms = int(ms)

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self._now_ms})"
