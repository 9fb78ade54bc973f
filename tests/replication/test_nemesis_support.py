"""Parts of the nemesis (:mod:`tests.support.nemesis`) checked without a cluster.

The time-index checker (:func:`tests.support.nemesis.checkers._time_index`) on segment files the broker's own
storage wrote: a segment written by the index rule passes; one whose time index has no entry where the rule must
have written one fails, so a broker that never writes its time index cannot pass the nemesis. And the way
:func:`tests.support.nemesis.clocks.install` says why it could not install libfaketime: one line, whether apt-get
timed out, failed with several lines of output, or the machine is not root (apt-get's failures stand in for a
real apt-get, which cannot be made to time out or fail here)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from tests.support.nemesis import checkers, clocks
from tests.support.storage import FakeClock, make_batch

#: The nemesis's idempotent topic's ``index.interval.bytes`` (:data:`.runner.CLOCK_TOPIC_CONFIGS`).
INTERVAL = 256


def _segment(directory: Path, batches: int) -> Path:
    """The ``.timeindex`` of a one-segment log of ``batches`` batches (about 130 bytes each) written by
    :class:`PartitionLog`, left active (its index files preallocated, as in a running broker)."""
    clock = FakeClock()
    log = PartitionLog.load(
        directory, "t", 0, LogConfig(index_interval_bytes=INTERVAL), clock, needs_recovery=False
    )
    for _ in range(batches):
        log.append(make_batch(3, ts=clock.now, value_size=20))
        clock.advance(10)
    log.flush()
    (path,) = directory.glob("*.timeindex")
    return path


def test_a_segment_indexed_by_the_rule_passes_and_one_without_its_time_index_entries_fails(
    tmp_path: Path,
) -> None:
    path = _segment(tmp_path / "t-0", 20)
    assert checkers._time_index_entries(path), (
        "the storage wrote no time-index entry: the test proves nothing"
    )
    assert checkers._time_index(path, "t-0", INTERVAL) == []
    os.truncate(path, 0)
    failures = checkers._time_index(path, "t-0", INTERVAL)
    assert len(failures) == 1 and "has no entry" in failures[0], failures


def test_a_segment_smaller_than_the_rule_needs_passes_without_entries(tmp_path: Path) -> None:
    path = _segment(tmp_path / "t-0", 2)  # no entry before the first batch, and the second comes too soon
    assert checkers._time_index_entries(path) == []
    assert checkers._time_index(path, "t-0", INTERVAL) == []


@pytest.fixture
def no_libfaketime(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(clocks, "library", lambda: None)
    monkeypatch.setattr(clocks.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(clocks.os, "geteuid", lambda: 0)
    return monkeypatch


def test_an_apt_get_timeout_is_one_line(no_libfaketime: pytest.MonkeyPatch) -> None:
    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    no_libfaketime.setattr(clocks.subprocess, "run", run)
    assert clocks.install() == "apt-get update did not finish within 300 s"


def test_an_apt_get_failure_is_its_last_line(no_libfaketime: pytest.MonkeyPatch) -> None:
    stderr = "W: an old key\nE: Unable to locate package libfaketime\n\n"
    no_libfaketime.setattr(
        clocks.subprocess, "run", lambda command, **_: subprocess.CompletedProcess(command, 100, "", stderr)
    )
    assert clocks.install() == (
        "apt-get install -y libfaketime failed (exit 100: E: Unable to locate package libfaketime)"
    )


def test_not_root_is_said_without_running_apt_get(no_libfaketime: pytest.MonkeyPatch) -> None:
    no_libfaketime.setattr(clocks.os, "geteuid", lambda: 1000)
    no_libfaketime.setattr(clocks.subprocess, "run", lambda *_, **__: pytest.fail("apt-get ran"))
    failed = clocks.install()
    assert failed is not None and "\n" not in failed and failed.endswith("with apt-get needs root"), failed
