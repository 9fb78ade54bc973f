"""Tests and time per tier of one run, from its JUnit XML (``pytest --junitxml=FILE``).

Usage: ``python -m tests.support.tier_report FILE [FILE ...]`` prints, per tier, the number of tests, the sum of
their times (setup, call and teardown, as JUnit counts them) and the slowest test modules. The tier of a test is the
``tier`` property tests/conftest.py records for it (tests/support/tiers.py finds it). The sum of the tests' times
is what the tier costs the machine; the suite's wall time is about that sum divided by the workers.

When the run recorded them (tests/support/suite_time.py: the ``worker`` and ``start`` properties), it then prints
each xdist worker's span: its tests, their seconds and when its first test began and its last ended, counted from
the first test of the run; a worker ending long before the others is the tail that scheduling can cut
(tests/support/schedule.py).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

from tests.support.tiers import TIERS


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    count: Counter[str] = Counter()
    seconds: defaultdict[str, float] = defaultdict(float)
    modules: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    spans: dict[str, list[float]] = {}  # worker -> [tests, seconds, first start, last end]
    for name in argv:
        for case in ET.parse(Path(name)).getroot().iter("testcase"):
            props = {p.get("name"): p.get("value", "?") for p in case.iter("property")}
            tier = props.get("tier", "?")
            took = float(case.get("time", "0") or 0)
            count[tier] += 1
            seconds[tier] += took
            modules[tier][case.get("classname", "?")] += took
            if "worker" in props and "start" in props:
                start = float(props["start"])
                span = spans.setdefault(props["worker"], [0, 0.0, start, start])
                span[0] += 1
                span[1] += took
                span[2] = min(span[2], start)
                span[3] = max(span[3], start + took)
    print(f"{'tier':10} {'tests':>6} {'seconds':>9}  slowest modules")
    for tier in [*TIERS, *sorted(set(count) - set(TIERS))]:
        if not count[tier]:
            continue
        top = sorted(modules[tier].items(), key=lambda kv: -kv[1])[:4]
        slow = ", ".join(f"{m.rsplit('.', 1)[-1]} {s:.0f}" for m, s in top)
        print(f"{tier:10} {count[tier]:6d} {seconds[tier]:9.0f}  {slow}")
    print(f"{'all':10} {sum(count.values()):6d} {sum(seconds.values()):9.0f}")
    if spans:
        origin = min(span[2] for span in spans.values())
        print(f"\n{'worker':10} {'tests':>6} {'seconds':>9} {'first':>7} {'last end':>9}")
        for worker, (tests, busy, first, last) in sorted(spans.items()):
            print(f"{worker:10} {tests:6.0f} {busy:9.0f} {first - origin:7.0f} {last - origin:9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
