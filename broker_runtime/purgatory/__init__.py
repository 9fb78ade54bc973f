"""Timers and delayed operations: the hierarchical timing wheel, delayed operations and their purgatory.

Imports only its own clock interface (and the project's errors), so replication and the server can park work
here without the purgatory knowing about partitions or requests. See the module docstrings for design and
thread-safety.
"""

from broker_runtime.purgatory.clock import Clock, ManualClock, SystemClock
from broker_runtime.purgatory.delayed_operation import DelayedOperation, DelayedOperationPurgatory
from broker_runtime.purgatory.timing_wheel import Timer, TimerTask

__all__ = [
    "Clock",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "ManualClock",
    "SystemClock",
    "Timer",
    "TimerTask",
]
