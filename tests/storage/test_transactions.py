"""Transactions in the partition log: open transactions in the producer state, COMMIT/ABORT markers, the last
stable offset, the ``.txnindex`` (decoded here independently against Kafka's 34-byte layout), and all of it
surviving a clean restart, a crash (recovery) and truncation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker_runtime.errors import ErrorCode, ProducerStateError
from broker_runtime.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, build_control_batch
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog

TS = 1_700_000_000_000


def txn_batch(pid: int, seq: int, count: int = 2, *, epoch: int = 0) -> bytes:
    """A transactional batch built by kafka-python (an independent implementation)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 30,
    )
    for i in range(count):
        builder.append(i, timestamp=TS + i, key=None, value=b"t" * 20, headers=[])
    return bytes(builder.build())


def marker(pid: int, control_type: int, *, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_control_batch(
        control_type, coordinator_epoch, producer_id=pid, producer_epoch=epoch, timestamp=TS
    )


def decode_txnindex(path: Path) -> list[tuple[int, int, int, int, int]]:
    """Kafka's AbortedTxn entries: version int16, producerId, firstOffset, lastOffset, lastStableOffset int64."""
    data = path.read_bytes()
    assert len(data) % 34 == 0, f"{path.name}: {len(data)} bytes is not a whole number of 34-byte entries"
    return [struct.unpack_from(">hqqqq", data, i) for i in range(0, len(data), 34)]


def txnindex_files(log: PartitionLog) -> list[Path]:
    return sorted(log.dir.glob("*.txnindex"))


@pytest.fixture
def open_log(tmp_path: Path):
    opened: list[PartitionLog] = []

    def _open(name: str = "t-0", *, needs_recovery: bool = True, **overrides: object) -> PartitionLog:
        config = LogConfig(**overrides) if overrides else LogConfig()  # type: ignore[arg-type]
        log = PartitionLog.load(tmp_path / name, "t", 0, config, needs_recovery=needs_recovery)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def test_open_transactions_hold_the_last_stable_offset_and_markers_release_it(open_log) -> None:
    log = open_log()
    log.append(txn_batch(1, 0))  # 0-1, pid 1 opens at 0
    log.append(txn_batch(2, 0))  # 2-3, pid 2 opens at 2
    assert log.high_watermark == 4 and log.last_stable_offset == 0
    log.append(marker(1, CONTROL_COMMIT))  # 4
    assert log.last_stable_offset == 2
    log.append(marker(2, CONTROL_ABORT))  # 5
    assert log.last_stable_offset == log.high_watermark == 6
    assert not log.producer_state.ongoing_transactions
    # Only the abort is indexed, with the LSO after it (no other open transaction: marker + 1).
    assert [
        (e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
        for e in log.segments[-1].txn_index.entries
    ] == [(2, 2, 5, 6)]
    (path,) = txnindex_files(log)
    assert decode_txnindex(path) == [(0, 2, 2, 5, 6)]
    assert [(a.producer_id, a.first_offset) for a in log.collect_aborted_transactions(0, 6)] == [(2, 2)]
    assert log.collect_aborted_transactions(6, 10) == []
    assert log.collect_aborted_transactions(0, 2) == [], "the aborted transaction starts at the upper bound"


def test_abort_entry_records_the_earlier_open_transaction_as_its_lso(open_log) -> None:
    log = open_log()
    log.append(txn_batch(1, 0))  # 0-1 open
    log.append(txn_batch(2, 0))  # 2-3
    log.append(marker(2, CONTROL_ABORT))  # 4: pid 1 still open at 0
    (path,) = txnindex_files(log)
    assert decode_txnindex(path) == [(0, 2, 2, 4, 0)]


def test_non_transactional_write_during_an_open_transaction_is_invalid_txn_state(open_log) -> None:
    log = open_log()
    log.append(txn_batch(7, 0, epoch=1))
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=7,
        producer_epoch=1,
        base_sequence=2,
        batch_size=1 << 30,
    )
    builder.append(0, timestamp=TS, key=None, value=b"x", headers=[])
    with pytest.raises(ProducerStateError) as raised:
        log.append(bytes(builder.build()))
    assert raised.value.code == ErrorCode.INVALID_TXN_STATE
    with pytest.raises(ProducerStateError) as raised:
        log.append(marker(7, CONTROL_ABORT, epoch=0))  # older than the producer's epoch 1
    assert raised.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_open_transaction_and_index_survive_a_clean_restart(open_log) -> None:
    log = open_log("r-0")
    log.append(txn_batch(1, 0))
    log.append(marker(1, CONTROL_ABORT))
    log.append(txn_batch(3, 0))  # 3-4 left open
    log.close()
    again = open_log("r-0", needs_recovery=False)
    assert again.producer_state.ongoing_transactions == {3: 3}
    assert again.last_stable_offset == 3
    assert [a.producer_id for a in again.collect_aborted_transactions(0, 5)] == [1]
    again.append(marker(3, CONTROL_COMMIT))
    assert again.last_stable_offset == again.log_end_offset == 6


def test_recovery_rebuilds_the_txnindex_and_the_open_transactions(open_log) -> None:
    log = open_log("c-0", segment_bytes=300)  # small segments: the markers land in several segments
    for i in range(4):
        log.append(txn_batch(10 + i, 0))
        log.append(marker(10 + i, CONTROL_ABORT if i % 2 == 0 else CONTROL_COMMIT))
    log.append(txn_batch(99, 0))  # open
    before = {p.name: decode_txnindex(p) for p in txnindex_files(log)}
    assert sum(len(v) for v in before.values()) == 2
    leo = log.log_end_offset
    # A crash: nothing closed cleanly, the snapshots are gone and every .txnindex is lost.
    for seg in log.segments:
        seg.flush()
    log.close_without_flush()
    for path in list(log.dir.glob("*.snapshot")) + txnindex_files(log):
        path.unlink()
    again = open_log("c-0", segment_bytes=300)
    assert again.log_end_offset == leo
    assert {p.name: decode_txnindex(p) for p in txnindex_files(again)} == before
    assert again.producer_state.ongoing_transactions == {99: leo - 2}
    assert again.last_stable_offset == leo - 2


def test_truncation_drops_txnindex_entries_above_the_cut(open_log) -> None:
    log = open_log()
    log.append(txn_batch(1, 0))  # 0-1
    log.append(marker(1, CONTROL_ABORT))  # 2
    log.append(txn_batch(2, 0))  # 3-4
    log.append(marker(2, CONTROL_ABORT))  # 5
    log.truncate_to(5)
    (path,) = txnindex_files(log)
    assert [e[1] for e in decode_txnindex(path)] == [1]
    assert log.producer_state.ongoing_transactions == {2: 3}
    assert log.last_stable_offset == 3
