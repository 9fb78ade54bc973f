"""Every write in a log directory that Kafka routes to its LogDirFailureChannel fails the directories here too, on
whichever thread it ran: the manager goes offline (every later log I/O refused) and its channel's listener (the
broker's halt, :mod:`broker_runtime.server.node.broker`) is called once, on the failing thread, with a reason naming
the write. And a partition deleted while the cleaner cleans it: the cleaning is aborted and waited for, so nothing
of it lands in the directory of the topic created again under that name.

The refused writes are real: the file a write goes through (the temporary file of an atomic replacement, a
``.cleaned`` segment) is a symlink to ``/dev/full``, whose writes fail with ENOSPC as on a full disk; a retention
deletion's rename meets a non-empty directory in its way (EISDIR).
"""

from __future__ import annotations

import errno
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_runtime.errors import LogDirOfflineError
from broker_runtime.replication.epoch_cache import LeaderEpochCache
from broker_runtime.storage import cleaner
from broker_runtime.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager
from broker_runtime.storage.producer_state import snapshot_path
from tests.storage.test_cleaner import keyed_batch
from tests.support.storage import FakeClock, make_batch

pytestmark = pytest.mark.timeout(30)


def _refuse(path: Path) -> None:
    """Make every write through ``path`` fail with ENOSPC (a symlink to /dev/full)."""
    path.symlink_to("/dev/full")


def _tmp(path: Path) -> Path:
    """The temporary file ``write_atomically`` writes ``path`` through."""
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")


class _Failures:
    """The channel's listener: what it was told, on which thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None, str]] = []
        self.called = threading.Event()

    def __call__(self, reason: str, exc: OSError) -> None:
        self.calls.append((reason, exc.errno, threading.current_thread().name))
        self.called.set()


@pytest.fixture
def manager(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[LogManager, _Failures]]:
    mgr = LogManager([tmp_path], LogConfig(segment_bytes=300, min_cleanable_dirty_ratio=0.0), clock)
    failures = _Failures()
    mgr.dir_failure.on_offline = failures
    mgr.startup()
    yield mgr, failures
    mgr.close_without_shutdown()


def _compacted(mgr: LogManager, clock: FakeClock, topic: str = "c", records: int = 30) -> None:
    log = mgr.create_log(topic, 0, {"cleanup.policy": "compact"})  # the existing one the second time
    for i in range(records):
        log.append(keyed_batch([(b"k%d" % (i % 3), b"v%d" % i)], clock.now))


def _checkpoint(mgr: LogManager, tmp_path: Path, clock: FakeClock) -> str:
    mgr.create_log("t", 0).append(make_batch(2))
    _refuse(_tmp(tmp_path / "recovery-point-offset-checkpoint"))
    with pytest.raises(OSError):
        mgr.checkpoint()
    return "recovery-point-offset-checkpoint"


def _recovery_point_after_roll(mgr: LogManager, tmp_path: Path, clock: FakeClock) -> str:
    log = mgr.create_log("t", 0)
    log.append(make_batch(2))
    _refuse(_tmp(tmp_path / "recovery-point-offset-checkpoint"))
    log.roll()  # its flush thread moves the recovery point, the recovery-point thread writes the checkpoint
    return "recovery-point-offset-checkpoint"


def _producer_snapshot_after_roll(mgr: LogManager, tmp_path: Path, clock: FakeClock) -> str:
    log = mgr.create_log("t", 0)
    log.append(make_batch(2))
    path = snapshot_path(log.dir, log.log_end_offset)
    _refuse(path.with_name(f"{path.name}.{os.getpid()}.roll.tmp"))
    log.roll()
    return "t-0 (producer snapshot"


def _cleaned_segment(mgr: LogManager, tmp_path: Path, clock: FakeClock) -> str:
    _compacted(mgr, clock)
    _refuse(tmp_path / "c-0" / "00000000000000000000.log.cleaned")
    assert mgr.run_cleaner(force=True) == {}
    return "c-0 (log cleaning)"


def _cleaner_checkpoint(mgr: LogManager, tmp_path: Path, clock: FakeClock) -> str:
    _compacted(mgr, clock)
    _refuse(_tmp(tmp_path / CLEANER_OFFSET_CHECKPOINT))
    assert mgr.run_cleaner(force=True) == {}
    return CLEANER_OFFSET_CHECKPOINT


def _retention(mgr: LogManager, tmp_path: Path, clock: FakeClock) -> str:
    log = mgr.create_log("r", 0, {"retention.ms": "1000"})
    for _ in range(10):
        log.append(make_batch(2, timestamps=[clock.now, clock.now]))
    blocker = log.dir / (log.segments[0].log_path.name + ".deleted")  # the rename meets a non-empty directory
    blocker.mkdir()
    (blocker / "x").write_bytes(b"x")
    clock.advance(1001)
    mgr.run_retention()
    assert mgr.periodic_failures == {}, "a failed directory is not a periodic failure"
    return "r-0 (segment deletion)"


def _topic_config(mgr: LogManager, tmp_path: Path, clock: FakeClock) -> str:
    log = mgr.create_log("t", 0)
    _refuse(_tmp(log.dir / "topic.config"))
    with pytest.raises(OSError):
        mgr.set_topic_overrides("t", {"retention.ms": "5"})
    return "t-0 (topic.config)"


def _partition_metadata(mgr: LogManager, tmp_path: Path, clock: FakeClock) -> str:
    log = mgr.create_log("t", 0)
    _refuse(_tmp(log.dir / "partition.metadata"))
    with pytest.raises(OSError):
        mgr.assign_topic_id(log, uuid.uuid4())
    return "t-0 (partition.metadata)"


def _leader_epoch_checkpoint(mgr: LogManager, tmp_path: Path, clock: FakeClock) -> str:
    log = mgr.create_log("t", 0)
    cache = LeaderEpochCache(log.dir, log.dir_failure)
    _refuse(_tmp(log.dir / "leader-epoch-checkpoint"))
    with pytest.raises(OSError):
        cache.assign(1, 0)
    return "t-0 (leader-epoch-checkpoint)"


@pytest.mark.parametrize(
    "write",
    [
        _checkpoint,
        _recovery_point_after_roll,
        _producer_snapshot_after_roll,
        _cleaned_segment,
        _cleaner_checkpoint,
        _retention,
        _topic_config,
        _partition_metadata,
        _leader_epoch_checkpoint,
    ],
    ids=lambda write: write.__name__.strip("_"),
)
def test_a_refused_write_fails_the_log_dirs(
    manager: tuple[LogManager, _Failures],
    tmp_path: Path,
    clock: FakeClock,
    write: Callable[[LogManager, Path, FakeClock], str],
) -> None:
    mgr, failures = manager
    what = write(mgr, tmp_path, clock)
    assert failures.called.wait(10), f"writing {what} failed and the log dirs stayed online"
    [(reason, errno_value, _thread)] = failures.calls
    assert reason.startswith("writing ") and what in reason, reason
    if errno_value == errno.ENOSPC:
        assert "free space on that file system" in reason
    assert mgr.dir_failure.offline == reason
    with pytest.raises(LogDirOfflineError):
        mgr.checkpoint()
    assert len(failures.calls) == 1


def test_a_checkpoint_refused_at_shutdown_leaves_no_clean_shutdown_marker(
    manager: tuple[LogManager, _Failures], tmp_path: Path, clock: FakeClock
) -> None:
    """A clean shutdown whose checkpoints are refused fails the dirs too, writes no clean-shutdown marker (the next
    start must recover: the checkpoints on disk are older than the logs) and still releases the directories."""
    mgr, failures = manager
    mgr.create_log("t", 0).append(make_batch(2))
    _refuse(_tmp(tmp_path / "log-start-offset-checkpoint"))
    mgr.shutdown()
    assert [reason for reason, _, _ in failures.calls] == [mgr.dir_failure.offline]
    assert "log-start-offset-checkpoint" in failures.calls[0][0]
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    again = LogManager([tmp_path], LogConfig(), clock)
    again.startup()  # the directory lock was released
    assert again.get_log("t", 0) is not None and again.get_log("t", 0).log_end_offset == 2
    again.shutdown()


def test_background_writes_report_on_their_own_thread(
    manager: tuple[LogManager, _Failures], tmp_path: Path, clock: FakeClock
) -> None:
    """The roll flush fails on its executor's thread and says so there (the broker's listener is thread-safe)."""
    mgr, failures = manager
    _producer_snapshot_after_roll(mgr, tmp_path, clock)
    assert failures.called.wait(10)
    assert failures.calls[0][2].startswith("pylog-roll-flush")


def test_deleting_a_partition_aborts_its_cleaning_and_waits_for_it(
    manager: tuple[LogManager, _Failures], tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's asyncDelete aborts the partition's cleaning and waits for the cleaner first. The cleaner is held at
    its first ``.cleaned`` file while the topic is deleted: the deletion waits, the cleaner gives up at its next
    check (its ``.cleaned`` removed, nothing swapped in), and the topic created again under that name gets no file
    of the old one's cleaning and starts with no cleaner checkpoint entry."""
    mgr, failures = manager
    key = ("c", 0)
    _compacted(mgr, clock)
    assert key in mgr.run_cleaner(force=True)  # a first pass checkpoints its first dirty offset
    assert key in OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read()
    _compacted(mgr, clock)  # dirty again
    writing, proceed = threading.Event(), threading.Event()
    real_open_cleaned = cleaner.open_cleaned

    def held_open_cleaned(dir: Path, base: int):  # noqa: ANN202 - the real one's type
        writing.set()
        assert proceed.wait(10)
        return real_open_cleaned(dir, base)

    monkeypatch.setattr(cleaner, "open_cleaned", held_open_cleaned)
    cleaned: dict = {}
    cleaning = threading.Thread(target=lambda: cleaned.update(mgr.run_cleaner(force=True)))
    cleaning.start()
    assert writing.wait(10)
    deleting = threading.Thread(target=mgr.delete_log, args=("c", 0))
    deleting.start()
    for _ in range(1000):  # until the deletion waits for the cleaner (or, without the abort, has finished)
        if not deleting.is_alive() or mgr._cleaning_paused[key]:
            break
        deleting.join(0.005)
    # Without the abort the deletion did not wait: the topic comes back while the cleaner still writes.
    if not deleting.is_alive():
        mgr.create_log("c", 0, {"cleanup.policy": "compact"})
    proceed.set()
    cleaning.join(10)
    deleting.join(10)
    assert not cleaning.is_alive() and not deleting.is_alive()
    assert cleaned == {}, "the aborted cleaning reported a result"
    again = mgr.get_log("c", 0) or mgr.create_log("c", 0, {"cleanup.policy": "compact"})
    leftovers = [p.name for p in again.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert leftovers == [], "the old topic's cleaning wrote into the new one's directory"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith("-delete")] == []
    assert key not in OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read()
    assert failures.calls == [] and mgr.dir_failure.offline is None
    assert again.log_end_offset == 0
