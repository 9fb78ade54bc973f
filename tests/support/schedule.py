"""The order in which xdist hands out the suite's work: the longest work units first, so that no worker is left
running one long group at the end while the others are idle.

Work units: pytest-xdist's ``--dist loadgroup`` hands a worker one unit at a time, when the worker has two tests
or fewer left: a group of tests (``xdist_group``, :func:`tests.support.tiers.xdist_groups`: a module on the
shared Spark session or on a shared module fixture) or a single ungrouped test. xdist takes the units in the
order of the collection (with ``--no-loadscope-reorder``; by default it sorts them by their number of tests, which
put the 57-second README test and other single long tests last and left a tail of idle workers).
:func:`longest_first` orders the collected items (in every worker alike, since xdist checks that the workers
collected the same list) by the estimated seconds of their unit, longest first: the greedy "longest processing
time first" order, within 4/3 of the best makespan and in practice within seconds of it here.

Estimates: the mean seconds of a test of each tier in a whole-suite run (:data:`TIER_SECONDS`, from
``python -m tests.support.tier_report`` of the CI's JUnit XML), summed over the unit. They need no upkeep when
tests are added; they are rough (a module of many fast Spark tests counts as long) but only the order depends
on them, never a result, and the long units (Spark modules, Spark drivers of their own, Apache Kafka peers)
come first.

Within a unit the tests keep their collection order (the sort is stable; a group's tests may depend on it), and
units of equal estimate too. Loaded as a plugin by tests/conftest.py; it orders what is left after ``-m``/``-k``.
"""

from __future__ import annotations

import pytest

#: Mean seconds per test of each tier, measured over a whole-suite run on 2 cores with 3 workers (3065 tests).
TIER_SECONDS = {
    "unit": 0.07,
    "broker": 0.24,
    "process": 2.3,
    "spark": 4.3,
    "spark_app": 29.0,
    "peers": 3.9,
}


def unit_of(item: pytest.Item) -> str:
    """The work unit xdist's loadgroup scheduler puts the item in: its xdist_group, or the test alone."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    return item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After the deselection (``-m``, ``-k``) and the tier and group marks (tests/conftest.py): under ``--dist
    loadgroup`` (an xdist worker has ``loadgroup`` set; its own ``dist`` is "no"), the longest units first; other
    runs keep the collection order."""
    if getattr(config.option, "loadgroup", False) or getattr(config.option, "dist", None) == "loadgroup":
        tiers = {
            item.nodeid: next((m.name for m in item.iter_markers() if m.name in TIER_SECONDS), "unit")
            for item in items
        }
        longest_first(items, tiers)


def longest_first(items: list[pytest.Item], tier_of: dict[str, str]) -> None:
    """Reorder ``items`` in place: the units with the most estimated seconds first (``tier_of``: node id ->
    tier)."""
    estimate: dict[str, float] = {}
    for item in items:
        unit = unit_of(item)
        estimate[unit] = estimate.get(unit, 0.0) + TIER_SECONDS.get(tier_of.get(item.nodeid, "unit"), 0.0)
    position = {id(item): index for index, item in enumerate(items)}
    first_of: dict[str, int] = {}
    for item in items:
        first_of.setdefault(unit_of(item), position[id(item)])
    items.sort(key=lambda item: (-estimate[unit_of(item)], first_of[unit_of(item)], position[id(item)]))
