"""Measurement helpers shared by the benchmark sections: timings of repeated runs, printable results, and the
CPU time of a broker child process.

A broker's CPU is read from ``/proc/<pid>/stat`` (utime + stime, clock ticks: 10 ms resolution) before and
after the measured work only, so the broker's start-up (interpreter, imports, log recovery) is not counted;
``getrusage(RUSAGE_CHILDREN)`` would count the whole child life and only after it exits.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Figure",
    "Result",
    "Timing",
    "broker_pid",
    "log_mb",
    "process_cpu_s",
    "spark_session",
    "timed",
    "timed_interleaved",
]


@dataclass(frozen=True)
class Figure:
    """A figure derived from repeated runs: the median and the spread (min-max) over the runs."""

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Timing:
    """Wall times in seconds of repeated runs of the same work."""

    runs: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    def rate(self, amount: float) -> Figure:
        """``amount`` per second: the median run's rate, from the slowest run's to the fastest's."""
        return Figure(amount / self.median, amount / max(self.runs), amount / min(self.runs))

    def scaled(self, factor: float) -> Figure:
        """The run time times ``factor`` (e.g. 1000 for ms, or 1/n per item)."""
        return Figure(self.median * factor, min(self.runs) * factor, max(self.runs) * factor)


def timed(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> Timing:
    """Wall times of ``repeat`` runs of ``fn()`` after ``warmup`` discarded runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return Timing(tuple(times))


def timed_interleaved(fns: list[Callable[[], object]], repeat: int = 5, warmup: int = 1) -> list[Timing]:
    """Wall times of ``fns`` run in turn (f1, f2, ..., f1, f2, ...) ``repeat`` times after ``warmup`` rounds, so
    that a drift of the machine over the runs affects each alike (for ratios measured in the same run)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [Timing(tuple(t)) for t in times]


def _shown(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:,.2f}"
    return f"{value:.4g}"


@dataclass(frozen=True)
class Result:
    """One figure: ``value`` in ``unit``; ``target`` is the goal as text (e.g. ">= 5M/s"), ``met`` the verdict.

    ``spread`` is (min, max) over the repeated runs when ``value`` is their median (see :meth:`measured`).
    """

    section: str
    name: str
    value: float
    unit: str
    target: str = ""
    met: bool | None = None
    spread: tuple[float, float] | None = None

    @classmethod
    def measured(
        cls, section: str, name: str, figure: Figure, unit: str, target: str = "", met: bool | None = None
    ) -> Result:
        return cls(section, name, figure.value, unit, target, met, (figure.low, figure.high))

    def line(self, quick: bool = False) -> str:
        """The printed line; in quick mode no spread and no verdict (quick figures are not measurements)."""
        shown = f"{_shown(self.value):>14}"
        if not quick:  # a column of its own, blank for figures that are not medians, so units line up
            spread = "" if self.spread is None else f"({_shown(self.spread[0])}-{_shown(self.spread[1])})"
            shown += f" {spread:<27}"
        verdict = "" if self.met is None or quick else ("  [met]" if self.met else "  [NOT met]")
        target = f"  (target {self.target})" if self.target else ""
        return f"{self.section:<10} {self.name:<58} {shown} {self.unit:<10}{target}{verdict}"


def spark_session(app: str, master: str, **conf: str) -> Any:
    """The active SparkSession if there is one (left as it is), else a new one with ``master`` and ``conf``.

    A process keeps one Spark session: the Spark sections share it, and a caller's session (a test run's)
    is reused rather than replaced. The caller does not stop it; the process's exit does.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # keeps result lines whole
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def broker_pid(data_dir: str) -> int:
    """The pid of the broker child process started on ``data_dir`` (its command line names its config file)."""
    config = os.path.join(data_dir, "broker.properties")
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if b"broker_runtime" in args and config.encode() in args:
                return int(entry)
    raise RuntimeError(f"no broker process runs on {data_dir}")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log_mb(data_dir: str, topic: str) -> float:
    """MB (10^6 bytes) of ``topic``'s segment files (``.log``) under ``data_dir``."""
    total = 0
    for root, _dirs, files in os.walk(data_dir):
        if os.path.basename(root).startswith(f"{topic}-"):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".log"))
    return total / 1e6
