"""The log cleaner against a reference model, crash mid-clean (files as a crash leaves them, and a SIGKILLed
child), tombstone horizon, transactional segments left whole, the cleaner checkpoint."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker_runtime.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, build_control_batch
from broker_runtime.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from broker_runtime.storage.cleaner import clean_log
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager
from broker_runtime.storage.partition_log import PartitionLog
from broker_runtime.storage.segment import list_segment_bases
from tests.support.steps import run_to_step
from tests.support.storage import FakeClock

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


def test_a_key_map_much_larger_than_a_segment_is_looked_up_per_distinct_key(tmp_path):
    """Both lookups of the offset map: Arrow's hash lookup (map not much larger than the segment) and the
    dict of the map (many more keys than a segment holds)."""
    clock = FakeClock()
    log = _compact_log(tmp_path, clock, segment_bytes=600)  # ~8 one-record batches a segment, 150 keys
    written: dict[int, Rec] = {}
    try:
        big = [(b"k%d" % i, b"L") for i in range(0, 150, 12)]
        first = log.append(keyed_batch(big, clock.now)).first_offset  # 13 records: 150 <= 16 x 13
        written.update((first + j, rec) for j, rec in enumerate(big))
        log.roll()
        for round_ in range(2):
            for i in range(150):
                rec = (b"k%d" % ((i * 7) % 150), b"r%d-%d" % (round_, i))
                written[log.append(keyed_batch([rec], clock.now)).first_offset] = rec
        log.roll()
        assert clean_log(log, 0, clock.now, force=True) is not None
        check_against_model(read_all(log), written, log.segments[-1].base_offset)
    finally:
        log.close()


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
        log.append(keyed_batch([(b"k", b"z")], clock.now))  # supersedes every record of the producer
        log.roll()
        assert clean_log(log, 0, clock.now) is not None
        kept = read_all(log)
        assert [o for o, _, _ in kept] == [40]
        batches = [(h.base_offset, h.records_count) for s in log.segments for _, h in s.scan(0, s.size)]
        assert batches == [(38, 0), (40, 1)], "only the producer's last batch stays, empty"
        log.close()
        for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
            snapshot.unlink()  # the producer state is rebuilt from the log's batches alone
        log = PartitionLog.load(tmp_path / "t-0", "t", 0, log.config, clock, needs_recovery=True)
        # The producer's last sequence survived in its emptied last batch: a retry of it is a duplicate.
        retry = log.append(keyed_batch([(b"k", b"x" * 10), (b"k", b"y" * 10)], clock.now, pid=7, seq=38))
        assert retry.duplicate
    finally:
        log.close()


def _dir_records(path, config, clock) -> list[tuple[int, bytes | None, bytes | None]]:
    log = PartitionLog.load(path, "t", 0, config, clock, needs_recovery=True)
    try:
        return read_all(log)
    finally:
        log.close()


def test_files_a_crash_mid_clean_with_grouping_leaves_are_finished_or_undone_at_load(tmp_path):
    """The file-level twin of the SIGKILL test: every state a crash can leave while one group of segments is
    swapped in (``.cleaned``; ``.swap`` with none, some or all of the grouped segments deleted; the txnindex
    already renamed) loads as either the old log or the log with that group cleaned."""

    clock = FakeClock()
    log = _compact_log(tmp_path / "orig", clock)
    written: dict[int, Rec] = {}
    for i in range(60):
        rec = (b"k%d" % (i % 4) if i else b"only-once", b"v%d" % i)
        written[log.append(keyed_batch([rec], clock.now)).first_offset] = rec
    config = log.config
    log.close()
    orig = tmp_path / "orig" / "t-0"
    pristine = tmp_path / "pristine"
    shutil.copytree(orig, pristine)
    before = list_segment_bases(pristine)
    old_records = _dir_records(pristine, config, clock)

    log = PartitionLog.load(orig, "t", 0, config, clock, needs_recovery=False)
    result = clean_log(log, 0, clock.now, force=True)
    assert result is not None and result.segments_after < result.segments_before, "segments were grouped"
    cleaned_records = read_all(log)
    log.close()
    after = list_segment_bases(orig)
    # The first group that merged several segments, and the segments it replaced.
    base = next(b for i, b in enumerate(after[:-1]) if sum(after[i] <= x < after[i + 1] for x in before) > 1)
    upper = after[after.index(base) + 1]
    covered = [x for x in before if base < x < upper]
    group_bytes = (orig / f"{base:020d}.log").read_bytes()
    in_group = [r for r in cleaned_records if base <= r[0] < upper]
    expected_swapped = [r for r in old_records if not base <= r[0] < upper] + in_group
    expected_swapped.sort()

    def crash_state(name: str, suffix: str, delete: list[int]) -> PartitionLog:
        where = tmp_path / name
        shutil.copytree(pristine, where)
        (where / f"{base:020d}.log{suffix}").write_bytes(group_bytes)
        if suffix == ".swap" and name != "txnindex-moved":
            (where / f"{base:020d}.txnindex.swap").write_bytes(b"")
        for victim in delete:
            for ext in (".log", ".index", ".timeindex"):
                (where / f"{victim:020d}{ext}").unlink()
        return PartitionLog.load(where, "t", 0, config, clock, needs_recovery=True)

    states = [
        ("cleaned", ".cleaned", []),
        ("swap-none-deleted", ".swap", []),
        ("swap-some-deleted", ".swap", covered[:1]),
        ("txnindex-moved", ".swap", covered),
    ]
    tail = before[-1]
    last = {k: o for o, (k, _) in written.items() if o < tail}
    for name, suffix, delete in states:
        log = crash_state(name, suffix, delete)
        try:
            assert not [p for p in os.listdir(tmp_path / name) if p.endswith((".cleaned", ".swap"))], name
            read = read_all(log)
            if suffix == ".cleaned":
                assert read == old_records, "an unfinished clean changes nothing"
            else:
                # The group is in; a grouped segment past the group's last batch that the crash left keeps
                # its old records (Kafka's recovery rule): never a lost live record, never a duplicate.
                offsets = [o for o, _, _ in read]
                assert offsets == sorted(set(offsets)) and all(written[o] == (k, v) for o, k, v in read)
                assert set(last.values()) <= set(offsets), f"{name}: the last record of every key survives"
                assert set(range(tail, len(written))) <= set(offsets)
                assert [r for r in read if base <= r[0] < upper][: len(in_group)] == in_group
                if name == "txnindex-moved":
                    assert read == expected_swapped
            # Cleaning again afterwards reaches the model.
            assert clean_log(log, 0, clock.now, force=True) is not None
            check_against_model(read_all(log), written, log.segments[-1].base_offset)
        finally:
            log.close()


def _marker(kind: int, pid: int, ts: int) -> bytes:
    return build_control_batch(kind, 0, producer_id=pid, producer_epoch=0, timestamp=ts)


def _control_batches(log: PartitionLog) -> list[int]:
    return [h.base_offset for seg in log.segments for _, h in seg.scan(0, seg.size) if h.is_control]


def test_aborted_data_goes_and_markers_go_after_delete_retention_once_their_data_is_gone(tmp_path):
    clock = FakeClock()
    # Rolled by hand; segments this large let a pass group them all (the markers' segment is not the first).
    log = _compact_log(tmp_path, clock, delete_retention_ms=10_000, segment_bytes=5000)

    def aborted() -> list[tuple[int, int, int]]:
        found = log.collect_aborted_transactions(0, log.log_end_offset)
        return [(t.producer_id, t.first_offset, t.last_offset) for t in found]

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
        log.append(_marker(CONTROL_ABORT, 9, clock.now))  # 3
        log.append(keyed_batch([(b"c", b"committed")], clock.now, pid=10, seq=0, transactional=True))
        log.append(_marker(CONTROL_COMMIT, 10, clock.now))  # 5
        log.append(keyed_batch([(b"d", b"later")], clock.now, pid=9, seq=1, transactional=True))
        log.append(_marker(CONTROL_COMMIT, 9, clock.now))  # 7
        log.append(keyed_batch([(b"b", b"x")], clock.now))  # 8, superseded by 9: the markers' segment changes
        log.append(keyed_batch([(b"b", b"x2")], clock.now))
        log.roll()
        assert aborted() == [(9, 1, 3)]
        result = clean_log(log, first.first_dirty_offset, clock.now)
        # The aborted record goes, and so does v1 (its key's last committed value is v3, not the aborted one).
        assert result is not None and result.records_removed == 3
        assert read_all(log) == [
            (2, b"a", b"v3"),
            (4, b"c", b"committed"),
            (6, b"d", b"later"),
            (9, b"b", b"x2"),
        ]
        # The markers stay: this pass met their transactions' batches; the abort's index entry moved along.
        assert _control_batches(log) == [3, 5, 7]
        assert aborted() == [(9, 1, 3)]
        # A pass before delete.retention.ms: the abort marker has no data left, but it stays for now.
        log.append(keyed_batch([(b"b", b"y")], clock.now))  # 10
        log.roll()
        early = clean_log(log, result.first_dirty_offset, clock.now)
        assert early is not None and _control_batches(log) == [3, 5, 7]
        # Later: the committed values are superseded, the producers expire, delete.retention.ms passes.
        clock.advance(2 * 24 * 3600 * 1000)
        log.append(keyed_batch([(b"c", b"new")], clock.now))  # 11
        log.append(keyed_batch([(b"d", b"newer")], clock.now))  # 12
        log.roll()
        assert log.remove_expired_producers() == 2
        again = clean_log(log, early.first_dirty_offset, clock.now)
        assert again is not None
        # The aborted batch went in the first pass (it was not its producer's last), so its marker goes now;
        # the commit markers stay once more: this pass met (and removed) their transactions' batches.
        assert _control_batches(log) == [5, 7]
        assert aborted() == []
        # The markers now share a (grouped) segment with the records just written: its newest record must age
        # past delete.retention.ms as well.
        clock.advance(20_000)
        log.append(keyed_batch([(b"e", b"1")], clock.now))  # 13
        log.roll()
        last = clean_log(log, again.first_dirty_offset, clock.now, force=True)
        assert last is not None
        assert _control_batches(log) == [], "no data left: the markers went after delete.retention.ms"
        assert not list(tmp_path.glob("t-0/*.txnindex"))
        final = [
            (2, b"a", b"v3"),
            (10, b"b", b"y"),
            (11, b"c", b"new"),
            (12, b"d", b"newer"),
            (13, b"e", b"1"),
        ]
        assert read_all(log) == final
        log.close()
        log = PartitionLog.load(tmp_path / "t-0", "t", 0, log.config, clock, needs_recovery=True)
        assert read_all(log) == final
    finally:
        log.close()


def read_views(log: PartitionLog) -> tuple[list[tuple[int, bytes | None, bytes | None]], list[int]]:
    """(every data record read_uncommitted, the offsets a read_committed consumer returns), by the Java
    consumer's rule: the aborted transactions of the fetch response mark a producer's batches from the
    transaction's first offset until its ABORT marker."""
    records = read_all(log)
    aborted = sorted(log.collect_aborted_transactions(0, log.log_end_offset), key=lambda t: t.first_offset)
    committed: list[int] = []
    aborted_producers: set[int] = set()
    skipped: set[int] = set()
    for seg in log.segments:
        for _, h in seg.scan(0, seg.size):
            if h.producer_id >= 0:
                while aborted and aborted[0].first_offset <= h.last_offset:
                    aborted_producers.add(aborted.pop(0).producer_id)
                if h.is_control:
                    aborted_producers.discard(h.producer_id)  # any marker ends the transaction
                elif h.is_transactional and h.producer_id in aborted_producers:
                    skipped.update(range(h.base_offset, h.last_offset + 1))
    committed = [o for o, _, _ in records if o not in skipped and o < log.last_stable_offset]
    return records, committed


_txn_ops = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.just(0), records_strategy.map(lambda b: b[0])),
        st.tuples(st.just("txn"), st.sampled_from([0, 1]), records_strategy.map(lambda b: b[0])),
        st.tuples(st.sampled_from(["commit", "abort"]), st.sampled_from([0, 1]), st.just([])),
        st.tuples(st.just("clean"), st.just(0), st.just([])),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_txn_ops, codec=st.sampled_from([0, 2]), finish=st.sampled_from(["commit", "abort"]))
def test_read_committed_and_uncommitted_views_equal_the_model_with_transactions(
    tmp_path_factory, ops, codec, finish
):
    clock = FakeClock()
    path = tmp_path_factory.mktemp("txnclean") / "t-0"
    config = LogConfig(
        segment_bytes=300, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, retention_ms=-1
    )
    log = PartitionLog.load(path, "t", 0, config, clock, needs_recovery=False)
    written: dict[int, Rec] = {}
    txn_of: dict[int, int] = {}  # offset -> transaction number
    outcome: dict[int, str] = {}  # transaction number -> commit | abort
    open_txn: dict[int, int] = {}  # producer -> its open transaction's number
    seqs = {0: 0, 1: 0}
    first_dirty = 0

    def end(producer: int, how: str) -> None:
        kind = CONTROL_COMMIT if how == "commit" else CONTROL_ABORT
        log.append(_marker(kind, 100 + producer, clock.now))
        outcome[open_txn.pop(producer)] = how

    try:
        for kind, producer, recs in ops:
            if kind == "plain":
                info = log.append(keyed_batch(recs, clock.now, codec=codec))
                written.update((info.first_offset + j, rec) for j, rec in enumerate(recs))
            elif kind == "txn":
                batch = keyed_batch(
                    recs, clock.now, pid=100 + producer, seq=seqs[producer], codec=codec, transactional=True
                )
                seqs[producer] += len(recs)
                info = log.append(batch)
                number = open_txn.setdefault(producer, len(outcome) + len(open_txn) + 1000 * len(written))
                for j, rec in enumerate(recs):
                    written[info.first_offset + j] = rec
                    txn_of[info.first_offset + j] = number
            elif kind in ("commit", "abort"):
                if producer in open_txn:
                    end(producer, kind)
            else:
                result = clean_log(log, first_dirty, clock.now)
                if result is not None:
                    first_dirty = result.first_dirty_offset
            clock.advance(1)
        for producer in list(open_txn):
            end(producer, finish)
        log.roll()
        result = clean_log(log, first_dirty, clock.now, force=True)
        tail = log.segments[-1].base_offset

        def is_aborted(o: int) -> bool:
            return o in txn_of and outcome[txn_of[o]] == "abort"

        last: dict[bytes, int] = {}
        for o, (key, _) in sorted(written.items()):
            if key is not None and o < tail and not is_aborted(o):
                last[key] = o

        def survives(o: int) -> bool:
            key = written[o][0]
            if o >= tail:
                return True
            return not is_aborted(o) and (key is None or last[key] == o)

        expected_uncommitted = [(o, *written[o]) for o in sorted(written) if survives(o)]
        expected_committed = [o for o, _, _ in expected_uncommitted if not is_aborted(o)]
        for attempt in range(2):
            uncommitted, committed = read_views(log)
            assert uncommitted == expected_uncommitted
            assert committed == expected_committed
            segs = list(log.segments)
            for i, seg in enumerate(segs[:-1]):
                assert seg.txn_index.last_offset < segs[i + 1].base_offset, "entries stay with their markers"
            if attempt == 0:  # reloading (recovery of every segment) finds the same log
                log.close()
                log = PartitionLog.load(path, "t", 0, config, clock, needs_recovery=True)
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


def _clean_in_child(path: Path, config: LogConfig, pause_at: int) -> tuple[str, int, int]:
    """Clean the log at ``path`` in a forked child paused and SIGKILLed at step ``pause_at`` (0: never; see
    :mod:`tests.support.steps`). Returns ``("killed", pause_at, 0)``, or ``("done", steps, commit step)`` for a
    clean that ran to the end, the commit step being the rename of the first cleaned group to ``.log.swap`` (its
    commit point)."""
    commits: list[int] = []

    def observe(name: str, args: tuple[Any, ...], step: int) -> None:
        if name in ("replace", "rename") and str(args[1]).endswith(".log.swap"):
            commits.append(step)

    def work() -> str:
        log = PartitionLog.load(path, "t", 0, config, lambda: 1_700_000_000_000, needs_recovery=False)
        clean_log(log, 0, 1_700_000_000_000, force=True)
        return str(commits[0])

    outcome, steps, result = run_to_step(work, pause_at, "a clean", observe)
    return outcome, steps, int(result or 0)


def test_a_cleaner_sigkilled_mid_clean_leaves_a_log_that_loads_consistent(tmp_path):
    """A forked process cleaning the log is SIGKILLed at a seeded step of the clean: it counts its steps, stops
    at the chosen one and says so, and is killed there, so the kill lands inside the clean however fast the
    machine is, and the seed reproduces it. A first clean to the end, of a copy, counts the steps."""
    seed = int(os.environ.get("PYLOG_TEST_SEED", random.randrange(2**31)))
    clock = FakeClock()
    written: dict[int, Rec] = {}
    log = _compact_log(tmp_path, clock)
    for b in range(40):
        # Half the records have a key of their own: every segment keeps something, so groups stay small and
        # the clean is many swaps long.
        recs = [(b"k%d" % (i % 50) if i % 2 else b"u%d" % i, b"v%d" % i) for i in range(b * 10, b * 10 + 10)]
        first = log.append(keyed_batch(recs, clock.now)).first_offset
        written.update((first + j, rec) for j, rec in enumerate(recs))
    tail = log.segments[-1].base_offset
    log.close()
    shutil.copytree(tmp_path / "t-0", tmp_path / "dry" / "t-0")
    outcome, steps, committed_at = _clean_in_child(tmp_path / "dry" / "t-0", log.config, 0)
    assert outcome == "done"
    pause_at = random.Random(seed).randint(1, steps)
    context = f"seed {seed}: killed at step {pause_at} of {steps} (the first group commits at {committed_at})"
    # The kill lands inside the clean: the child stopped at the step and was killed there.
    assert _clean_in_child(tmp_path / "t-0", log.config, pause_at) == ("killed", pause_at, 0), context
    print(context)
    log = PartitionLog.load(tmp_path / "t-0", "t", 0, log.config, clock, needs_recovery=True)
    try:
        read = read_all(log)
        offsets = [o for o, _, _ in read]
        assert offsets == sorted(set(offsets)) and all(written[o] == (k, v) for o, k, v in read), context
        kept = set(offsets)
        last = {k: o for o, (k, _) in written.items() if o < tail}
        assert set(last.values()) <= kept, f"{context}: the last record of every key survives the crash"
        assert set(range(tail, len(written))) <= kept, context
        if pause_at > committed_at:
            assert len(kept) < len(written), f"{context}: the first group was cleaned before the crash"
        assert clean_log(log, 0, clock.now, force=True) is not None
        check_against_model(read_all(log), written, log.segments[-1].base_offset)
    finally:
        log.close()
