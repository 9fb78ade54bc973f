"""The log cleaner against a reference model, crash mid-clean (files as a crash leaves them, and a SIGKILLed
child), tombstone horizon, transactional segments left whole, the cleaner checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker_runtime.protocol.records import CONTROL_ABORT, build_control_batch
from broker_runtime.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from broker_runtime.storage.cleaner import clean_log
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager
from broker_runtime.storage.partition_log import PartitionLog
from tests.storage.conftest import FakeClock

Rec = tuple[bytes | None, bytes | None]


def keyed_batch(
    records: list[Rec], ts: int, *, pid: int = -1, seq: int = -1, codec: int = 0, transactional: bool = False
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=int(transactional),
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        batch_size=1 << 30,
    )
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=[])
    return bytes(builder.build())


def read_all(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every data record the log serves from its start, decoded by kafka-python."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data.records:
            break
        records = MemoryRecords(bytes(data.records))
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc()
            if batch.is_control_batch:
                continue
            for rec in batch:
                out.append((rec.offset, rec.key, rec.value))
        offset = data.next_offset
    return out


def check_against_model(
    read: list[tuple[int, bytes | None, bytes | None]], written: dict[int, Rec], tail: int
):
    offsets = [o for o, _, _ in read]
    assert offsets == sorted(set(offsets)), "offsets strictly increase"
    for offset, key, value in read:
        assert written[offset] == (key, value), f"offset {offset} changed"
    last: dict[bytes, int] = {}  # the last offset of each key in the cleaned range (below the tail)
    for offset, (key, _) in written.items():
        if key is not None and offset < tail:
            last[key] = offset
    kept = set(offsets)
    for offset, (key, _) in written.items():
        if offset >= tail or key is None or last[key] == offset:
            assert offset in kept, f"offset {offset} (key {key!r}) must stay"
        else:
            assert offset not in kept, f"offset {offset} (key {key!r}) is superseded by {last[key]}"


records_strategy = st.lists(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"])),
            st.one_of(st.none(), st.binary(min_size=0, max_size=30)),
        ),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=records_strategy, clean_after=st.sets(st.integers(0, 39)), codec=st.sampled_from([0, 1]))
def test_a_reader_reads_the_last_value_per_key_plus_the_uncleaned_tail(
    tmp_path_factory, batches, clean_after, codec
):
    clock = FakeClock()
    path = tmp_path_factory.mktemp("clean") / "t-0"
    config = LogConfig(
        segment_bytes=300, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, retention_ms=-1
    )
    log = PartitionLog.load(path, "t", 0, config, clock, needs_recovery=False)
    written: dict[int, Rec] = {}
    first_dirty = 0
    try:
        for i, recs in enumerate(batches):
            info = log.append(keyed_batch(recs, clock.now, codec=codec))
            for j, rec in enumerate(recs):
                written[info.first_offset + j] = rec
            clock.advance(1)
            if i in clean_after:
                result = clean_log(log, first_dirty, clock.now)
                if result is not None:
                    first_dirty = result.first_dirty_offset
        result = clean_log(log, first_dirty, clock.now, force=True)
        if result is not None:
            first_dirty = result.first_dirty_offset
        tail = log.segments[-1].base_offset
        check_against_model(read_all(log), written, tail if first_dirty else 0)
        # Reloading (recovery of every segment) finds the same log.
        log.close()
        log = PartitionLog.load(path, "t", 0, config, clock, needs_recovery=True)
        check_against_model(read_all(log), written, tail if first_dirty else 0)
    finally:
        log.close()


def _compact_log(tmp_path, clock, **fields) -> PartitionLog:
    values = {
        "segment_bytes": 300,
        "cleanup_policy": "compact",
        "min_cleanable_dirty_ratio": 0.0,
        "retention_ms": -1,
    }
    values.update(fields)
    return PartitionLog.load(tmp_path / "t-0", "t", 0, LogConfig(**values), clock, needs_recovery=False)


def test_superseded_records_go_offsets_stay_and_tombstones_wait_for_delete_retention(tmp_path):
    clock = FakeClock()
    log = _compact_log(tmp_path, clock, delete_retention_ms=10_000)
    try:
        for i in range(30):
            log.append(keyed_batch([(b"k%d" % (i % 3), b"v%d" % i)], clock.now))
        log.append(keyed_batch([(b"k0", None)], clock.now))  # tombstone of k0 at offset 30
        for i in range(31, 60):
            log.append(keyed_batch([(b"k1", b"v%d" % i)], clock.now))
        result = clean_log(log, 0, clock.now)
        assert result is not None and result.records_removed > 0 and result.bytes_written < result.bytes_read
        read = read_all(log)
        below = [(o, k, v) for o, k, v in read if o < result.first_dirty_offset]
        assert (30, b"k0", None) in below, "a fresh tombstone stays"
        assert [k for _, k, _ in below].count(b"k2") == 1
        # Later, past delete.retention.ms, the next clean drops the tombstone (now in the clean section).
        clock.advance(20_000)
        for i in range(60, 90):
            log.append(keyed_batch([(b"k2", b"v%d" % i)], clock.now))
        again = clean_log(log, result.first_dirty_offset, clock.now)
        assert again is not None
        assert all(k != b"k0" for _, k, _ in read_all(log)), "the tombstone and its key are gone"
    finally:
        log.close()


def test_an_idempotent_batch_emptied_by_cleaning_keeps_its_producer_state(tmp_path):
    clock = FakeClock()
    log = _compact_log(tmp_path, clock)
    try:
        for seq in range(0, 40, 2):
            log.append(keyed_batch([(b"k", b"x" * 10), (b"k", b"y" * 10)], clock.now, pid=7, seq=seq))
        log.roll()
        assert clean_log(log, 0, clock.now) is not None
        kept = read_all(log)
        assert [o for o, _, _ in kept] == [39]
        log.close()
        log = PartitionLog.load(tmp_path / "t-0", "t", 0, log.config, clock, needs_recovery=True)
        # The producer's last sequence survived the empty batches: a retry of the last batch is a duplicate.
        retry = log.append(keyed_batch([(b"k", b"x" * 10), (b"k", b"y" * 10)], clock.now, pid=7, seq=38))
        assert retry.duplicate
    finally:
        log.close()


def _cleaned_log_with_a_crash(tmp_path, clock, leave: str) -> tuple[dict[int, Rec], int]:
    """Write a log, then leave what a crash during a clean leaves: a ``.cleaned`` (crash while writing) or a
    ``.swap`` with the old segment already deleted (crash in the swap)."""
    from broker_runtime.storage import cleaner

    log = _compact_log(tmp_path, clock)
    written: dict[int, Rec] = {}
    for i in range(40):
        rec = (b"k%d" % (i % 4) if i else b"only-once", b"v%d" % i)
        written[log.append(keyed_batch([rec], clock.now)).first_offset] = rec
    tail = log.segments[-1].base_offset
    seg = log.segments[0]
    offsets = cleaner._build_offset_map(list(log.segments[:-1]), 0)
    data, gone = cleaner._filter_segment(seg, offsets, False)
    assert gone
    swap = cleaner._write_swap(seg, data)
    if leave == "cleaned":
        os.replace(swap, seg.log_path.with_name(seg.log_path.name + ".cleaned"))
    else:
        for suffix in (".log", ".index", ".timeindex"):
            seg.log_path.with_suffix(suffix).unlink()
    log.close_without_flush()
    return written, tail


def test_files_a_crash_mid_clean_leaves_are_finished_or_undone_at_load(tmp_path):
    for leave in ("cleaned", "swap"):
        clock = FakeClock()
        where = tmp_path / leave
        written, tail = _cleaned_log_with_a_crash(where, clock, leave)
        config = LogConfig(segment_bytes=300, cleanup_policy="compact", retention_ms=-1)
        log = PartitionLog.load(where / "t-0", "t", 0, config, clock, needs_recovery=True)
        try:
            assert not [p for p in os.listdir(where / "t-0") if p.endswith((".cleaned", ".swap"))]
            read = read_all(log)
            offsets = [o for o, _, _ in read]
            assert offsets == sorted(offsets) and set(offsets) <= set(written)
            assert all(written[o] == (k, v) for o, k, v in read)
            assert set(range(log.segments[1].base_offset, log.log_end_offset)) <= set(offsets)
            assert offsets[0] == 0, "the first segment's only record of its key survives"
            if leave == "cleaned":
                assert offsets == sorted(written), "an unfinished clean changes nothing"
            else:
                assert len(offsets) < len(written), "the finished clean is kept"
            # Cleaning again afterwards reaches the model.
            assert clean_log(log, 0, clock.now, force=True) is not None
            check_against_model(read_all(log), written, log.segments[-1].base_offset)
        finally:
            log.close()


def test_transactions_are_never_cleaned_away(tmp_path):
    clock = FakeClock()
    log = _compact_log(tmp_path, clock)
    try:
        log.append(keyed_batch([(b"a", b"v1")], clock.now))
        log.roll()
        log.append(keyed_batch([(b"a", b"txn")], clock.now, pid=9, seq=0, transactional=True))
        log.roll()
        log.append(keyed_batch([(b"a", b"v3")], clock.now))
        log.roll()
        # The transaction is open: the last stable offset (1) bounds the cleaning, nothing past it is touched.
        assert log.last_stable_offset == 1
        first = clean_log(log, 0, clock.now)
        assert first is not None and (first.first_dirty_offset, first.records_removed) == (1, 0)
        log.append(
            build_control_batch(CONTROL_ABORT, 0, producer_id=9, producer_epoch=0, timestamp=clock.now)
        )
        log.append(keyed_batch([(b"b", b"x")], clock.now))
        log.roll()
        result = clean_log(log, first.first_dirty_offset, clock.now)
        assert result is not None and result.records_removed == 1
        read = read_all(log)
        assert [(o, k, v) for o, k, v in read] == [(1, b"a", b"txn"), (2, b"a", b"v3"), (4, b"b", b"x")]
        assert log.collect_aborted_transactions(0, log.log_end_offset), "the abort marker's entry stays"
    finally:
        log.close()


def test_the_log_manager_cleans_compact_logs_only_and_checkpoints_the_first_dirty_offset(tmp_path):
    clock = FakeClock()
    config = LogConfig(segment_bytes=300, retention_ms=-1, min_cleanable_dirty_ratio=0.0)
    manager = LogManager([tmp_path], config, clock)
    manager.startup()
    try:
        compact = manager.create_log("c", 0, {"cleanup.policy": "compact"})
        plain = manager.create_log("d", 0)
        for log in (compact, plain):
            for i in range(30):
                log.append(keyed_batch([(b"k", b"v%d" % i)], clock.now))
        size_before = plain.size_bytes
        done = manager.run_cleaner()
        assert list(done) == [("c", 0)]
        assert plain.size_bytes == size_before
        assert [k for _, k, _ in read_all(compact)].count(b"k") == 1 + 30 - compact.segments[-1].base_offset
        saved = OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read()
        assert saved == {("c", 0): compact.segments[-1].base_offset}
        assert manager.run_cleaner() == {}, "nothing new is dirty"
    finally:
        manager.shutdown()


_CHILD = """
import sys, time
from pathlib import Path
from broker_runtime.storage.cleaner import clean_log
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
config = LogConfig(segment_bytes=300, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, retention_ms=-1)
log = PartitionLog.load(Path(sys.argv[1]), "t", 0, config, lambda: 1_700_000_000_000, needs_recovery=False)
print("cleaning", flush=True)
clean_log(log, 0, 1_700_000_000_000, force=True)
print("done", flush=True)
time.sleep(60)
"""


def test_a_cleaner_sigkilled_mid_clean_leaves_a_log_that_loads_consistent(tmp_path):
    clock = FakeClock()
    written: dict[int, Rec] = {}
    log = _compact_log(tmp_path, clock)
    for b in range(120):
        recs = [(b"k%d" % (i % 50), b"v%d" % i) for i in range(b * 10, b * 10 + 10)]
        first = log.append(keyed_batch(recs, clock.now)).first_offset
        written.update((first + j, rec) for j, rec in enumerate(recs))
    tail = log.segments[-1].base_offset
    log.close()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path / "t-0")], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "cleaning"
        time.sleep(0.05)  # the clean of ~120 segments is under way: kill it between two swaps or in one
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        child.kill()
        child.wait()
    log = PartitionLog.load(tmp_path / "t-0", "t", 0, log.config, clock, needs_recovery=True)
    try:
        read = read_all(log)
        offsets = [o for o, _, _ in read]
        assert offsets == sorted(set(offsets)) and all(written[o] == (k, v) for o, k, v in read)
        kept = set(offsets)
        last = {k: o for o, (k, _) in written.items() if o < tail}
        assert set(last.values()) <= kept, "the last record of every key survives the crash"
        assert set(range(tail, len(written))) <= kept
        assert len(kept) < len(written), "the crash came after some segments were cleaned"
        assert clean_log(log, 0, clock.now, force=True) is not None
        check_against_model(read_all(log), written, log.segments[-1].base_offset)
    finally:
        log.close()
