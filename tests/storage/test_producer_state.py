"""Tests of idempotent-producer state, its snapshot files and the producer id allocator."""

from __future__ import annotations

import json
import logging
import struct
import threading
from pathlib import Path

import crc32c
import pytest

from broker_runtime.errors import ErrorCode, StorageError
from broker_runtime.protocol.batch_header import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader
from broker_runtime.storage.producer_state import (
    ProducerIdManager,
    ProducerStateManager,
    read_snapshot,
)

INT32_MAX = 2**31 - 1
PID = 1000


def batch(
    seq: int,
    count: int = 1,
    *,
    pid: int = PID,
    epoch: int = 0,
    base_offset: int = 0,
    ts: int = 1_700_000_000_000,
    attributes: int = 0,
) -> BatchHeader:
    return BatchHeader(
        base_offset=base_offset,
        batch_length=49 + 10 * count,
        partition_leader_epoch=-1,
        magic=2,
        crc=0,
        attributes=attributes,
        last_offset_delta=count - 1,
        base_timestamp=ts,
        max_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        records_count=count,
    )


class Log:
    """A tiny stand-in for the partition log: checks, 'appends' (assigns offsets) and updates producer state."""

    def __init__(self, psm: ProducerStateManager, next_offset: int = 0) -> None:
        self.psm = psm
        self.next_offset = next_offset
        self.batches: list[BatchHeader] = []

    def produce(self, header: BatchHeader) -> tuple[ErrorCode, int | None]:
        result = self.psm.check(header)
        if result.is_duplicate:
            return ErrorCode.NONE, result.first_offset
        if result.error != ErrorCode.NONE:
            return result.error, None
        first = self.next_offset
        last = first + header.last_offset_delta
        stored = header._replace(base_offset=first)
        self.psm.update(stored, first, last, header.max_timestamp)
        self.batches.append(stored)
        self.next_offset = last + 1
        return ErrorCode.NONE, first


@pytest.fixture()
def log(tmp_path: Path) -> Log:
    return Log(ProducerStateManager(tmp_path))


# -- sequence and epoch rules -----------------------------------------------------------------------------


def test_non_idempotent_batches_always_pass(log: Log) -> None:
    for _ in range(3):
        assert log.produce(batch(-1, 3, pid=-1, epoch=-1))[0] == ErrorCode.NONE
    assert log.psm.producers == {}
    assert log.psm.map_end_offset == 9


def test_sequences_in_order_are_accepted(log: Log) -> None:
    seq = 0
    for count in (1, 5, 3, 10, 1, 7):
        err, base = log.produce(batch(seq, count))
        assert err == ErrorCode.NONE and base == seq  # one producer, so offsets track sequences
        seq += count
    entry = log.psm.last_entry(PID)
    assert entry is not None and entry.last_seq == seq - 1 and entry.producer_epoch == 0
    assert len(entry.batches) == 5


def test_duplicates_of_the_last_five_batches_return_original_offsets(log: Log) -> None:
    log.next_offset = 500  # other traffic before: offsets differ from sequences
    originals = []
    seq = 0
    for i in range(8):
        count = i + 1
        h = batch(seq, count, ts=1000 + i)
        err, base = log.produce(h)
        assert err == ErrorCode.NONE
        originals.append((h, base))
        seq += count
    before = log.next_offset
    for h, base in originals[-5:]:
        result = log.psm.check(h)
        assert result.is_duplicate and not result.ok
        assert result.error == ErrorCode.NONE
        assert result.first_offset == base
        assert result.last_offset == base + h.last_offset_delta  # type: ignore[operator]
        assert result.timestamp == h.max_timestamp
    assert log.next_offset == before
    # The 6th-newest batch is no longer retained: it is out of order, not a duplicate.
    sixth, _ = originals[-6]
    result = log.psm.check(sixth)
    assert result.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and not result.is_duplicate
    # A partial overlap with a retained batch is not a duplicate either.
    last, _ = originals[-1]
    assert log.psm.check(last._replace(last_offset_delta=0, records_count=1)).error == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )


def test_gap_is_out_of_order(log: Log) -> None:
    log.produce(batch(0, 5))
    result = log.psm.check(batch(6))
    assert result.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "expected 5" in result.message
    assert log.psm.check(batch(5)).ok


def test_epoch_bump_must_start_at_sequence_zero(log: Log) -> None:
    log.produce(batch(0, 10, epoch=3))
    bad = log.psm.check(batch(10, epoch=4))
    assert bad.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "new epoch 4" in bad.message
    assert log.produce(batch(0, 2, epoch=4)) == (ErrorCode.NONE, 10)
    entry = log.psm.last_entry(PID)
    assert entry is not None and entry.producer_epoch == 4 and len(entry.batches) == 1
    # The old epoch's batches are gone: resending one is a fenced old epoch, not a duplicate.
    assert log.psm.check(batch(0, 10, epoch=3)).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.psm.check(batch(2, epoch=4)).ok


def test_old_epoch_is_invalid_producer_epoch(log: Log) -> None:
    log.produce(batch(0, epoch=7))
    result = log.psm.check(batch(1, epoch=6))
    assert result.error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert "epoch 6" in result.message and "7" in result.message


def test_unknown_producer_may_start_at_any_sequence(log: Log) -> None:
    # Current Kafka: no entry means no epoch yet, and a batch for a new epoch is only held to sequence 0
    # when the producer already had an epoch.
    assert log.produce(batch(42, 3, epoch=5))[0] == ErrorCode.NONE
    assert log.psm.check(batch(45, epoch=5)).ok
    assert log.psm.check(batch(44, epoch=5)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_wraps_around_int32(log: Log) -> None:
    log.produce(batch(INT32_MAX - 2, 3))  # INT32_MAX-2 .. INT32_MAX
    assert log.psm.last_entry(PID).last_seq == INT32_MAX  # type: ignore[union-attr]
    assert log.psm.check(batch(1)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    wrapping = batch(0, 4)
    assert log.produce(wrapping)[0] == ErrorCode.NONE
    # A batch that itself wraps: first INT32_MAX - 1, five records -> last sequence 2.
    log2 = Log(ProducerStateManager(log.psm.partition_dir / "other"))
    log2.produce(batch(INT32_MAX - 5, 4))  # .. INT32_MAX - 2
    spanning = batch(INT32_MAX - 1, 5)
    assert spanning.last_sequence == 2
    err, base = log2.produce(spanning)
    assert err == ErrorCode.NONE
    dup = log2.psm.check(spanning)
    assert dup.is_duplicate and dup.first_offset == base
    assert log2.psm.check(batch(3)).ok
    assert log2.psm.check(batch(4)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_check_batches_validates_a_set_in_order_without_modifying(log: Log) -> None:
    log.produce(batch(0, 2))
    assert log.psm.check_batches([batch(2, 3), batch(5, 1), batch(0, 4, pid=7)]).ok
    result = log.psm.check_batches([batch(2, 3), batch(6, 1)])
    assert result.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # Epoch bump inside the set: the second batch is checked against the new epoch.
    assert log.psm.check_batches([batch(0, 2, epoch=1), batch(2, 1, epoch=1)]).ok
    assert log.psm.check_batches([batch(0, 2, epoch=1), batch(0, 1, epoch=0)]).error == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    entry = log.psm.last_entry(PID)
    assert entry is not None and entry.last_seq == 1 and entry.producer_epoch == 0


def test_update_rejects_inverted_offsets(log: Log) -> None:
    with pytest.raises(StorageError, match="below first offset"):
        log.psm.update(batch(0), 10, 9, 0)


def test_expired_producers_are_removed(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    psm.update(batch(0, pid=1, ts=100), 0, 0, 100)
    psm.update(batch(0, pid=2, ts=900), 1, 1, 900)
    psm.update(batch(0, pid=3, ts=100, attributes=ATTR_TRANSACTIONAL), 2, 2, 100)
    assert psm.remove_expired_producers(1100) == 1
    assert sorted(psm.producers) == [2, 3]


# -- snapshots --------------------------------------------------------------------------------------------


def hand_built_snapshot(rows: list[tuple[int, int, int, int, int, int, int, int]]) -> bytes:
    """Kafka's ProducerSnapshot v1 built field by field from the message definition."""
    body = struct.pack(">i", len(rows))
    for pid, epoch, last_seq, last_offset, offset_delta, ts, coord_epoch, txn_first in rows:
        body += struct.pack(">q", pid)
        body += struct.pack(">h", epoch)
        body += struct.pack(">i", last_seq)
        body += struct.pack(">q", last_offset)
        body += struct.pack(">i", offset_delta)
        body += struct.pack(">q", ts)
        body += struct.pack(">i", coord_epoch)
        body += struct.pack(">q", txn_first)
    return struct.pack(">h", 1) + struct.pack(">I", crc32c.crc32c(body)) + body


def test_crc_library_is_castagnoli() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_snapshot_bytes_match_the_documented_kafka_layout(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    psm.update(batch(0, 3, pid=9, epoch=2, ts=111), 0, 2, 111)
    psm.update(batch(3, 2, pid=9, epoch=2, ts=222), 3, 4, 222)
    psm.update(batch(7, 4, pid=5, epoch=0, ts=333, attributes=ATTR_TRANSACTIONAL), 5, 8, 333)
    path = psm.take_snapshot(9)
    assert path.name == "00000000000000000009.snapshot"
    expected = hand_built_snapshot(
        [
            (5, 0, 10, 8, 3, 333, -1, 5),  # sorted by producer id; open transaction from offset 5
            (9, 2, 4, 4, 1, 222, -1, -1),  # only the last batch (seq 3..4 at offsets 3..4)
        ]
    )
    assert path.read_bytes() == expected
    assert not list(tmp_path.glob("*.tmp"))


def test_snapshot_round_trip_and_replay(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    for i in range(6):
        log.produce(batch(i * 2, 2, pid=1, epoch=1, ts=10 + i))
        log.produce(batch(i, 1, pid=2, epoch=0, ts=20 + i))
    assert log.psm.take_snapshot() == tmp_path / "00000000000000000018.snapshot"
    sent_after = [batch(12, 2, pid=1, epoch=1, ts=99), batch(0, 5, pid=3, epoch=4, ts=98)]
    for h in sent_after:
        log.produce(h)

    restarted = ProducerStateManager(tmp_path)
    assert restarted.load_latest_snapshot() == 18
    e1 = restarted.last_entry(1)
    assert e1 is not None and (e1.producer_epoch, e1.last_seq, e1.last_data_offset) == (1, 11, 16)
    assert e1.last_timestamp == 15 and e1.current_txn_first_offset is None
    for stored in log.batches:
        if stored.base_offset >= 18:
            restarted.replay(stored)
    assert restarted.map_end_offset == log.next_offset
    for pid in (1, 2, 3):
        a, b = log.psm.last_entry(pid), restarted.last_entry(pid)
        assert a is not None and b is not None
        assert (a.producer_epoch, a.last_seq, a.last_data_offset) == (
            b.producer_epoch,
            b.last_seq,
            b.last_data_offset,
        )
    # Only the newest batch per producer survives a snapshot (as in Kafka): it is still a duplicate.
    assert restarted.check(batch(0, 5, pid=3, epoch=4)).first_offset == 20
    assert restarted.check(batch(5, 1, pid=2, epoch=0)).first_offset == 17
    assert restarted.check(batch(14, 1, pid=1, epoch=1)).ok


def test_only_the_two_newest_snapshots_are_kept(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    for offset in (10, 20, 30, 40):
        psm.update(batch(offset, 10), offset, offset + 9, offset)
        psm.take_snapshot(offset + 10)
    assert [o for o, _ in psm.list_snapshots()] == [40, 50]


def test_bad_crc_is_ignored_and_the_older_snapshot_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    psm = ProducerStateManager(tmp_path)
    psm.update(batch(0, 2), 0, 1, 5)
    psm.take_snapshot(2)
    psm.update(batch(2, 2), 2, 3, 6)
    newest = psm.take_snapshot(4)
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF  # corrupt the last entry's last byte
    newest.write_bytes(bytes(data))

    fresh = ProducerStateManager(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert fresh.load_latest_snapshot() == 2
    assert "CRC" in caplog.text and newest.name in caplog.text
    assert not newest.exists()
    assert fresh.last_entry(PID).last_seq == 1  # type: ignore[union-attr]

    # Only a corrupt one: nothing loaded, caller replays the whole log.
    (tmp_path / "00000000000000000002.snapshot").write_bytes(b"\x00\x01garbage")
    again = ProducerStateManager(tmp_path)
    assert again.load_latest_snapshot() is None
    assert again.producers == {}


def test_snapshot_with_wrong_version_or_size_is_rejected(tmp_path: Path) -> None:
    good = hand_built_snapshot([(1, 0, 0, 0, 0, 0, -1, -1)])
    assert [e.producer_id for e in read_snapshot(_write(tmp_path / "a", good))] == [1]
    with pytest.raises(StorageError, match="version 2"):
        read_snapshot(_write(tmp_path / "b", struct.pack(">h", 2) + good[2:]))
    with pytest.raises(StorageError, match="need"):
        read_snapshot(_write(tmp_path / "c", good + b"\x00"))


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_truncate_and_reload(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    for i in range(10):
        log.produce(batch(i, 1))
        if i in (3, 6):
            log.psm.take_snapshot()
    assert [o for o, _ in log.psm.list_snapshots()] == [4, 7]
    # Log truncated to [0, 5): the snapshot at 7 is beyond it; state rebuilds from 4.
    replay_from = log.psm.truncate_and_reload(0, 5)
    assert replay_from == 4
    assert [o for o, _ in log.psm.list_snapshots()] == [4]
    assert log.psm.last_entry(PID).last_seq == 3  # type: ignore[union-attr]
    log.psm.replay(log.batches[4])
    assert log.psm.last_entry(PID).last_seq == 4  # type: ignore[union-attr]
    # Already at the log end: nothing to do.
    assert log.psm.truncate_and_reload(0, 5) == 5
    # Log start moved past every snapshot: nothing to load, replay from the log start.
    assert log.psm.truncate_and_reload(4, 4) == 4
    assert log.psm.producers == {}


def test_transaction_marker_closes_the_open_transaction(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    psm.update(batch(0, 2, attributes=ATTR_TRANSACTIONAL), 10, 11, 5)
    assert psm.last_entry(PID).current_txn_first_offset == 10  # type: ignore[union-attr]
    marker = batch(-1, 1, base_offset=12, attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL)
    assert psm.check(marker).ok
    psm.replay(marker, coordinator_epoch=3)
    entry = psm.last_entry(PID)
    assert entry is not None and entry.current_txn_first_offset is None and entry.coordinator_epoch == 3
    assert entry.last_seq == 1  # markers keep the batches of the same epoch
    assert psm.map_end_offset == 13


# -- producer ids -----------------------------------------------------------------------------------------


def test_producer_ids_are_monotonic_and_survive_restarts(tmp_path: Path) -> None:
    state = tmp_path / "meta" / "producer-ids.json"
    seen: list[int] = []
    for _restart in range(4):
        manager = ProducerIdManager(state, block_size=7)
        for _ in range(10):
            pid = manager.next_id()
            # The block holding the id is on disk before the id is handed out.
            block = json.loads(state.read_text())
            assert block["block_start"] <= pid <= block["block_end"]
            seen.append(pid)
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert seen[:10] == list(range(10))
    assert not list(state.parent.glob("*.tmp"))


def test_producer_ids_unique_across_threads(tmp_path: Path) -> None:
    manager = ProducerIdManager(tmp_path / "ids", block_size=50)
    results: list[list[int]] = [[] for _ in range(8)]

    def worker(k: int) -> None:
        for _ in range(200):
            results[k].append(manager.next_id())

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    all_ids = [pid for r in results for pid in r]
    assert sorted(all_ids) == list(range(1600))
    assert all(r == sorted(r) for r in results)
    assert manager.current_block == (1550, 1599)


def test_corrupt_producer_id_state_is_an_error(tmp_path: Path) -> None:
    state = tmp_path / "ids"
    state.write_text("not json")
    with pytest.raises(StorageError, match="unreadable"):
        ProducerIdManager(state)
    state.write_text(json.dumps({"version": 1, "block_start": 10, "block_end": 5}))
    with pytest.raises(StorageError, match=r"block \[10, 5\]"):
        ProducerIdManager(state)
