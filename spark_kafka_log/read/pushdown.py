"""Filter pushdown for reads: which of Spark's filters narrow the planned offset ranges, and how.

Runs on: driver (planning).

Where this runs: the **driver**, in ``pushFilters`` of the pushdown reader (only with
``spark.sql.python.filterPushdown.enabled=true``), once per query before the ranges are planned. Pure: no I/O;
:class:`PushedFilters` is immutable and is applied by :func:`spark_kafka_log.read.read_plan.plan_ranges`.

What is pushed:

* ``partition = n`` / ``partition IN (...)`` and ``offset`` comparisons (=, >, >=, <, <=) are applied EXACTLY
  by narrowing the ranges, so they are not returned to Spark;
* ``timestamp >= t`` / ``timestamp > t`` / ``timestamp = t`` move each range's start to the first offset whose
  timestamp is >= t (ListOffsets, i.e. the time index); records before that offset all have smaller timestamps,
  so nothing matching is skipped. Timestamps need not grow with offsets (CreateTime), so upper timestamp bounds
  cannot cut a range safely: every timestamp filter is also returned to Spark, which applies it exactly;
* everything else is returned untouched.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

__all__ = ["PushedFilters", "push_filter"]


@dataclass(frozen=True)
class PushedFilters:
    """Constraints taken from pushed filters (all optional); offsets are [lo, hi)."""

    partitions: frozenset[int] | None = None
    offset_lo: int | None = None
    offset_hi: int | None = None
    timestamp_lo_ms: int | None = None

    def with_partitions(self, values: Sequence[int]) -> PushedFilters:
        keep = frozenset(values) if self.partitions is None else self.partitions & frozenset(values)
        return replace(self, partitions=keep)

    def with_offsets(self, lo: int | None, hi: int | None) -> PushedFilters:
        new_lo = lo if self.offset_lo is None else (self.offset_lo if lo is None else max(lo, self.offset_lo))
        new_hi = hi if self.offset_hi is None else (self.offset_hi if hi is None else min(hi, self.offset_hi))
        return replace(self, offset_lo=new_lo, offset_hi=new_hi)

    def with_timestamp(self, lo_ms: int) -> PushedFilters:
        cur = self.timestamp_lo_ms
        return replace(self, timestamp_lo_ms=lo_ms if cur is None else max(cur, lo_ms))


def push_filter(pushed: PushedFilters, f: Filter) -> tuple[PushedFilters, bool]:
    """``pushed`` narrowed by ``f`` when it can narrow the plan; True when ``f`` is then applied exactly."""
    attr = getattr(f, "attribute", None)
    if not isinstance(attr, tuple) or len(attr) != 1:
        return pushed, False
    column = attr[0].lower()
    value: Any = getattr(f, "value", None)
    if column == "partition":
        if isinstance(f, EqualTo) and _is_int(value):
            return pushed.with_partitions([value]), True
        if isinstance(f, In) and all(_is_int(v) for v in value):
            return pushed.with_partitions(list(value)), True
        return pushed, False
    if column == "offset" and _is_int(value):
        lo_hi = {
            EqualTo: (value, value + 1),
            GreaterThan: (value + 1, None),
            GreaterThanOrEqual: (value, None),
            LessThan: (None, value),
            LessThanOrEqual: (None, value + 1),
        }.get(type(f))
        if lo_hi is None:
            return pushed, False
        return pushed.with_offsets(*lo_hi), True
    if column == "timestamp" and isinstance(value, _dt.datetime):
        micros = _micros(value)
        if isinstance(f, (GreaterThanOrEqual, EqualTo)):
            pushed = pushed.with_timestamp(-(-micros // 1000))  # ceil to ms
        elif isinstance(f, GreaterThan):
            pushed = pushed.with_timestamp(micros // 1000 + 1)
        return pushed, False  # Spark still applies every timestamp filter exactly.
    return pushed, False


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _micros(value: _dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    delta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
