"""Parts of the nemesis (:mod:`tests.support.nemesis`) checked without a cluster.

The time-index checker (:func:`tests.support.nemesis.checkers._time_index`) on segment files the broker's own
storage wrote: a segment written by the index rule passes; one whose time index has no entry where the rule must
have written one fails, so a broker that never writes its time index cannot pass the nemesis. (How the nemesis's
installs of libfaketime and libfuse 2 say why they failed: ``tests/test_apt_install.py``.)"""

from __future__ import annotations

import os
from pathlib import Path

from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from tests.support.nemesis import checkers
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
