"""The benchmark suite must keep running: every section runs in quick mode and yields sane figures.

Speed itself is judged by ``bash jobs/dev.sh bench``, never here. The Spark sections (writer, reader) run on
the test run's one Spark session (the connector tests' ``spark`` fixture), which they reuse when active.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

import pytest

from jobs.bench.__main__ import QUICK_NOTE, SECTIONS, main
from jobs.bench.common import Figure, Result, Timing, timed, timed_interleaved
from tests.support import tiers

SPARK_SECTIONS = {"writer", "reader", "sink", "stream", "anchors"}
VERDICTS = ("[met]", "[NOT met]", "targets not met")


def _section_param(name: str) -> Any:
    """The section as a test parameter, tiered by what its ``run`` starts (the test calls it by name, which the
    automatic scan of the test's own code cannot follow)."""
    run = importlib.import_module(f"jobs.bench.{name}").run
    return pytest.param(name, marks=pytest.mark.tier_floor(tiers.Scanner().tier_of(run)))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [_section_param(s) for s in SECTIONS if s not in SPARK_SECTIONS])
def test_section_runs_quick_and_prints_no_verdict(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m jobs.bench --quick NAME`` runs the section: sane figures, printed without any verdict."""
    _runs_quick(name, monkeypatch, capsys)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [_section_param(s) for s in SECTIONS if s in SPARK_SECTIONS])
def test_spark_section_runs_quick_and_prints_no_verdict(
    name: str, spark: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same for a section that runs on Spark: the suite's session is active before the section asks for one."""
    _runs_quick(name, monkeypatch, capsys)


def _runs_quick(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"jobs.bench.{name}")
    section_run = module.run
    results: list[Result] = []

    def recording_run(quick: bool) -> list[Result]:
        assert quick
        results.extend(section_run(quick))
        return results

    monkeypatch.setattr(module, "run", recording_run)
    assert main(["--quick", name]) == 0
    out = capsys.readouterr().out

    assert results, f"section {name} reported nothing"
    for result in results:
        assert isinstance(result, Result)
        assert result.section == name
        assert result.value == result.value and result.value >= 0, result  # not NaN, not negative
        assert result.line(quick=True) in out.splitlines()
    assert QUICK_NOTE in out
    for verdict in VERDICTS:
        assert verdict not in out, out


def test_full_mode_line_shows_median_spread_and_verdict() -> None:
    """Full mode prints ``median (min-max)`` and the verdict; quick mode prints the bare figure only."""
    result = Result.measured("records", "encode", Figure(5.5, 4.25, 6.0), "M/s", target=">= 5M/s", met=True)
    assert _words(result.line()) == "records encode 5.50 (4.25-6.00) M/s (target >= 5M/s) [met]"
    missed = Result("storage", "ratio", 0.5, "x", ">= 0.8", False)
    assert _words(missed.line()) == "storage ratio 0.5 x (target >= 0.8) [NOT met]"
    assert _words(result.line(quick=True)) == "records encode 5.50 M/s (target >= 5M/s)"
    assert _words(missed.line(quick=True)) == "storage ratio 0.5 x (target >= 0.8)"


def _words(line: str) -> str:
    return " ".join(line.split())


def test_timed_keeps_every_run_after_the_warmup() -> None:
    """``timed`` discards the warm-up run and reports the median and the min-max of the others."""
    delays = iter([0.05, 0.03, 0.0, 0.01, 0.02])

    def work() -> None:
        time.sleep(next(delays))

    timing = timed(work, repeat=4, warmup=1)
    assert len(timing.runs) == 4
    assert 0.01 <= timing.median < 0.03
    assert min(timing.runs) < 0.01 and 0.03 <= max(timing.runs) < 0.05
    rate = timing.rate(100)
    assert rate.low < rate.value < rate.high and rate.value == 100 / timing.median


def test_timed_interleaved_alternates_the_functions_after_the_warmup() -> None:
    calls: list[str] = []
    first, second = timed_interleaved(
        [lambda: calls.append("a"), lambda: calls.append("b")], repeat=2, warmup=1
    )
    assert calls == ["a", "b"] * 3 and len(first.runs) == len(second.runs) == 2


def test_timing_figures() -> None:
    """Rates invert the spread (the slowest run gives the lowest rate); scaled times keep it in order."""
    timing = Timing((2.0, 1.0, 4.0))
    assert timing.rate(8) == Figure(4.0, 2.0, 8.0)
    assert timing.scaled(1000) == Figure(2000.0, 1000.0, 4000.0)


@pytest.mark.timeout(60)
def test_broker_cpu_is_read_around_the_measured_work_only(tmp_path: Any) -> None:
    """``broker_pid`` finds a real broker child by its data directory and ``process_cpu_s`` deltas count the
    CPU of a window (all threads) but not the process's start-up before it."""
    import subprocess
    import sys

    from broker_runtime.launch import broker_process
    from jobs.bench.common import broker_pid, process_cpu_s

    with broker_process(str(tmp_path)):
        pid = broker_pid(str(tmp_path))
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert b"broker_runtime" in f.read()
        assert process_cpu_s(pid) > 0.05  # the broker's start-up: interpreter and imports
        before = process_cpu_s(pid)
        time.sleep(0.5)
        assert process_cpu_s(pid) - before < 0.1  # an idle broker: the start-up is not in the delta
    burn = (
        "import sys, threading, time\n"
        "print('ready', flush=True); sys.stdin.readline()\n"
        "def spin():\n"
        "    end = time.thread_time() + 0.4\n"
        "    while time.thread_time() < end: pass\n"
        "t = threading.Thread(target=spin); t.start(); t.join()\n"
        "print('done', flush=True); sys.stdin.readline()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline() == "ready\n"  # its start-up is over: not in the delta
        before = process_cpu_s(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"
        spent = process_cpu_s(child.pid) - before
        assert 0.35 <= spent <= 0.7, spent  # the worker thread's 0.4 s counted, the start-up not
        child.stdin.write("end\n")
        child.stdin.flush()
        assert child.wait(10) == 0
    finally:
        if child.poll() is None:
            child.kill()


def test_reader_rss_tool_reads_every_row_by_both_transports(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m jobs.bench.reader_rss`` writes N rows, reads them back by the direct scan and by Fetch, and
    prints the peak RSS after each step (the reader's memory bound is judged by comparing N and 10 x N)."""
    from jobs.bench.reader_rss import main as reader_rss

    assert reader_rss(["--rows", "20000"]) == 0
    out = capsys.readouterr().out
    for line in ("read local: rows=20,000;", "read fetch: rows=20,000;", "broker peak RSS"):
        assert line in out, out
