"""Consumer groups of the KIP-848 protocol in the group coordinator, on a manual clock (no sleeping), over real
``__consumer_offsets`` partition logs: member and group epochs, the server-side assignors, revocation before
assignment, the rebalance and session timeouts, leave, static members, the errors Kafka answers, offset commits
checked against the member epoch, classic and consumer groups side by side, and a reload from the log."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from broker_runtime.coordinator.group import (
    Committer,
    CoordinatorTimer,
    GroupConfig,
    GroupCoordinator,
    local_appender,
)
from broker_runtime.coordinator.group.assignors import (
    AssignmentSpec,
    MemberSpec,
    range_assign,
    uniform_assign,
)
from broker_runtime.coordinator.group.consumer import HeartbeatRequest, HeartbeatResult
from broker_runtime.coordinator.group.consumer_state import ConsumerGroupConfig
from broker_runtime.errors import ErrorCode
from broker_runtime.purgatory import ManualClock
from tests.coordinator.offsets_logs import OffsetsLogs

SESSION_MS = 3_000
REBALANCE_MS = 2_000
TOPICS = {"t": 4, "u": 2}


class Node:
    def __init__(
        self,
        root: Path,
        loop: asyncio.AbstractEventLoop,
        topic_ids: Callable[[], Mapping[str, uuid.UUID]] | None = None,
        topics: Mapping[str, int] = TOPICS,
    ) -> None:
        self.clock = ManualClock(1_000)
        self.offsets = OffsetsLogs(root)
        self.logs = self.offsets.logs
        self.root = root
        self.topics = dict(topics)
        self.coordinator = GroupCoordinator(
            GroupConfig(
                num_partitions=3,
                consumer=ConsumerGroupConfig(heartbeat_interval_ms=200, session_timeout_ms=SESSION_MS),
            ),
            self.offsets.get,
            loop,
            self.topics.get,
            now_ms=lambda: 1_700_000_000_000,
            timer=CoordinatorTimer(self.clock),
            append_records=local_appender(self.offsets.get),
            await_replication=lambda partition, then: then(None),
            topic_ids=topic_ids,
        )
        self.coordinator.load()

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.coordinator.timer.advance_clock()

    def hb(
        self,
        member: str,
        epoch: int,
        owned: dict[str, frozenset[int]] | None = None,
        topics: tuple[str, ...] | None = None,
        group: str = "g",
        **kw: object,
    ) -> HeartbeatResult:
        if epoch == 0:
            kw.setdefault("rebalance_timeout_ms", REBALANCE_MS)
            owned = {} if owned is None else owned
            topics = topics or ("t",)
        req = HeartbeatRequest(group, member, epoch, subscribed_topic_names=topics, owned=owned, **kw)  # type: ignore[arg-type]
        return self.coordinator.consumer_heartbeat(req)

    def close(self) -> None:
        self.coordinator.shutdown()
        for log in self.logs.values():
            log.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    loop = asyncio.new_event_loop()
    n = Node(tmp_path, loop)
    yield n
    n.close()
    loop.close()


def parts(result: HeartbeatResult) -> set[tuple[str, int]]:
    assert result.assignment is not None
    return {(t, p) for t, ps in result.assignment.items() for p in ps}


def test_a_first_member_gets_every_partition_at_epoch_one(node: Node) -> None:
    r = node.hb("a", 0)
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (ErrorCode.NONE, "a", 1, 200)
    assert parts(r) == {("t", p) for p in range(4)}
    group = node.coordinator.group("g")
    assert group is not None and group.group_type == "consumer" and group.consumer is not None
    assert group.consumer.state() == "Stable"


def test_partitions_move_only_after_the_old_owner_revoked_them(node: Node) -> None:
    a = node.hb("a", 0)
    owned_a = a.assignment
    b = node.hb("b", 0)
    # b is in the new epoch but gets nothing a still holds
    assert b.member_epoch == 2 and parts(b) == set()
    # a is asked to give up two partitions: it stays at epoch 1 with the two it keeps
    a2 = node.hb("a", 1, owned=owned_a)
    assert a2.member_epoch == 1 and len(parts(a2)) == 2
    # a heartbeat that does not list its owned partitions is no ack
    assert node.hb("a", 1).member_epoch == 1
    # b still waits: a has not acked
    b2 = node.hb("b", 2, owned={})
    assert b2.assignment is None and b2.member_epoch == 2
    # a acks the revocation: it moves to epoch 2; then b gets the released partitions
    assert a2.assignment is not None
    a3 = node.hb("a", 1, owned=a2.assignment)
    assert a3.member_epoch == 2
    b3 = node.hb("b", 2, owned={})
    assert len(parts(b3)) == 2 and not parts(b3) & parts(a2)
    group = node.coordinator.group("g")
    assert group is not None and group.consumer is not None and group.consumer.state() == "Stable"


def test_a_member_that_does_not_revoke_in_time_is_fenced(node: Node) -> None:
    a = node.hb("a", 0)
    node.hb("b", 0)
    node.hb("a", 1, owned=a.assignment)  # a must revoke, and never acks
    node.advance(REBALANCE_MS + 10)
    r = node.hb("a", 1, owned=a.assignment)
    assert r.error == ErrorCode.UNKNOWN_MEMBER_ID
    b = node.hb("b", 3, owned={})
    assert b.error == ErrorCode.FENCED_MEMBER_EPOCH  # the group moved on: b was at 2
    group = node.coordinator.group("g")
    assert group is not None and group.consumer is not None and list(group.consumer.members) == ["b"]


def test_a_silent_member_is_fenced_after_the_session_timeout(node: Node) -> None:
    a = node.hb("a", 0)
    b = node.hb("b", 0)
    for _ in range(3):
        node.advance(SESSION_MS // 2)
        b = node.hb("b", b.member_epoch, owned={})
    group = node.coordinator.group("g")
    assert group is not None and group.consumer is not None and list(group.consumer.members) == ["b"]
    assert b.member_epoch == 3 and group.consumer.members["b"].assigned == {"t": frozenset(range(4))}
    assert node.hb("a", a.member_epoch).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_leave_frees_the_partitions_at_once(node: Node) -> None:
    node.hb("a", 0)
    b = node.hb("b", 0)
    assert node.hb("a", -1).error == ErrorCode.NONE
    b = node.hb("b", b.member_epoch, owned={})
    assert parts(b) == {("t", p) for p in range(4)}


def test_epoch_errors_as_kafka_answers_them(node: Node) -> None:
    a = node.hb("a", 0)
    assert node.hb("a", 5).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert node.hb("zz", 1).error == ErrorCode.UNKNOWN_MEMBER_ID
    node.hb("b", 0)
    a2 = node.hb("a", 1, owned=a.assignment)  # revoking at epoch 1
    assert a2.assignment is not None
    a3 = node.hb("a", 1, owned=a2.assignment)  # acked: epoch 2, previous 1
    assert a3.member_epoch == 2
    # the answer bumping the epoch was lost: the previous epoch with a subset of the assignment is accepted
    assert node.hb("a", 1, owned=a2.assignment).error == ErrorCode.NONE
    # but not with partitions outside the assignment
    assert node.hb("a", 1, owned=a.assignment).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert node.hb("", 0).error == ErrorCode.INVALID_REQUEST  # v1: the client makes its member id
    assert node.hb("c", 0, server_assignor="sticky").error == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert node.hb("c", 0, subscribed_topic_regex="(t").error == ErrorCode.INVALID_REGULAR_EXPRESSION
    # Kafka: an empty regex (librdkafka sends one with its names) or an empty list of names subscribes to
    # nothing and is accepted; only a join naming neither is refused
    assert node.hb("d", 0, subscribed_topic_regex="").error == ErrorCode.NONE
    join = {"owned": {}, "rebalance_timeout_ms": REBALANCE_MS}
    empty = HeartbeatRequest("g", "e", 0, subscribed_topic_names=(), **join)  # type: ignore[arg-type]
    assert node.coordinator.consumer_heartbeat(empty).error == ErrorCode.NONE
    neither = HeartbeatRequest("g", "f", 0, subscribed_topic_names=None, **join)  # type: ignore[arg-type]
    assert node.coordinator.consumer_heartbeat(neither).error == ErrorCode.INVALID_REQUEST


def test_static_members_leave_for_a_while_and_come_back(node: Node) -> None:
    a = node.hb("a", 0, instance_id="i1")
    node.hb("b", 0, instance_id="i2")
    a = node.hb("a", 1, owned=a.assignment, instance_id="i1")
    kept = parts(a)
    a = node.hb("a", a.member_epoch, owned=a.assignment, instance_id="i1")
    # another member id for a held instance id
    assert node.hb("x", 0, instance_id="i1").error == ErrorCode.UNRELEASED_INSTANCE_ID
    assert node.hb("x", a.member_epoch, instance_id="i1").error == ErrorCode.FENCED_INSTANCE_ID
    assert node.hb("a", -2, instance_id="i1").member_epoch == -2
    # the instance comes back under a new member id and keeps its partitions, without a new group epoch
    group = node.coordinator.group("g")
    assert group is not None and group.consumer is not None
    epoch = group.consumer.group_epoch
    back = node.hb("a2", 0, instance_id="i1")
    assert back.error == ErrorCode.NONE and parts(back) == kept
    assert group.consumer.group_epoch == epoch
    assert group.consumer.static_members == {"i1": "a2", "i2": "b"}


def test_a_static_member_that_left_is_removed_after_its_session(node: Node) -> None:
    node.hb("a", 0, instance_id="i1")
    b = node.hb("b", 0)
    node.hb("a", -2, instance_id="i1")
    for _ in range(3):
        node.advance(SESSION_MS // 2)
        b = node.hb("b", b.member_epoch, owned={})
    group = node.coordinator.group("g")
    assert group is not None and group.consumer is not None and list(group.consumer.members) == ["b"]


def test_offset_commits_are_checked_against_the_member_epoch(node: Node) -> None:
    a = node.hb("a", 0)
    offsets = {("t", 0): (5, -1, None)}
    commit = node.coordinator.commit_offsets
    assert commit("g", Committer(a.member_epoch, "a"), offsets) == {("t", 0): ErrorCode.NONE}
    assert commit("g", Committer(a.member_epoch + 1, "a"), offsets) == {
        ("t", 0): ErrorCode.STALE_MEMBER_EPOCH
    }
    assert commit("g", Committer(1, "nobody"), offsets) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert commit("g", Committer(), offsets) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}


def test_classic_and_consumer_groups_side_by_side(node: Node) -> None:
    node.hb("a", 0, group="new")
    joined = node.coordinator.join(
        "new", "", None, 10_000, 5_000, "consumer", [("range", b"")], "c", "h", False
    )
    assert isinstance(joined, dict) and joined["ErrorCode"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    node.coordinator.join("old", "", None, 10_000, 5_000, "consumer", [("range", b"")], "c", "h", False)
    assert node.hb("b", 0, group="old").error == ErrorCode.GROUP_ID_NOT_FOUND
    types = {g.group_id: g.group_type for g in node.coordinator.list_groups()}
    assert types == {"new": "consumer", "old": "classic"}


def test_assignors_balance_and_keep_partitions() -> None:
    two = (MemberSpec("a", None, frozenset({"t"})), MemberSpec("b", None, frozenset({"t"})))
    first = uniform_assign(AssignmentSpec(two[:1], {"t": 4}, {}))
    assert first == {"a": {"t": frozenset(range(4))}}
    second = uniform_assign(AssignmentSpec(two, {"t": 4}, first))
    assert len(second["a"]["t"]) == len(second["b"]["t"]) == 2 and second["a"]["t"] < first["a"]["t"]
    three = (*two, MemberSpec("c", None, frozenset({"t", "u"})))
    mixed = uniform_assign(AssignmentSpec(three, {"t": 4, "u": 2}, second))
    assert mixed["c"].get("u") == frozenset({0, 1})
    assert sorted(p for m in mixed.values() for p in m.get("t", ())) == [0, 1, 2, 3]
    ranged = range_assign(AssignmentSpec(two, {"t": 3, "u": 3}, {}))
    assert ranged == {"a": {"t": frozenset({0, 1})}, "b": {"t": frozenset({2})}}
