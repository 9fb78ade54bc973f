"""Leader-epoch rules: the cache's end offsets against a brute-force model, and follower truncation driven
through real partition logs (a leader and a follower in one process, no sockets), with logs that diverge at
the same offsets in different epochs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.batch_header import iter_batch_spans
from broker_runtime.replication.epoch_cache import LeaderEpochCache
from broker_runtime.replication.partition import Partition
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from tests.server.rawclient import build_batch


def _model_end_offset_for(entries: list[tuple[int, int]], requested: int, leo: int) -> tuple[int, int]:
    """Straight from the definition: the records of epochs <= requested end where the first later epoch starts."""
    if requested < 0 or not entries:
        return -1, -1
    if requested == entries[-1][0]:
        return requested, leo
    if requested > entries[-1][0]:
        return -1, -1
    floor = max((e for e, _ in entries if e <= requested), default=None)
    end = min(s for e, s in entries if e > requested)
    return (requested if floor is None else floor), end


@given(
    epochs=st.lists(st.integers(0, 30), min_size=0, max_size=8, unique=True).map(sorted),
    gaps=st.lists(st.integers(1, 50), min_size=8, max_size=8),
    requested=st.integers(-1, 35),
    extra=st.integers(0, 50),
)
@settings(max_examples=300, deadline=None)
def test_end_offset_for_matches_the_model(
    tmp_path_factory: pytest.TempPathFactory, epochs: list[int], gaps: list[int], requested: int, extra: int
) -> None:
    cache = LeaderEpochCache(tmp_path_factory.mktemp("cache"))
    start, entries = 0, []
    for epoch, gap in zip(epochs, gaps, strict=False):
        entries.append((epoch, start))
        assert cache.assign(epoch, start)
        start += gap
    leo = start + extra
    assert cache.end_offset_for(requested, leo) == _model_end_offset_for(entries, requested, leo)


def _partition(tmp_path: Path, name: str, node: int) -> Partition:
    log = PartitionLog.load(tmp_path / name / "t-0", "t", 0, LogConfig(), hw_follows_leo=False)
    return Partition("t", 0, log, node, lambda topic, index, isr, epoch: True)


def _append(leader: Partition, count: int) -> None:
    leader.log.append(build_batch(count), leader_epoch=leader.leader_epoch)


def _batches(p: Partition) -> list[bytes]:
    data = p.log.read(p.log.log_start_offset, 1 << 24, min_one_batch=True).records
    return [bytes(data[pos : pos + h.size]) for pos, h in iter_batch_spans(data)]


def _sync(leader: Partition, follower: Partition, rounds: int = 10) -> int:
    """Run the follower's fetch loop against the leader in process; returns the truncations it made."""
    truncations = 0
    for _ in range(rounds):
        offset = follower.log.log_end_offset
        code, diverging = leader.validate_fetch(follower.leader_epoch, offset, follower.last_fetched_epoch)
        assert code == ErrorCode.NONE
        if diverging is not None:
            follower.truncate_to(follower.truncation_offset(*diverging))
            truncations += 1
            continue
        if offset >= leader.log.log_end_offset:
            return truncations
        data = leader.log.read(offset, 1 << 24, min_one_batch=True).records
        follower.append_as_follower(data, leader.log.high_watermark)
    raise AssertionError("the follower did not converge")


@pytest.mark.parametrize(
    ("scenario", "expected_truncations"),
    [
        ("follower ahead in an old epoch", 1),
        ("follower missing the leader's epoch entirely", 1),
        ("follower with an empty cache and log", 0),
        ("logs agree", 0),
    ],
)
def test_follower_truncates_to_the_divergence_and_ends_identical(
    tmp_path: Path, scenario: str, expected_truncations: int
) -> None:
    a, b = _partition(tmp_path, "a", 0), _partition(tmp_path, "b", 1)
    # Both replicas share epochs 0..1: 4 + 3 records written by node 0 and replicated to node 1.
    a.make_leader([0, 1], [0, 1], 0, now_ms=0)
    b.make_follower([0, 1], 0, 0, [0, 1])
    if scenario != "follower with an empty cache and log":
        _append(a, 4)
        _sync(a, b)
    if scenario == "follower ahead in an old epoch":
        _append(a, 5)  # epoch 0, never replicated: a's unreplicated tail
        # a dies; b leads epoch 1 and writes other records at the same offsets
        b.make_leader([0, 1], [1], 1, now_ms=0)
        _append(b, 2)
        a.make_follower([0, 1], 1, 1, [1])
        leader, follower = b, a
    elif scenario == "follower missing the leader's epoch entirely":
        _append(a, 5)  # epoch 0 tail only on a
        b.make_leader([0, 1], [1], 1, now_ms=0)
        _append(b, 2)  # epoch 1: a never hears of it
        # a comes back as leader in epoch 2 (say, after an unclean election) and writes epoch 2 records...
        a.make_follower([0, 1], 1, 1, [1])
        a.epoch_cache.assign(3, a.log.log_end_offset)  # an epoch b never had, above its own
        b.make_leader([0, 1], [1], 4, now_ms=0)
        _append(b, 1)
        a.make_follower([0, 1], 1, 4, [1])
        leader, follower = b, a
    else:
        leader, follower = a, b
        _append(a, 2)
    truncations = _sync(leader, follower)
    # Truncation drops whole batches, so one round may already reach the divergence point.
    assert truncations >= expected_truncations if expected_truncations else truncations == 0
    assert _batches(follower) == _batches(leader)
    assert follower.log.log_end_offset == leader.log.log_end_offset


def test_leader_fences_stale_and_unknown_epochs(tmp_path: Path) -> None:
    leader = _partition(tmp_path, "a", 0)
    leader.make_leader([0, 1], [0, 1], 5, now_ms=0)
    assert leader.validate_fetch(4, 0, -1) == (ErrorCode.FENCED_LEADER_EPOCH, None)
    assert leader.validate_fetch(6, 0, -1) == (ErrorCode.UNKNOWN_LEADER_EPOCH, None)
    assert leader.validate_fetch(5, 0, -1) == (ErrorCode.NONE, None)
    assert leader.validate_fetch(-1, 0, -1) == (ErrorCode.NONE, None)
    follower = _partition(tmp_path, "b", 1)
    follower.make_follower([0, 1], 0, 5, [0, 1])
    assert follower.validate_fetch(5, 0, -1) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, None)
