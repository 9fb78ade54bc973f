"""The suite's time budget, kept visible: a pytest plugin (loaded by tests/conftest.py) that prints, after every
run, the run's wall time against the whole suite's budget, what each xdist worker did and the slowest modules,
and that records in each test's JUnit properties the worker that ran it and when it started.

Budget: :data:`BUDGET_S`, the whole suite (``bash jobs/dev.sh test``, every tier, 3 xdist workers) on 2 cores. The
summary's figures, per xdist worker: its test-seconds (``busy``: setup, call and teardown of its tests) and when
its last test ended, counted from the session start; a worker that ends long before the others had nothing left
to take while one group still ran (see :mod:`tests.support.schedule`). A run of the whole suite (no path, no
``-m``, no ``-k``) over the budget prints a WARNING line; the run does not fail on it (times depend on the load of
the machine), the README's Tests section says what to do.

JUnit properties (``--junitxml``): ``worker`` (``gw0``...; ``main`` without xdist) and ``start`` (seconds since the
epoch, set when the test's setup begins); :mod:`tests.support.tier_report` reads them to show each worker's span.

Threading: pytest's hooks run in the main thread of each process; the summary is made in the controller (or the
single process without xdist), from the reports the workers send.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

#: The whole suite's budget on 2 cores, in seconds (README, "Tests").
BUDGET_S = 15 * 60
#: How many modules the summary names.
SLOWEST = 8


def _worker_of(report: pytest.TestReport) -> str:
    node = getattr(report, "node", None)  # set by xdist on the controller
    gateway = getattr(node, "gateway", None)
    return str(getattr(gateway, "id", None) or "main")


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m {rest:02d}s"


class SuiteTime:
    """Collects the reports of one run (in the controller) and prints the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.time()
        self.busy: defaultdict[str, float] = defaultdict(float)
        self.tests: defaultdict[str, int] = defaultdict(int)
        self.ended: dict[str, float] = {}
        self.modules: defaultdict[str, float] = defaultdict(float)
        self.module_worker: dict[str, str] = {}

    def worker(self) -> str | None:
        """This process's xdist worker id, None in the controller or a run without xdist."""
        workerinput = getattr(self.config, "workerinput", None)
        return None if workerinput is None else str(workerinput["workerid"])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        # In the process that runs the test: the JUnit XML of the run gets these with the teardown report.
        item.user_properties.append(("worker", self.worker() or "main"))
        item.user_properties.append(("start", f"{time.time():.2f}"))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.worker() is None:  # the reports of every worker reach the controller
            worker = _worker_of(report)
            self.busy[worker] += report.duration
            module = report.nodeid.split("::")[0]
            self.modules[module] += report.duration
            self.module_worker[module] = worker
            if report.when == "teardown":
                self.tests[worker] += 1
                self.ended[worker] = max(self.ended.get(worker, 0.0), report.stop or time.time())

    def whole_suite(self) -> bool:
        """The run selected every test: no path, no marker or keyword expression."""
        option = self.config.option
        paths_given = self.config.args_source == pytest.Config.ArgsSource.ARGS
        return (
            not paths_given
            and not option.markexpr
            and not option.keyword
            and not getattr(option, "soak", False)
        )

    @pytest.hookimpl(trylast=True)  # after the other summaries, so that the wall time counts them too
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.worker() is not None or not self.tests:
            return
        wall = time.time() - self.started
        write = terminalreporter.write_line
        terminalreporter.section("suite time")
        whole = self.whole_suite()
        verdict = (
            f"{_clock(BUDGET_S - wall)} to spare" if wall <= BUDGET_S else f"{_clock(wall - BUDGET_S)} OVER"
        )
        write(
            f"wall {_clock(wall)} (pytest session) against the whole suite's budget of {_clock(BUDGET_S)} on 2 "
            + (f"cores: {verdict}" if whole else "cores (a part of the suite ran)")
        )
        for worker in sorted(self.busy):
            end = self.ended.get(worker, self.started) - self.started
            write(
                f"  {worker}: {self.tests[worker]} tests, busy {self.busy[worker]:.0f} s, last test ended at "
                f"{_clock(end)}"
            )
        top = sorted(self.modules.items(), key=lambda kv: -kv[1])[:SLOWEST]
        write(
            "slowest modules (test-seconds, worker): "
            + ", ".join(f"{m.rsplit('/', 1)[-1]} {s:.0f} {self.module_worker[m]}" for m, s in top)
        )
        if whole and wall > BUDGET_S:
            write(
                f"WARNING: the whole suite took {_clock(wall)}, over its budget of {_clock(BUDGET_S)}: see the "
                "README's Tests section (cut test-seconds of the slowest modules before adding more)",
                red=True,
            )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SuiteTime(config), "pylog-suite-time")
