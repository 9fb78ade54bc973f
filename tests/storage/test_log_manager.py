"""LogManager: layout, checkpoints (Kafka's text format), clean-shutdown marker, overrides, topic deletion."""

from __future__ import annotations

import logging

import pytest

from broker_runtime.errors import ConfigError, LogDirOfflineError, StorageError
from broker_runtime.fsutil import read_log_dir_failure, record_log_dir_failure
from broker_runtime.storage.checkpoint import OffsetCheckpointFile
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager, parse_partition_dir
from tests.support.storage import decode_all, idempotent_batch, make_batch


def test_layout_checkpoints_and_clean_restart(tmp_path, clock):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    mgr = LogManager(dirs, LogConfig(segment_bytes=500), clock)
    mgr.startup()
    logs = {p: mgr.create_log("orders-eu", p) for p in range(3)}
    assert mgr.create_log("orders-eu", 0) is logs[0]
    for p, log in logs.items():
        for _ in range(5 + p):
            log.append(make_batch(4))
    logs[1].delete_records_before(6)
    placed = {p: log.dir.parent.name for p, log in logs.items()}
    assert set(placed.values()) == {"d1", "d2"}  # fewest-partitions placement
    assert logs[0].dir.name == "orders-eu-0"
    mgr.shutdown()
    for d in dirs:
        assert (d / ".kafka_cleanshutdown").exists()
        text = (d / "recovery-point-offset-checkpoint").read_text()
        lines = text.splitlines()
        mine = sorted(p for p, name in placed.items() if name == d.name)
        assert lines[0] == "0" and lines[1] == str(len(mine))
        assert lines[2:] == [f"orders-eu {p} {4 * (5 + p)}" for p in mine]
    starts = {}
    for d in dirs:
        starts.update(OffsetCheckpointFile(d / "log-start-offset-checkpoint").read())
    assert starts[("orders-eu", 1)] == 6
    # Index files of closed segments are trimmed to their entries.
    for log in logs.values():
        for seg in log.segments:
            assert seg.offset_index.path.stat().st_size == 8 * seg.offset_index.entries
    mgr2 = LogManager(dirs, LogConfig(segment_bytes=500), clock)
    mgr2.startup()
    for d in dirs:
        assert not (d / ".kafka_cleanshutdown").exists()
    again = mgr2.all_logs()
    assert sorted(again) == [("orders-eu", 0), ("orders-eu", 1), ("orders-eu", 2)]
    assert again[("orders-eu", 1)].log_start_offset == 6
    log2 = again[("orders-eu", 2)]
    assert log2.log_end_offset == 28
    offsets, offset = [], 0
    while offset < log2.log_end_offset:
        data = log2.read(offset, 1 << 20)
        offsets += [r[1] for r in decode_all(data.records)]
        offset = data.next_offset
    assert offsets == list(range(28))
    mgr2.shutdown()


def test_unclean_restart_recovers(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], LogConfig(), clock)
    mgr.startup()
    log = mgr.create_log("t", 0)
    for _ in range(3):
        log.append(make_batch(2))
    mgr.checkpoint()
    seg_path = log.active_segment.log_path
    size = seg_path.stat().st_size
    mgr.close_without_shutdown()
    with open(seg_path, "r+b") as f:
        f.truncate(size - 3)
    mgr2 = LogManager([tmp_path / "d"], LogConfig(), clock)
    mgr2.startup()
    assert mgr2.get_log("t", 0).log_end_offset == 4
    mgr2.shutdown()


def test_directory_lock(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], LogConfig(), clock)
    mgr.startup()
    other = LogManager([tmp_path / "d"], LogConfig(), clock)
    with pytest.raises(StorageError, match="in use"):
        other.startup()
    mgr.shutdown()


def test_topic_overrides_persist_and_apply(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], LogConfig(), clock)
    mgr.startup()
    log = mgr.create_log("ts", 0, {"message.timestamp.type": "LogAppendTime", "segment.bytes": "1000"})
    assert log.config.log_append_time and log.config.segment_bytes == 1000
    assert mgr.create_log("ts", 1).config.segment_bytes == 1000  # new partitions inherit
    with pytest.raises(ConfigError, match="segment.bytes"):
        mgr.create_log("bad", 0, {"segment.bytes": "many"})
    mgr.shutdown()
    mgr2 = LogManager([tmp_path / "d"], LogConfig(), clock)
    mgr2.startup()
    assert mgr2.topic_overrides("ts") == {"message.timestamp.type": "LogAppendTime", "segment.bytes": "1000"}
    assert mgr2.get_log("ts", 0).append(make_batch(1)).log_append_time_ms == clock.now
    mgr2.shutdown()


def test_retention_pass_over_all_logs(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], LogConfig(segment_bytes=300, retention_ms=1000), clock)
    mgr.startup()
    log = mgr.create_log("r", 0)
    for _ in range(10):
        log.append(make_batch(2, timestamps=[clock.now, clock.now]))
    assert len(log.segments) > 2
    clock.advance(1001)
    mgr.run_retention()
    assert len(log.segments) == 1 and log.log_start_offset == log.log_end_offset == 20
    mgr.shutdown()


def test_checkpoint_file_format_and_errors(tmp_path):
    f = OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint")
    f.write({("b", 1): 7, ("a-x", 0): 12})
    assert f.path.read_bytes() == b"0\n2\na-x 0 12\nb 1 7\n"
    assert f.read() == {("b", 1): 7, ("a-x", 0): 12}
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()
    f.path.write_text("0\n3\na 0 1\n")
    with pytest.raises(StorageError, match="announces 3 entries, found 1"):
        f.read()
    f.path.write_text("1\n0\n")
    with pytest.raises(StorageError, match="version"):
        f.read()


def test_parse_partition_dir():
    assert parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir("t-0.abc-delete") is None
    assert parse_partition_dir("noDash") is None


@pytest.mark.parametrize(("follows", "expected_hw"), [(False, 4), (True, 10)])
def test_restart_keeps_the_checkpointed_high_watermark_of_replicated_logs(
    tmp_path, clock, follows, expected_hw
):
    mgr = LogManager([tmp_path / "d"], LogConfig(), clock, hw_follows_leo=False)
    mgr.startup()
    log = mgr.create_log("r", 0)
    assert not log.hw_follows_leo
    log.append(make_batch(10))
    assert log.high_watermark == 0  # nothing replicated yet
    log.high_watermark = 4  # what replication committed
    mgr.shutdown()
    assert OffsetCheckpointFile(tmp_path / "d" / "replication-offset-checkpoint").read() == {("r", 0): 4}

    mgr2 = LogManager([tmp_path / "d"], LogConfig(), clock, hw_follows_leo=follows)
    mgr2.startup()
    restarted = mgr2.get_log("r", 0)
    assert (restarted.log_end_offset, restarted.high_watermark) == (10, expected_hw)
    # create_log may choose per log; an existing log is returned unchanged.
    assert mgr2.create_log("r", 0, hw_follows_leo=not follows) is restarted
    assert mgr2.create_log("other", 0, hw_follows_leo=not follows).hw_follows_leo is (not follows)
    mgr2.shutdown()


def test_expired_producers_are_removed_in_every_log(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], LogConfig(producer_id_expiration_ms=1000), clock)
    mgr.startup()
    for partition in (0, 1):
        mgr.create_log("px", partition).append(idempotent_batch(0, count=1, ts=clock.now))
    clock.advance(999)
    mgr.remove_expired_producers()
    assert all(mgr.get_log("px", p).producer_state.producers for p in (0, 1))
    clock.advance(1)
    mgr.remove_expired_producers()
    assert not any(mgr.get_log("px", p).producer_state.producers for p in (0, 1))
    mgr.shutdown()


def test_a_failed_retention_pass_warns_counts_and_leaves_other_logs_alone(tmp_path, clock, caplog):
    """A log the pass cannot work on (closed by a deletion meanwhile: a StorageError) is a periodic failure; a
    segment file the disk refuses to rename fails the log dirs instead (test_log_dir_failures)."""
    mgr = LogManager([tmp_path / "d"], LogConfig(segment_bytes=300, retention_ms=1000), clock)
    mgr.startup()
    stuck, fine = mgr.create_log("stuck", 0), mgr.create_log("fine", 0)
    for log in (stuck, fine):
        for _ in range(10):
            log.append(make_batch(2, timestamps=[clock.now, clock.now]))
    stuck.close()
    clock.advance(1001)
    with caplog.at_level("WARNING", logger="broker_runtime.storage.log_manager"):
        mgr.run_retention()
    assert len(fine.segments) == 1 and fine.log_start_offset == 20
    assert mgr.periodic_failures["retention"] == 1
    assert any("retention of stuck-0 failed" in r.getMessage() for r in caplog.records)
    mgr.shutdown()


def test_a_partition_of_a_249_character_topic_is_moved_aside_and_deleted(tmp_path, clock):
    """The longest legal topic name: ``<topic>-<p>.<32 hex>-stray`` would exceed a 255-byte file name, so the
    topic is cut short (Kafka's ``logDirNameWithSuffixCappedLength``) and the rename succeeds."""
    topic = "t" * 249
    mgr = LogManager([tmp_path], LogConfig(), clock)
    mgr.startup()
    for p in (0, 11):
        mgr.create_log(topic, p).append(make_batch(2))
    aside = mgr.mark_stray(topic, 11)
    assert aside is not None and aside.is_dir() and len(aside.name) == 255
    assert aside.name.endswith("-stray") and "-11." in aside.name
    assert mgr.delete_log(topic, 0)
    assert mgr.all_logs() == {}
    mgr.shutdown()
    again = LogManager([tmp_path], LogConfig(), clock)
    again.startup()
    assert again.all_logs() == {} and aside.is_dir()
    again.shutdown()


def test_an_offline_manager_refuses_every_log_io_before_touching_a_file(tmp_path, clock):
    """After mark_offline (a write the disk refused): appends, reads, rolls, creations, checkpoints and the
    background passes are refused or skipped before any I/O, and a shutdown writes no clean-shutdown marker
    (Kafka's hasOfflineLogDir check at the top of LocalLog.maybeHandleIOException)."""
    mgr = LogManager([tmp_path], LogConfig(segment_bytes=300), clock)
    mgr.startup()
    log = mgr.create_log("t", 0)
    log.append(make_batch(2))
    mgr.checkpoint()
    files = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    sizes = {p: p.stat().st_size for p in files}
    mgr.mark_offline("writing t-1 raised OSError: [Errno 28] No space left on device")
    for refused in (
        lambda: log.append(make_batch(2)),
        lambda: log.append_as_follower(make_batch(2)),
        lambda: log.read(0, 1 << 20),
        log.roll,
        log.flush,
        lambda: log.truncate_to(0),
        lambda: mgr.create_log("u", 0),
        mgr.checkpoint,
        lambda: mgr.set_topic_overrides("t", {"retention.ms": "1"}),
    ):
        with pytest.raises(LogDirOfflineError, match="No space left on device"):
            refused()
    assert not log.flush_if_due(clock() + 10**9)
    mgr.run_retention()
    assert mgr.periodic_failures == {} and log.log_end_offset == 2
    mgr.shutdown()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    assert {p: p.stat().st_mtime_ns for p in files} == files
    assert {p: p.stat().st_size for p in files} == sizes


def test_a_start_removes_the_record_of_the_last_halt(tmp_path, clock, caplog):
    """The record a broker halting on a failed write left (broker_runtime.fsutil.LOG_DIR_FAILURE_FILE) goes once a
    start loaded the directory, with one WARNING line saying what it said."""
    record_log_dir_failure(tmp_path, "Shutdown broker 0 because all log dirs in x have failed", 28)
    mgr = LogManager([tmp_path], LogConfig(), clock)
    with caplog.at_level(logging.WARNING):
        mgr.startup()
    assert read_log_dir_failure(tmp_path) is None
    assert [r.getMessage() for r in caplog.records if "Shutdown broker 0 because" in r.getMessage()]
    mgr.shutdown()
