"""The group coordinator's timers on a manual clock (no sleeping): a session without heartbeats expires and the
group rebalances, a heartbeat restarts the session, a member that does not rejoin is removed at the rebalance
timeout, the initial rebalance delay holds the first generation; and a single node is a cluster of one (it
coordinates nothing before it loads, every group after; a failed write of the leader's assignment answers the
members the error and rebalances, as in a cluster)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.coordinator.group import (
    CoordinatorTimer,
    GroupConfig,
    GroupCoordinator,
    GroupState,
    local_appender,
)
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.purgatory import ManualClock
from tests.coordinator.offsets_logs import OffsetsLogs

SESSION_MS = 10_000
REBALANCE_MS = 5_000
PROTOCOLS = [("range", b"\x00\x00\x00\x00\x00\x00")]


class Node:
    """A single node's group coordinator over real partition logs, its timers on a manual clock."""

    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop, delay_ms: int = 0) -> None:
        self.clock = ManualClock(1_000)
        self.offsets = OffsetsLogs(root)
        self.logs = self.offsets.logs
        self.root = root
        self.fail_writes = False
        local = local_appender(self.offsets.get)

        def append(partition: int, batch: bytes) -> None:
            if self.fail_writes:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "injected: the log directory failed")
            local(partition, batch)

        self.coordinator = GroupCoordinator(
            GroupConfig(num_partitions=3, initial_rebalance_delay_ms=delay_ms),
            self.offsets.get,
            loop,
            lambda topic: 1,
            now_ms=lambda: 1_700_000_000_000,
            timer=CoordinatorTimer(self.clock),
            append_records=append,
            await_replication=lambda partition, then: then(None),
        )

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.coordinator.timer.advance_clock()

    def join(self, group: str, member_id: str = "") -> Any:
        return self.coordinator.join(
            group, member_id, None, SESSION_MS, REBALANCE_MS, "consumer", PROTOCOLS, "c", "h", False
        )

    def close(self) -> None:
        self.coordinator.shutdown()
        for log in self.logs.values():
            log.close()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def node(tmp_path: Path, loop: asyncio.AbstractEventLoop) -> Iterator[Node]:
    node = Node(tmp_path, loop)
    node.coordinator.load()
    yield node
    node.close()


def _stable_pair(node: Node) -> tuple[str, str, int]:
    """Two members in a Stable generation: (leader, follower, generation)."""
    first = node.join("g").result()
    leader = first["MemberId"]
    second = node.join("g")  # a new member: the leader must rejoin
    rejoined = node.join("g", leader)
    body, other = rejoined.result(), second.result()
    assert body["GenerationId"] == other["GenerationId"] == first["GenerationId"] + 1
    follower, generation = other["MemberId"], body["GenerationId"]
    synced = node.coordinator.sync("g", generation, leader, None, {leader: b"L", follower: b"F"})
    assert synced.result()["Assignment"] == b"L"
    assert node.coordinator.sync("g", generation, follower, None, {})["Assignment"] == b"F"
    return leader, follower, generation


def test_a_session_without_heartbeats_expires_and_the_group_rebalances(node: Node) -> None:
    leader, follower, generation = _stable_pair(node)
    node.advance(SESSION_MS - 1)
    assert (
        node.coordinator.heartbeat("g", generation, leader, None) == ErrorCode.NONE
    )  # leader's session restarts
    node.advance(1)  # the follower's session timeout passed: removed, the group rebalances
    group = node.coordinator.group("g")
    assert group is not None and set(group.members) == {leader}
    assert group.state == GroupState.PREPARING_REBALANCE
    assert node.coordinator.heartbeat("g", generation, leader, None) == ErrorCode.REBALANCE_IN_PROGRESS
    assert node.coordinator.heartbeat("g", generation, follower, None) == ErrorCode.UNKNOWN_MEMBER_ID
    node.advance(SESSION_MS)  # nobody heartbeats or rejoins: the leader is removed too
    assert group.members == {} and group.state == GroupState.EMPTY


def test_a_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout(node: Node) -> None:
    leader, follower, generation = _stable_pair(node)
    waiting = node.join("g", leader)  # the leader rejoins: a rebalance starts
    assert not waiting.done()
    node.advance(REBALANCE_MS - 1)
    assert node.coordinator.heartbeat("g", generation, follower, None) == ErrorCode.REBALANCE_IN_PROGRESS
    assert not waiting.done()
    node.advance(1)
    body = waiting.result()
    assert body["GenerationId"] == generation + 1
    assert [m["MemberId"] for m in body["Members"]] == [leader]
    assert node.coordinator.heartbeat("g", generation, follower, None) == ErrorCode.UNKNOWN_MEMBER_ID


def test_the_initial_rebalance_delay_holds_the_first_generation(
    tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    node = Node(tmp_path, loop, delay_ms=3_000)
    node.coordinator.load()
    try:
        first = node.join("g")
        node.advance(2_000)
        second = node.join("g")  # extends the delay by 3 s, at most up to the rebalance timeout (5 s)
        node.advance(2_999)
        assert not first.done() and not second.done()
        node.advance(1)  # 5 s after the first join: the rebalance timeout caps the delay
        assert first.result()["GenerationId"] == second.result()["GenerationId"] == 1
    finally:
        node.close()


def test_a_single_node_coordinates_nothing_before_it_loads_and_every_group_after(
    tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    node = Node(tmp_path, loop)
    try:
        assert node.join("g")["ErrorCode"] == ErrorCode.NOT_COORDINATOR
        node.coordinator.load()
        assert node.coordinator.owned_partitions == {0: 0, 1: 0, 2: 0}
        assert node.join("g").result()["ErrorCode"] == ErrorCode.NONE
    finally:
        node.close()


def test_a_failed_write_of_the_assignment_answers_the_members_and_rebalances(node: Node) -> None:
    first = node.join("g").result()
    leader, generation = first["MemberId"], first["GenerationId"]
    node.fail_writes = True
    synced = node.coordinator.sync("g", generation, leader, None, {leader: b"L"})
    assert synced.result() == {"ErrorCode": ErrorCode.NOT_COORDINATOR, "Assignment": b""}
    group = node.coordinator.group("g")
    assert group is not None and group.state == GroupState.PREPARING_REBALANCE
