"""The benchmark suite must keep running: every written section runs in quick mode and yields sane figures.

Speed itself is judged by ``bash jobs/dev.sh bench``, never here.
"""

from __future__ import annotations

import importlib

import pytest

from jobs.bench.__main__ import SECTIONS
from jobs.bench.common import Result, median_seconds


def _section(name: str):  # type: ignore[no-untyped-def]
    try:
        return importlib.import_module(f"jobs.bench.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"jobs.bench.{name}":
            pytest.skip(f"benchmark section {name} not written yet")
        raise


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [s for s in SECTIONS if s not in {"writer", "reader"}])
def test_section_runs_quick(name: str) -> None:
    results = _section(name).run(True)
    assert results, f"section {name} reported nothing"
    for result in results:
        assert isinstance(result, Result)
        assert result.section == name
        assert result.value == result.value and result.value >= 0, result  # not NaN, not negative
        assert result.line().startswith(name)


def test_median_seconds_is_the_median() -> None:
    delays = iter([0.0, 0.03, 0.0, 0.01, 0.02])
    import time

    def work() -> None:
        time.sleep(next(delays))

    measured = median_seconds(work, repeat=4, warmup=1)
    assert 0.01 <= measured < 0.03
