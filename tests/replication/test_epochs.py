"""Leader-epoch rules: the cache's end offsets against a brute-force model, and follower truncation driven
through real partition logs (a leader and a follower in one process, no sockets), with logs that diverge at
the same offsets in different epochs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.batch_header import iter_batch_spans
from broker_runtime.replication.epoch_cache import LeaderEpochCache
from broker_runtime.replication.fetcher import FetcherConfig, ReplicaFetcher
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


def _leader_answer(leader: Partition, wanted: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """The leader's Fetch answer for one follower partition, as the handler builds it: the epoch and divergence
    checks first (``Partition.validate_fetch``), then a read up to the log end offset."""
    log = leader.log
    offset = wanted["FetchOffset"]
    code, diverging = leader.validate_fetch(wanted["CurrentLeaderEpoch"], offset, wanted["LastFetchedEpoch"])
    entry: dict[str, Any] = {
        "ErrorCode": code,
        "HighWatermark": log.high_watermark,
        "LogStartOffset": log.log_start_offset,
        "DivergingEpoch": {"Epoch": -1, "EndOffset": -1},
        "Records": b"",
    }
    if diverging is not None:
        entry["DivergingEpoch"] = {"Epoch": diverging[0], "EndOffset": diverging[1]}
    elif code == ErrorCode.NONE:
        if not log.log_start_offset <= offset <= log.log_end_offset:
            entry["ErrorCode"] = ErrorCode.OFFSET_OUT_OF_RANGE
        elif offset < log.log_end_offset:
            entry["Records"] = log.read(offset, max_bytes, min_one_batch=True).records
    return entry


def _sync(
    leader: Partition, follower: Partition, rounds: int = 12, max_bytes: int = 1 << 24, finish: bool = True
) -> int:
    """Run the follower's fetch loop against the leader in process, through the fetcher's own request builder and
    answer handling (``ReplicaFetcher``, never started: no sockets); returns how many answers made it truncate
    (DivergingEpoch or OFFSET_OUT_OF_RANGE). With ``finish``, the follower must end caught up."""
    fetcher = ReplicaFetcher(leader.local_id, lambda node: None, FetcherConfig(node_id=follower.local_id))
    truncations = 0
    for _ in range(rounds):
        wanted = fetcher._request_body([follower])["Topics"][0]["Partitions"][0]
        entry = _leader_answer(leader, wanted, max_bytes)
        diverging = entry["DivergingEpoch"]["Epoch"] >= 0
        if entry["ErrorCode"] == ErrorCode.NONE and not diverging and not len(entry["Records"]):
            return truncations  # caught up
        truncations += diverging or entry["ErrorCode"] == ErrorCode.OFFSET_OUT_OF_RANGE
        # True would mean: back off, error (a truncation awaits its worker thread, so one loop per answer)
        assert not asyncio.run(fetcher._process(follower, entry)), (wanted, entry)
    if finish:
        raise AssertionError(f"the follower did not converge in {rounds} fetches")
    return truncations


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


def test_leaders_log_start_above_the_divergence_restarts_the_follower_at_it(tmp_path: Path) -> None:
    """The follower's old-epoch tail diverges at offset 4, but the new leader already deleted everything below 9:
    DivergingEpoch takes the follower back to 4, which is then below the leader's log start, so it starts over
    at the leader's log start (OFFSET_OUT_OF_RANGE -> truncate fully) and copies from there."""
    a, b = _partition(tmp_path, "a", 0), _partition(tmp_path, "b", 1)
    a.make_leader([0, 1], [0, 1], 0, now_ms=0)
    b.make_follower([0, 1], 0, 0, [0, 1])
    _append(a, 4)
    assert _sync(a, b) == 0
    _append(a, 5)  # epoch 0, offsets 4-8: a's alone
    b.make_leader([0, 1], [1], 1, now_ms=0)
    for count in (2, 3, 3):  # epoch 1: offsets 4-5, 6-8, 9-11
        _append(b, count)
    b.log.high_watermark = b.log.log_end_offset
    assert b.log.delete_records_before(9) == 9
    a.make_follower([0, 1], 1, 1, [1])
    assert b.validate_fetch(1, 9, 0) == (ErrorCode.NONE, (0, 4))
    assert b.validate_fetch(1, 4, 0) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)  # below the log start
    assert _sync(b, a) == 2
    assert a.log.log_start_offset == 9 and a.epoch_cache.entries == [(1, 9)]
    assert _batches(a) == _batches(b)


def test_leader_cannot_place_an_epoch_above_its_own(tmp_path: Path) -> None:
    leader = _partition(tmp_path, "a", 0)
    leader.make_leader([0, 1], [0, 1], 3, now_ms=0)
    _append(leader, 2)
    assert leader.validate_fetch(3, 2, 3) == (ErrorCode.NONE, None)
    assert leader.validate_fetch(3, 2, 4) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    assert leader.end_offset_for_epoch(3, 4) == (ErrorCode.NONE, -1, -1)
    assert leader.end_offset_for_epoch(3, 3) == (ErrorCode.NONE, 3, 2)
    assert leader.end_offset_for_epoch(2, 3) == (ErrorCode.FENCED_LEADER_EPOCH, -1, -1)


_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("elect"), st.integers(0, 2), st.just(0)),  # a new epoch, led by this node
        st.tuples(
            st.just("append"), st.integers(1, 4), st.just(0)
        ),  # the leader appends a batch of n records
        st.tuples(st.just("fetch"), st.integers(0, 2), st.integers(1, 3)),  # node r fetches k single batches
    ),
    max_size=30,
)


@given(steps=_STEPS)
@settings(max_examples=100, deadline=None)
def test_any_history_of_leaders_and_partial_replication_converges_to_the_leaders_log(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]]
) -> None:
    """Any sequence of elections (clean or not: a lagging node may be elected), appends and partial fetches over
    three replicas; once the last leader's followers fetch until caught up, every log equals the leader's batch
    by batch, and the leader itself never lost a batch to the process."""
    tmp = tmp_path_factory.mktemp("history")
    nodes = [_partition(tmp, f"n{i}", i) for i in range(3)]
    everyone = [0, 1, 2]

    def elect(leader: int, epoch: int) -> None:
        nodes[leader].make_leader(everyone, everyone, epoch, now_ms=0)
        for n in everyone:
            if n != leader:
                nodes[n].make_follower(everyone, leader, epoch, everyone)

    leader, epoch = 0, 0
    elect(leader, epoch)
    for kind, a, b in steps:
        if kind == "elect":
            leader, epoch = a, epoch + 1
            elect(leader, epoch)
        elif kind == "append":
            _append(nodes[leader], a)
        elif a != leader:
            _sync(nodes[leader], nodes[a], rounds=b, max_bytes=1, finish=False)
    expected = _batches(nodes[leader])
    for n in everyone:
        if n != leader:
            _sync(nodes[leader], nodes[n], rounds=4 * len(steps) + 4, max_bytes=1)
    assert _batches(nodes[leader]) == expected
    for n in everyone:
        assert _batches(nodes[n]) == expected, n
        assert nodes[n].log.log_end_offset == nodes[leader].log.log_end_offset
        # Every cache matches the epochs of its batches, apart from trailing epochs with no records (led here
        # without an append; Kafka keeps those too until a truncation reaches them).
        leo = nodes[n].log.log_end_offset
        entries = nodes[n].epoch_cache.entries
        assert [e for e in entries if e[1] < leo] == _epoch_starts(nodes[n]), (n, entries)
        assert all(start == leo for _, start in entries if start >= leo), (n, entries)


def _epoch_starts(p: Partition) -> list[tuple[int, int]]:
    """(epoch, first offset) of every epoch in the log's batches, as a follower's epoch cache must hold them."""
    data = p.log.read(p.log.log_start_offset, 1 << 24, min_one_batch=True).records
    starts: list[tuple[int, int]] = []
    for _, header in iter_batch_spans(data):
        if not starts or header.partition_leader_epoch > starts[-1][0]:
            starts.append((header.partition_leader_epoch, header.base_offset))
    return starts


def test_follower_with_an_epoch_the_leader_never_had_truncates_to_its_own_end_of_the_common_epoch(
    tmp_path: Path,
) -> None:
    """A leads epoch 0 up to offset 10, B copied only 0-4; B is elected (unclean) for epoch 1 and writes 5-6;
    then A leads epoch 2 without ever hearing of epoch 1. A's answer for B's epoch 1 is (0, 10): epoch 0 ends
    at 10 on A -- but on B it ends at 5, where B's epoch 1 starts, so B must truncate to 5 (min of both ends),
    not 10: keeping its epoch-1 records at 5-6 would leave them forever under A's epoch-0 records."""
    a, b = _partition(tmp_path, "a", 0), _partition(tmp_path, "b", 1)
    a.make_leader([0, 1], [0, 1], 0, now_ms=0)
    b.make_follower([0, 1], 0, 0, [0, 1])
    _append(a, 5)
    assert _sync(a, b) == 0
    _append(a, 5)  # offsets 5-9, epoch 0: a's alone
    b.make_leader([0, 1], [1], 1, now_ms=0)
    _append(b, 2)  # offsets 5-6, epoch 1: b's alone
    a.make_leader([0, 1], [0], 2, now_ms=0)
    b.make_follower([0, 1], 0, 2, [0])
    assert a.validate_fetch(2, 7, 1) == (ErrorCode.NONE, (0, 10))
    assert b.truncation_offset(0, 10) == 5
    assert _sync(a, b) == 1
    assert _batches(b) == _batches(a)
