"""Producer state owned by the partition log (Kafka's UnifiedLog + ProducerStateManager): updated by leader and
follower appends, rebuilt on load and truncation, snapshotted after a roll (by its flush task) and on close, expired by
producer.id.expiration.ms."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode, ProducerStateError
from broker_runtime.protocol.batch_header import iter_batch_spans
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from broker_runtime.storage.producer_state import SNAPSHOT_SUFFIX
from tests.support.storage import PID, idempotent_batch


def _stored_batches(log: PartitionLog) -> bytes:
    """Every batch of the log as stored (offsets and leader epochs assigned): what a follower fetches."""
    out = b""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        out += data.records
        offset = data.next_offset
    return out


def test_follower_append_feeds_the_producer_state_so_a_duplicate_is_recognised(open_log) -> None:
    leader = open_log("leader-0")
    for seq in range(0, 10, 2):
        leader.append(idempotent_batch(seq), leader_epoch=3)
    follower = open_log("follower-0")
    follower.append_as_follower(_stored_batches(leader))
    assert follower.log_end_offset == leader.log_end_offset == 10
    entry = follower.producer_state.last_entry(PID)
    assert entry is not None and entry.last_seq == 9 and entry.last_data_offset == 9

    # The follower becomes leader: a producer retrying its last batch gets the original offsets back.
    before = follower.size_bytes
    info = follower.append(idempotent_batch(8))
    assert info.duplicate and (info.first_offset, info.last_offset) == (8, 9)
    assert follower.size_bytes == before and follower.log_end_offset == 10
    with pytest.raises(ProducerStateError) as raised:
        follower.append(idempotent_batch(20))
    assert raised.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert follower.append(idempotent_batch(10)).first_offset == 10


def test_leader_append_checks_and_records_each_batch(open_log) -> None:
    log = open_log()
    assert log.append(idempotent_batch(0)).first_offset == 0
    assert log.append(idempotent_batch(2)).first_offset == 2
    dup = log.append(idempotent_batch(0))
    assert dup.duplicate and dup.first_offset == 0 and dup.num_batches == 0
    assert log.append(idempotent_batch(0, epoch=1)).first_offset == 4  # a new epoch restarts at 0
    with pytest.raises(ProducerStateError) as raised:
        log.append(idempotent_batch(4, epoch=0))
    assert raised.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 6, "rejected and duplicate batches are not written"


def test_truncation_removes_producer_state_beyond_the_truncation_point(open_log) -> None:
    # Small segments: rolls write snapshots, and the truncation goes below the newest of them.
    log = open_log(segment_bytes=400)
    for seq in range(0, 20, 2):
        log.append(idempotent_batch(seq))
    log.append(idempotent_batch(0, pid=77))  # a second producer, only after offset 20
    assert len(log.segments) > 3
    snapshots = sorted(p.name for p in log.dir.iterdir() if p.name.endswith(SNAPSHOT_SUFFIX))
    assert snapshots, "rolls must have written producer snapshots"

    log.truncate_to(6)
    assert log.log_end_offset == 6
    entry = log.producer_state.last_entry(PID)
    assert entry is not None and entry.last_seq == 5 and entry.last_data_offset == 5
    assert log.producer_state.last_entry(77) is None
    assert all(
        int(p.name.split(".")[0]) <= 6 for p in log.dir.iterdir() if p.name.endswith(SNAPSHOT_SUFFIX)
    ), "snapshots above the new log end must go"
    # The batch that was cut is new again (not a duplicate) and lands at the truncation point.
    info = log.append(idempotent_batch(6))
    assert not info.duplicate and info.first_offset == 6
    with pytest.raises(ProducerStateError):
        log.append(idempotent_batch(12))


def test_full_truncation_forgets_every_producer(open_log) -> None:
    log = open_log()
    log.append(idempotent_batch(0))
    log.truncate_fully_and_start_at(100)
    assert log.producer_state.producers == {}
    assert log.append(idempotent_batch(0)).first_offset == 100


def test_expiry_drops_producers_idle_for_producer_id_expiration_ms(open_log, clock) -> None:
    hour = 3_600_000
    log = open_log(producer_id_expiration_ms=hour)
    log.append(idempotent_batch(0, pid=1, ts=clock.now - 2 * hour))
    log.append(idempotent_batch(0, pid=2, ts=clock.now - 1000))
    assert log.remove_expired_producers() == 1
    assert sorted(log.producer_state.producers) == [2]
    # Producer 1 is unknown now: its retry is no longer a duplicate, and any sequence is accepted.
    info = log.append(idempotent_batch(0, pid=1, ts=clock.now))
    assert not info.duplicate and info.first_offset == 4
    assert LogConfig.from_properties({"producer.id.expiration.ms": "5000"}).producer_id_expiration_ms == 5000


@pytest.mark.parametrize("clean", [True, False])
def test_state_is_loaded_with_the_log(open_log, clean: bool) -> None:
    log = open_log(segment_bytes=400)
    for seq in range(0, 12, 2):
        log.append(idempotent_batch(seq))
    if clean:
        log.close()  # snapshots at the log end
    else:
        log.close_without_flush()
        for path in log.dir.iterdir():
            if path.name.endswith(SNAPSHOT_SUFFIX):
                path.unlink()  # nothing to start from: the state is rebuilt from the batches
    reopened = open_log(needs_recovery=not clean, segment_bytes=400)
    info = reopened.append(idempotent_batch(10))
    assert info.duplicate and info.first_offset == 10
    assert reopened.append(idempotent_batch(12)).first_offset == 12


def test_non_idempotent_batches_leave_no_producer(open_log) -> None:
    log = open_log()
    data = idempotent_batch(0, pid=-1)
    log.append(data)
    log.append(data)
    assert log.producer_state.producers == {}
    assert log.producer_state.map_end_offset == log.log_end_offset == 4
    assert len(iter_batch_spans(_stored_batches(log))) == 2


class _HeldExecutor(Executor):
    """Keeps the submitted roll-flush tasks until :meth:`run_all` (a roll flush that has not run yet)."""

    def __init__(self) -> None:
        self.tasks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.tasks.append((fn, args))
        return Future()

    def run_all(self) -> None:
        tasks, self.tasks = self.tasks, []
        for fn, args in tasks:
            fn(*args)


def test_roll_snapshot_is_written_by_the_flush_task_and_dropped_after_a_truncation(open_log) -> None:
    """The roll's producer snapshot is written by the roll-flush task (not by the append that rolled), and a
    truncation between the roll and that task wins: the snapshot, which would claim offsets the log no longer
    has, is not written."""
    log = open_log("t-0", segment_bytes=400)
    held = _HeldExecutor()
    log.flush_executor = held
    seq = 0
    while len(log.segments) < 2:
        log.append(idempotent_batch(seq))
        seq += 2
    rolled_at = log.segments[-1].base_offset
    snapshot = log.dir / f"{rolled_at:020d}{SNAPSHOT_SUFFIX}"
    assert held.tasks and not snapshot.exists(), "the append that rolled wrote the snapshot itself"
    held.run_all()
    assert snapshot.exists() and log.recovery_point == rolled_at

    while len(log.segments) < 3:
        log.append(idempotent_batch(seq))
        seq += 2
    second = log.segments[-1].base_offset
    log.truncate_to(second - 1)  # before the roll's flush task runs
    held.run_all()
    assert not (log.dir / f"{second:020d}{SNAPSHOT_SUFFIX}").exists()
    assert not [p for p in log.dir.iterdir() if p.name.endswith(".tmp")]
    assert log.recovery_point <= log.log_end_offset < second
