"""Recovery that tells: the recovery point is persisted at every roll, so an unclean restart validates only the
segments after it (as Kafka), a bit flip in old data no longer wipes the partition, every cut and deletion is
logged at WARNING and counted, and a full recovery happens only when the operator asks for it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager
from tests.support.storage import make_batch

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=512)
BATCHES = 200  # 10 records each: 2,000 records over ~40 segments


def _fill(root: Path, clock) -> list[int]:
    """A partition of BATCHES batches over many segments, then a crash (no clean shutdown)."""
    logs = LogManager([root], CONFIG, clock)
    logs.startup()
    log = logs.create_log("t", 0)
    for i in range(BATCHES):
        log.append(make_batch(10, ts=1000 + i, value_size=8))
    bases = [seg.base_offset for seg in log.segments]
    logs.close_without_shutdown()  # the crash: no checkpoints written now, no clean-shutdown marker
    return bases


def _segment(root: Path, base: int) -> Path:
    return root / "t-0" / f"{base:020d}.log"


def _flip_a_bit(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x10]))


def _restart(root: Path, clock, **kwargs) -> LogManager:
    logs = LogManager([root], CONFIG, clock, **kwargs)
    logs.startup()
    return logs


def test_bit_flip_in_the_oldest_segment_does_not_wipe_the_partition(tmp_path: Path, clock, caplog) -> None:
    bases = _fill(tmp_path, clock)
    assert len(bases) > 10
    _flip_a_bit(_segment(tmp_path, bases[0]), 200)  # inside the first batch's records (CRC-covered)
    with caplog.at_level(logging.WARNING, logger="broker_runtime.storage"):
        logs = _restart(tmp_path, clock)
    try:
        log = logs.get_log("t", 0)
        assert log is not None and log.log_end_offset == BATCHES * 10
        assert (logs.recovery_truncations, logs.recovery_bytes_dropped) == (0, 0)
        assert not [r for r in caplog.records if "recovery" in r.getMessage()]
    finally:
        logs.shutdown()


def test_a_torn_tail_is_cut_with_a_warning_and_counted(tmp_path: Path, clock, caplog) -> None:
    bases = _fill(tmp_path, clock)
    active = _segment(tmp_path, bases[-1])
    size = active.stat().st_size
    os.truncate(active, size - 7)
    with caplog.at_level(logging.WARNING, logger="broker_runtime.storage"):
        logs = _restart(tmp_path, clock)
    try:
        log = logs.get_log("t", 0)
        assert log is not None and log.log_end_offset == BATCHES * 10 - 10  # the torn batch is gone
        assert logs.recovery_truncations == 1
        [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert f"t-0: recovery truncated segment {active.name}" in line
        assert f"offset {BATCHES * 10 - 10}" in line
        dropped = logs.recovery_bytes_dropped
        assert f"{dropped} byte(s) dropped" in line and 0 < dropped < size
        assert "runs past the end of the file" in line
    finally:
        logs.shutdown()


def test_full_recovery_on_request_cuts_at_the_old_corruption_and_says_so(
    tmp_path: Path, clock, caplog
) -> None:
    bases = _fill(tmp_path, clock)
    _flip_a_bit(_segment(tmp_path, bases[1]), 200)
    with caplog.at_level(logging.WARNING, logger="broker_runtime.storage"):
        logs = _restart(tmp_path, clock, recover_all=True)
    try:
        log = logs.get_log("t", 0)
        assert (
            log is not None and log.log_end_offset == bases[1]
        )  # Kafka's rule: the log ends at the bad batch
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("full recovery requested" in w for w in warnings)
        assert any(
            f"truncated segment {bases[1]:020d}.log" in w and "CRC-32C mismatch" in w for w in warnings
        )
        deleted = [w for w in warnings if "recovery deleted segment" in w]
        assert len(deleted) == len(bases) - 2
        assert logs.recovery_truncations == len(bases) - 1
        assert logs.recovery_bytes_dropped > 0
    finally:
        logs.shutdown()


@pytest.mark.parametrize("marker", [True, False])
def test_without_the_request_a_clean_or_checkpointed_log_is_not_revalidated(
    tmp_path: Path, clock, marker: bool
) -> None:
    logs = LogManager([tmp_path], CONFIG, clock)
    logs.startup()
    log = logs.create_log("t", 0)
    for i in range(40):
        log.append(make_batch(10, ts=1000 + i, value_size=8))
    bases = [seg.base_offset for seg in log.segments]
    if marker:
        logs.shutdown()
    else:
        logs.close_without_shutdown()
    _flip_a_bit(_segment(tmp_path, bases[0]), 200)
    again = _restart(tmp_path, clock)
    try:
        reloaded = again.get_log("t", 0)
        assert reloaded is not None and reloaded.log_end_offset == 400
        assert again.recovery_truncations == 0
    finally:
        again.shutdown()
