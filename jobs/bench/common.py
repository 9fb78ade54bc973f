"""Measurement helpers shared by the benchmark sections: medians of repeated runs and printable results."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Result", "median_seconds"]


def median_seconds(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeat`` runs after ``warmup`` discarded runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@dataclass(frozen=True)
class Result:
    """One measured figure: ``value`` in ``unit``; ``target`` is the goal as text (e.g. ">= 5M/s")."""

    section: str
    name: str
    value: float
    unit: str
    target: str = ""
    met: bool | None = None

    def line(self) -> str:
        if self.value >= 100:
            shown = f"{self.value:,.0f}"
        elif self.value >= 1:
            shown = f"{self.value:,.2f}"
        else:
            shown = f"{self.value:.4g}"
        verdict = "" if self.met is None else ("  [met]" if self.met else "  [NOT met]")
        target = f"  (target {self.target})" if self.target else ""
        return f"{self.section:<10} {self.name:<58} {shown:>14} {self.unit:<10}{target}{verdict}"
