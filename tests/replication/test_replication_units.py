"""Replication building blocks without sockets: replica assignment, the leader-epoch checkpoint, the leader's
ISR / high-watermark rules, and the acks=-1 DelayedProduce in a purgatory driven by a manual clock."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import CorruptRecordError, ErrorCode, StorageError
from broker_runtime.purgatory import DelayedOperationPurgatory, ManualClock, Timer
from broker_runtime.replication import (
    DelayedProduce,
    LeaderEpochCache,
    Partition,
    ProducePartitionStatus,
    assign_replicas,
)
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_dir_failure import LogDirFailureChannel
from broker_runtime.storage.partition_log import PartitionLog
from tests.support.storage import decode_all, idempotent_batch, make_batch

pytestmark = pytest.mark.timeout(30)

LAG_MS = 1000


class FakeLog:
    """Just the offsets a Partition reads and writes (HW clamped to [start, LEO] like PartitionLog)."""

    def __init__(self, directory: Path, leo: int = 0, min_insync_replicas: int = 1) -> None:
        self.dir = directory
        self.config = dataclasses.replace(LogConfig(), min_insync_replicas=min_insync_replicas)
        self.log_start_offset = 0
        self.log_end_offset = leo
        self._hw = 0
        self.hw_follows_leo = True
        self.dir_failure = LogDirFailureChannel()  # the epoch cache reports a failed write there

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._hw = min(max(value, self.log_start_offset), self.log_end_offset)

    def read(self, *args: Any, **kwargs: Any) -> Any:
        raise StorageError("fake log holds no batches")


class IsrLog:
    """Records alter_isr calls; ``accept`` decides their outcome."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.accept = True

    def __call__(self, topic: str, partition: int, isr: list[int], leader_epoch: int) -> bool:
        self.calls.append(list(isr))
        return self.accept


def _leader(
    tmp_path: Path,
    isr: list[int] | None = None,
    min_insync_replicas: int = 1,
    replicas: list[int] | None = None,
) -> tuple[Partition, FakeLog, IsrLog]:
    log = FakeLog(tmp_path, min_insync_replicas=min_insync_replicas)
    alter = IsrLog()
    p = Partition("t", 0, log, 0, alter)
    p.make_leader(replicas or [0, 1, 2], isr if isr is not None else [0, 1, 2], 0, now_ms=0)
    return p, log, alter


# -- assignment ---------------------------------------------------------------------------------------------


def test_assignment_matches_kafkas_documented_layout() -> None:
    # Kafka's AdminUtils doc example: 5 brokers, 10 partitions, RF 3, start index 0, shift 0.
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3)
    assert got[:5] == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1]]
    assert got[5:] == [[0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]


def test_assignment_spreads_leaders_and_rejects_too_many_replicas() -> None:
    got = assign_replicas([2, 0, 1], 3, 3)
    assert [r[0] for r in got] == [0, 1, 2]
    assert all(sorted(r) == [0, 1, 2] for r in got)
    with pytest.raises(ValueError, match="larger than available brokers: 3"):
        assign_replicas([0, 1, 2], 1, 4)


# -- leader-epoch checkpoint --------------------------------------------------------------------------------


def test_epoch_cache_file_format_and_rules(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.assign(0, 0)
    assert not cache.assign(0, 10)  # the latest epoch never moves
    assert cache.assign(3, 120)
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 120\n"
    assert LeaderEpochCache(tmp_path).entries == [(0, 0), (3, 120)]
    assert cache.truncate_from_end(100)
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n")
    with pytest.raises(StorageError, match="2 entries announced, 1 found"):
        LeaderEpochCache(tmp_path)


def _leader_batch(base_offset: int, count: int, epoch: int) -> bytes:
    """A batch as a leader stores it: kafka-python's bytes with the base offset and leader epoch filled in."""
    data = bytearray(make_batch(count, base_offset=base_offset))
    data[12:16] = epoch.to_bytes(4, "big", signed=True)  # partitionLeaderEpoch is outside the CRC
    return bytes(data)


def test_follower_full_truncation_restarts_log_and_epoch_cache(tmp_path: Path) -> None:
    log = PartitionLog.load(tmp_path / "t-0", "t", 0, LogConfig(), needs_recovery=False)
    follower = Partition("t", 0, log, 1, IsrLog())
    follower.make_follower([0, 1], 0, 2, [0, 1])
    assert follower.append_as_follower(_leader_batch(0, 3, 2) + _leader_batch(3, 2, 2), leader_hw=4) == 5
    assert follower.epoch_cache.entries == [(2, 0)]

    # The leader's log now starts at 50 (retention ran while this follower was away).
    follower.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (50, 50, 50)
    assert follower.epoch_cache.entries == []
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n0\n"
    assert follower.append_as_follower(_leader_batch(50, 4, 3), leader_hw=54) == 54
    assert follower.epoch_cache.entries == [(3, 50)]
    assert [r[1] for r in decode_all(log.read(50, 1 << 20).records)] == [50, 51, 52, 53]
    log.close()


def test_follower_refuses_a_fetch_with_a_batch_that_fails_its_crc(tmp_path: Path) -> None:
    """As Kafka's ReplicaFetcherThread: a corrupt fetched batch is never appended, nor the valid ones before it."""
    log = PartitionLog.load(tmp_path / "t-0", "t", 0, LogConfig(), needs_recovery=False)
    follower = Partition("t", 0, log, 1, IsrLog())
    follower.make_follower([0, 1], 0, 2, [0, 1])
    corrupt = bytearray(_leader_batch(3, 2, 2))
    corrupt[-1] ^= 0x01  # one bit of the last record's value: covered by the CRC
    with pytest.raises(CorruptRecordError, match=r"t-0: fetched batch at offset 3 fails its CRC check"):
        follower.append_as_follower(_leader_batch(0, 3, 2) + bytes(corrupt), leader_hw=5)
    assert (log.log_end_offset, log.high_watermark) == (0, 0)
    assert follower.append_as_follower(_leader_batch(0, 3, 2) + _leader_batch(3, 2, 2), leader_hw=5) == 5
    log.close()


def test_follower_appends_keep_producer_state_so_the_new_leader_spots_retries(tmp_path: Path) -> None:
    leader_log = PartitionLog.load(tmp_path / "leader" / "t-0", "t", 0, LogConfig(), needs_recovery=False)
    for seq in (0, 2, 4):
        leader_log.append(idempotent_batch(seq), leader_epoch=2)
    log = PartitionLog.load(tmp_path / "t-0", "t", 0, LogConfig(), needs_recovery=False)
    follower = Partition("t", 0, log, 1, IsrLog())
    follower.make_follower([0, 1], 0, 2, [0, 1])
    assert follower.append_as_follower(leader_log.read(0, 1 << 20).records, leader_hw=6) == 6
    follower.make_leader([0, 1], [0, 1], 3, now_ms=0)
    retry = log.append(idempotent_batch(4), leader_epoch=3)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (4, 5)
    assert log.log_end_offset == 6
    # Follower truncation below a batch forgets it: the producer may send it again.
    follower.make_follower([0, 1], 0, 4, [0, 1])
    follower.truncate_to(4)
    assert not log.append(idempotent_batch(4), leader_epoch=4).duplicate
    leader_log.close()
    log.close()


# -- ISR and high watermark ---------------------------------------------------------------------------------


def test_high_watermark_is_min_leo_over_isr(tmp_path: Path) -> None:
    p, log, _ = _leader(tmp_path)
    log.log_end_offset = 10
    assert not p.maybe_increment_hw()  # followers' positions unknown
    assert p.update_follower_fetch_state(1, 10, now_ms=5) is False  # replica 2 still at -1
    assert log.high_watermark == 0
    assert p.update_follower_fetch_state(2, 7, now_ms=6) is True
    assert log.high_watermark == 7
    assert p.update_follower_fetch_state(2, 10, now_ms=7) is True
    assert log.high_watermark == 10
    assert p.check_enough_replicas_reach_offset(10, min_isr=2) == (True, ErrorCode.NONE)
    assert p.check_enough_replicas_reach_offset(11, min_isr=2) == (False, ErrorCode.NONE)


def test_lagging_follower_leaves_isr_after_lag_time_and_rejoins(tmp_path: Path) -> None:
    p, log, alter = _leader(tmp_path)
    log.log_end_offset = 5
    p.update_follower_fetch_state(1, 5, now_ms=100)
    p.update_follower_fetch_state(2, 5, now_ms=100)
    assert log.high_watermark == 5
    log.log_end_offset = 9  # new data; replica 2 stops fetching, replica 1 keeps up
    p.update_follower_fetch_state(1, 9, now_ms=600)
    assert not p.maybe_shrink_isr(now_ms=100 + LAG_MS, max_lag_ms=LAG_MS)  # exactly the lag: still in
    assert p.isr == {0, 1, 2}
    assert p.maybe_shrink_isr(now_ms=101 + LAG_MS, max_lag_ms=LAG_MS)  # out; HW moves to min(9, 9)
    assert p.isr == {0, 1} and alter.calls == [[0, 1]]
    assert log.high_watermark == 9
    # Replica 2 comes back below the HW: not yet in sync; at the HW it rejoins.
    p.update_follower_fetch_state(2, 6, now_ms=2000)
    assert p.isr == {0, 1}
    p.update_follower_fetch_state(2, 9, now_ms=2001)
    assert p.isr == {0, 1, 2} and alter.calls[-1] == [0, 1, 2]


def test_idle_follower_stays_in_isr_and_rejected_alter_keeps_isr(tmp_path: Path) -> None:
    p, log, alter = _leader(tmp_path)
    log.log_end_offset = 3
    p.update_follower_fetch_state(1, 3, now_ms=0)
    p.update_follower_fetch_state(2, 3, now_ms=0)
    # No new data for a long time: followers at the LEO are caught up whatever their last fetch time.
    assert not p.maybe_shrink_isr(now_ms=10 * LAG_MS, max_lag_ms=LAG_MS)
    log.log_end_offset = 4
    alter.accept = False
    assert not p.maybe_shrink_isr(now_ms=20 * LAG_MS, max_lag_ms=LAG_MS)
    assert p.isr == {0, 1, 2} and alter.calls == [[0]]


def test_follower_caught_up_to_previous_fetch_counts_as_caught_up(tmp_path: Path) -> None:
    p, log, _ = _leader(tmp_path)
    log.log_end_offset = 10
    p.update_follower_fetch_state(1, 10, now_ms=0)
    log.log_end_offset = 20
    p.update_follower_fetch_state(1, 10, now_ms=900)  # behind: 20 arrived meanwhile
    log.log_end_offset = 30
    p.update_follower_fetch_state(1, 20, now_ms=1800)  # reached the LEO of its previous fetch (at 900)
    state = p.remote[1]
    assert state.last_caught_up_ms == 900
    assert state.is_caught_up(30, now_ms=900 + LAG_MS, max_lag_ms=LAG_MS)
    assert not state.is_caught_up(30, now_ms=901 + LAG_MS, max_lag_ms=LAG_MS)


def test_min_isr_checks(tmp_path: Path) -> None:
    p, log, _ = _leader(tmp_path, isr=[0])
    assert p.check_min_isr(2)[0] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert "insufficient to satisfy the min.isr requirement of 2" in (p.check_min_isr(2)[1] or "")
    log.log_end_offset = 4
    p.maybe_increment_hw()
    assert p.check_enough_replicas_reach_offset(4, min_isr=2) == (
        True,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    )
    follower = Partition("t", 1, FakeLog(tmp_path / "f"), 1, IsrLog())
    (tmp_path / "f").mkdir()
    follower.make_follower([0, 1], 0, 0, [0, 1])
    assert follower.check_enough_replicas_reach_offset(1, 1) == (False, ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_effective_min_isr_is_capped_by_the_replication_factor(tmp_path: Path) -> None:
    """Kafka's effectiveMinIsr: min.insync.replicas=2 on a 1-replica partition still takes acks=-1 writes."""
    single, _, _ = _leader(tmp_path, isr=[0], min_insync_replicas=2, replicas=[0])
    assert single.effective_min_isr() == 1
    assert single.check_min_isr(2) == (ErrorCode.NONE, None)
    (tmp_path / "3").mkdir()
    triple, _, _ = _leader(tmp_path / "3", isr=[0], min_insync_replicas=2)
    assert triple.effective_min_isr() == 2
    assert triple.check_min_isr(2)[0] == ErrorCode.NOT_ENOUGH_REPLICAS


def test_high_watermark_does_not_move_while_the_isr_is_under_its_minimum(tmp_path: Path) -> None:
    """KAFKA-15583: nothing written while too few replicas are in sync becomes visible; it does once they are."""
    p, log, _ = _leader(tmp_path, min_insync_replicas=2)
    log.log_end_offset = 5
    p.update_follower_fetch_state(1, 5, now_ms=100)
    p.update_follower_fetch_state(2, 5, now_ms=100)
    assert log.high_watermark == 5
    log.log_end_offset = 9  # acks=1 writes; both followers stop fetching
    assert not p.maybe_shrink_isr(now_ms=101 + LAG_MS, max_lag_ms=LAG_MS)  # ISR [0]: under min ISR 2
    assert p.isr == {0}
    assert log.high_watermark == 5
    assert p.check_enough_replicas_reach_offset(9, min_isr=2) == (False, ErrorCode.NONE)
    p.update_follower_fetch_state(1, 9, now_ms=2000)  # replica 1 catches up and rejoins: ISR [0, 1]
    assert p.isr == {0, 1}
    assert log.high_watermark == 9


# -- DelayedProduce in the purgatory ------------------------------------------------------------------------


def _produce_purgatory() -> tuple[DelayedOperationPurgatory[Any], ManualClock]:
    clock = ManualClock(0)
    return DelayedOperationPurgatory("Produce", Timer(clock, name="produce")), clock


def _park(
    purgatory: DelayedOperationPurgatory[Any],
    partitions: dict[tuple[str, int], Partition],
    required: int,
    timeout: int,
) -> list[dict[tuple[str, int], ErrorCode]]:
    answers: list[dict[tuple[str, int], ErrorCode]] = []
    statuses = {tp: ProducePartitionStatus(required, ErrorCode.NONE, 2) for tp in partitions}
    op = DelayedProduce(
        timeout,
        statuses,
        lambda t, i: partitions.get((t, i)),
        lambda final: answers.append({tp: s.error for tp, s in final.items()}),
    )
    assert not purgatory.try_complete_else_watch(op, op.watch_keys)
    return answers


def test_delayed_produce_completes_when_hw_reaches_required_offset(tmp_path: Path) -> None:
    purgatory, clock = _produce_purgatory()
    p, log, _ = _leader(tmp_path)
    log.log_end_offset = 3
    answers = _park(purgatory, {("t", 0): p}, required=3, timeout=1000)
    p.update_follower_fetch_state(1, 3, now_ms=1)
    assert purgatory.check_and_complete(("t", 0)) == 0  # replica 2 has not fetched yet
    assert answers == []
    p.update_follower_fetch_state(2, 3, now_ms=2)
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert answers == [{("t", 0): ErrorCode.NONE}]
    clock.advance(5000)
    purgatory.advance_clock()
    assert len(answers) == 1  # completed exactly once


def test_delayed_produce_times_out(tmp_path: Path) -> None:
    purgatory, clock = _produce_purgatory()
    p, log, _ = _leader(tmp_path)
    log.log_end_offset = 3
    answers = _park(purgatory, {("t", 0): p}, required=3, timeout=1000)
    clock.advance(999)
    purgatory.advance_clock()
    assert answers == []
    clock.advance(1)
    purgatory.advance_clock()
    assert answers == [{("t", 0): ErrorCode.REQUEST_TIMED_OUT}]


def test_delayed_produce_reports_isr_shrink_below_min_isr(tmp_path: Path) -> None:
    purgatory, _ = _produce_purgatory()
    p, log, _ = _leader(tmp_path)
    log.log_end_offset = 3
    answers = _park(purgatory, {("t", 0): p}, required=3, timeout=1000)
    # Both followers stop fetching: after the lag the ISR is [0] and the HW jumps to the leader's LEO.
    assert p.maybe_shrink_isr(now_ms=LAG_MS + 1, max_lag_ms=LAG_MS)
    purgatory.check_and_complete(("t", 0))
    assert answers == [{("t", 0): ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}]
