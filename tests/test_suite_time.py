"""The suite's time budget (:mod:`tests.support.suite_time`, :mod:`tests.support.schedule`,
:mod:`tests.support.tier_report`): the longest work units go to xdist first and whole, and every run ends with
its wall time against the budget and what each worker did."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support import schedule, suite_time, tier_report

pytest_plugins = ["pytester"]


def _item(nodeid: str, group: str | None = None) -> Any:
    """The two things :func:`schedule.longest_first` reads of a pytest item: its node id and its group mark."""
    mark = SimpleNamespace(args=(group,), kwargs={}) if group else None
    return SimpleNamespace(
        nodeid=nodeid, get_closest_marker=lambda name: mark if name == "xdist_group" else None
    )


def test_longest_units_come_first_whole_and_in_their_own_order() -> None:
    items = [
        _item("a.py::unit_1"),
        _item("b.py::s1", "b.py"),
        _item("c.py::one_driver"),
        _item("b.py::s2", "b.py"),
        _item("a.py::unit_2"),
        _item("d.py::p1", "d.py"),
        _item("b.py::s3", "b.py"),
    ]
    tiers = {
        "a.py::unit_1": "unit",
        "a.py::unit_2": "unit",
        "b.py::s1": "spark",
        "b.py::s2": "spark",
        "b.py::s3": "spark",
        "c.py::one_driver": "spark_app",
        "d.py::p1": "process",
    }
    schedule.longest_first(items, tiers)
    # spark_app 29 s, the spark group 3 x 4.3 s (its tests together, in their order), process, then the unit
    # tests in collection order.
    assert [i.nodeid for i in items] == [
        "c.py::one_driver",
        "b.py::s1",
        "b.py::s2",
        "b.py::s3",
        "d.py::p1",
        "a.py::unit_1",
        "a.py::unit_2",
    ]


def test_this_run_hands_xdist_its_units_longest_first(request: pytest.FixtureRequest) -> None:
    """Under ``--dist loadgroup`` (``bash jobs/dev.sh test``) the collected items are in units, longest first."""
    if getattr(request.config, "workerinput", None) is None or not request.config.getvalue("loadgroup"):
        return  # not an xdist worker of a --dist loadgroup run: the collection order is left alone
    units: list[str] = []
    estimate: dict[str, float] = {}
    for item in request.session.items:
        unit = schedule.unit_of(item)
        tier = next(m.name for m in item.iter_markers() if m.name in schedule.TIER_SECONDS)
        estimate[unit] = estimate.get(unit, 0.0) + schedule.TIER_SECONDS[tier]
        if not units or units[-1] != unit:
            assert unit not in units, f"the tests of {unit} are not together in the collection"
            units.append(unit)
    seconds = [estimate[u] for u in units]
    assert seconds == sorted(seconds, reverse=True), "the work units are not in longest-first order"


# A pytest run in this process: its start-up may run a child (ctypes' ldconfig lookup), which the scan cannot see.
@pytest.mark.tier_floor("process")
def test_every_run_ends_with_its_wall_time_against_the_budget(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_two="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "tests.support.suite_time")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*= suite time =*",
            "wall 0m ??s (pytest session) against the whole suite's budget of 15m 00s on 2 cores: 1?m ??s to spare",
            "  main: 2 tests, busy 0 s, last test ended at 0m ??s",
            "slowest modules (test-seconds, worker): test_two.py 0 main",
        ]
    )
    assert "WARNING" not in result.stdout.str()


@pytest.mark.tier_floor("process")
def test_a_whole_run_over_the_budget_says_so(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_one="def test_a():\n    pass\n")
    monkeypatch.setattr(suite_time, "BUDGET_S", 0)
    result = pytester.runpytest_inprocess("-p", "tests.support.suite_time")
    result.stdout.fnmatch_lines(["*OVER", "WARNING: the whole suite took *, over its budget of 0m 00s*"])
    # A part of the suite (a path, -m or -k) is never judged against the whole suite's budget.
    result = pytester.runpytest_inprocess("-p", "tests.support.suite_time", "-k", "test_a")
    result.stdout.fnmatch_lines(["*(a part of the suite ran)"])
    assert "WARNING" not in result.stdout.str()


def test_tier_report_shows_each_workers_span(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def case(name: str, tier: str, worker: str, start: float, took: float) -> str:
        props = "".join(
            f'<property name="{k}" value="{v}" />'
            for k, v in (("tier", tier), ("worker", worker), ("start", start))
        )
        return f'<testcase classname="tests.m" name="{name}" time="{took}"><properties>{props}</properties></testcase>'

    xml = tmp_path / "run.xml"
    xml.write_text(
        "<testsuites><testsuite>"
        + case("a", "unit", "gw0", 1000.0, 2.0)
        + case("b", "spark", "gw0", 1002.0, 30.0)
        + case("c", "broker", "gw1", 1001.0, 5.0)
        + "</testsuite></testsuites>"
    )
    assert tier_report.main([str(xml)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[out.index(next(line for line in out if line.startswith("worker"))) + 1 :] == [
        "gw0             2        32       0        32",
        "gw1             1         5       1         6",
    ]
