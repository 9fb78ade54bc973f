"""The group coordinator's timers (session timeouts, rebalance timeouts, the initial join delay, the lifetime of
a member id handed out with MEMBER_ID_REQUIRED) on the project's :class:`~broker_runtime.purgatory.Clock`
(Kafka's ``CoordinatorTimer``; the classic coordinator parked the same deadlines in its heartbeat and rebalance
purgatories).

Time is the clock's monotonic milliseconds; a task scheduled ``delay_ms`` from now runs at the first
:meth:`CoordinatorTimer.advance_clock` at or after its deadline, never inside :meth:`CoordinatorTimer.schedule`
(a delay below 1 ms counts as 1 ms, so a callback never runs in the middle of the code that scheduled it). The
broker advances this timer with its purgatories' (one driver on the event loop: ``wake`` asks it to look at
:meth:`CoordinatorTimer.next_expiration_ms` again after each schedule); a test drives it with a
:class:`~broker_runtime.purgatory.ManualClock` and ``advance_clock``, without sleeping. After
:meth:`CoordinatorTimer.shutdown` nothing runs and a new schedule is dropped (the broker is stopping).

Thread-safety: schedule, cancel and advance on the event-loop thread (the coordinator's); tasks run in the thread
that advances the timer, the event loop's.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_runtime.purgatory.clock import Clock
from broker_runtime.purgatory.timing_wheel import Timer, TimerTask

__all__ = ["CoordinatorTimer", "TimerTask"]


class _Action(TimerTask):
    __slots__ = ("_action",)

    def __init__(self, delay_ms: int, action: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self._action = action

    def run(self) -> None:
        self._action()


class CoordinatorTimer:
    """See the module docstring."""

    def __init__(self, clock: Clock, wake: Callable[[], None] = lambda: None) -> None:
        self._timer = Timer(clock, name="group-coordinator")
        self._wake = wake

    def now_ms(self) -> int:
        """The clock's monotonic time (ms): the scale of every deadline here."""
        return self._timer.clock.now_ms()

    def schedule(self, delay_ms: float, action: Callable[[], None]) -> TimerTask:
        """Run ``action`` ``delay_ms`` from now (at least 1 ms); cancel it with the returned task's ``cancel``."""
        task = _Action(max(1, int(delay_ms)), action)
        if not self._timer.is_shut_down:
            self._timer.add(task)
            self._wake()
        return task

    def next_expiration_ms(self) -> int | None:
        """When :meth:`advance_clock` next has something to run (None: nothing waits)."""
        return self._timer.next_expiration_ms()

    def advance_clock(self, now_ms: int | None = None) -> bool:
        """Run every task due now (or at ``now_ms``); True when one ran."""
        return self._timer.advance_clock(now_ms)

    def shutdown(self) -> None:
        """Drop every waiting task; later schedules are dropped too."""
        self._timer.shutdown()
