"""Consumer groups (KIP-848) survive a restart of the group coordinator: Kafka's ``ConsumerGroup*`` records are
written to real ``__consumer_offsets`` partition logs and replayed by a new coordinator over the same files (the
broker-level restart over real sockets is in tests/server/test_consumer_group_restart.py). On a manual clock: no
sleeping."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.coordinator.group import consumer_records
from broker_runtime.coordinator.group.consumer_state import MemberState
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.records import RecordBatchBuilder
from tests.coordinator.test_consumer_groups import SESSION_MS, TOPICS, Node, parts

IDS = {name: uuid.uuid5(uuid.NAMESPACE_DNS, name) for name in TOPICS}


class Restartable:
    """A coordinator over one directory that can be stopped and started again (a broker restart)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.node = Node(root, self.loop, lambda: IDS)

    def restart(self) -> Node:
        self.node.close()
        self.node = Node(self.root, self.loop, lambda: IDS)
        return self.node

    def close(self) -> None:
        self.node.close()
        self.loop.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Restartable]:
    r = Restartable(tmp_path)
    yield r
    r.close()


def snapshot(node: Node, group_id: str = "g") -> dict[str, Any]:
    """What ConsumerGroupDescribe answers from, and the epochs the next heartbeats are checked against."""
    group = node.coordinator.group(group_id)
    assert group is not None and group.consumer is not None
    cg = group.consumer
    return {
        "state": cg.state(),
        "group_epoch": cg.group_epoch,
        "assignment_epoch": cg.assignment_epoch,
        "assignor": node.coordinator.consumer.assignor_of(cg),
        "target": cg.target,
        "static": cg.static_members,
        "members": {
            m.member_id: (
                m.instance_id,
                m.rack_id,
                m.client_id,
                m.client_host,
                m.member_epoch,
                m.previous_member_epoch,
                m.state,
                m.rebalance_timeout_ms,
                m.subscribed_topics,
                m.server_assignor,
                m.assigned,
                m.pending_revocation,
            )
            for m in cg.members.values()
        },
    }


def test_a_restart_keeps_members_epochs_and_assignments(cluster: Restartable) -> None:
    node = cluster.node
    a = node.hb("a", 0, topics=("t", "u"), server_assignor="range", rack_id="r1", client_id="ca")
    b = node.hb("b", 0, topics=("t",), instance_id="static-b")
    # a must give partitions of t to b: a is mid-revocation, b waits for them (UNRELEASED_PARTITIONS)
    a2 = node.hb("a", a.member_epoch)
    assert node.coordinator.group("g").consumer.members["a"].state == MemberState.UNREVOKED_PARTITIONS  # type: ignore[union-attr]
    before = snapshot(node)
    assert before["members"]["b"][6] == MemberState.UNRELEASED_PARTITIONS
    end = {p: log.log_end_offset for p, log in node.logs.items()}

    node = cluster.restart()
    assert snapshot(node) == before

    # a heartbeat that changes nothing writes nothing
    still = node.hb("b", b.member_epoch, instance_id="static-b")
    assert still.error == ErrorCode.NONE and still.member_epoch == b.member_epoch
    assert {p: log.log_end_offset for p, log in node.logs.items()} == end

    # a goes on from where it was: it acks the revocation at its epoch, b then gets the partitions
    assert a2.assignment is not None
    kept = {t: ps for t, ps in a2.assignment.items()}
    done = node.hb("a", a2.member_epoch, owned=kept)
    assert done.error == ErrorCode.NONE and done.member_epoch == before["assignment_epoch"]
    got = node.hb("b", b.member_epoch, instance_id="static-b", owned={})
    assert parts(got) and not parts(got) & {(t, p) for t, ps in kept.items() for p in ps}
    assert snapshot(node)["group_epoch"] == before["group_epoch"]  # the topics hash as before: no bump


def test_a_member_silent_after_the_restart_is_fenced_by_its_session(cluster: Restartable) -> None:
    node = cluster.node
    a = node.hb("a", 0)
    b = node.hb("b", 0)
    a = node.hb("a", a.member_epoch, owned=a.assignment)
    node = cluster.restart()
    node.advance(SESSION_MS // 2)
    kept = node.hb("b", b.member_epoch, owned=b.assignment)
    assert kept.error == ErrorCode.NONE
    node.advance(SESSION_MS // 2 + 1)
    group = node.coordinator.group("g")
    assert group is not None and group.consumer is not None and list(group.consumer.members) == ["b"]
    # the fencing itself is written: a is gone after another restart too
    node = cluster.restart()
    assert list(snapshot(node)["members"]) == ["b"]
    assert node.hb("a", a.member_epoch).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_leave_then_delete_are_written_as_tombstones(cluster: Restartable) -> None:
    node = cluster.node
    a = node.hb("a", 0)
    assert node.hb("a", -1).error == ErrorCode.NONE
    node = cluster.restart()
    after_leave = snapshot(node)
    assert (after_leave["state"], after_leave["members"], after_leave["group_epoch"]) == ("Empty", {}, 2)
    assert node.coordinator.delete_groups(["g"]) == {"g": ErrorCode.NONE}
    node = cluster.restart()
    assert node.coordinator.group("g") is None
    assert node.hb("a", 0).member_epoch == 1  # a new group
    assert a.member_epoch == 1


def test_unknown_record_types_are_skipped_with_a_warning(
    cluster: Restartable, caplog: pytest.LogCaptureFixture
) -> None:
    node = cluster.node
    node.hb("a", 0)
    partition = node.coordinator.partition_for("g")
    batch = RecordBatchBuilder()
    batch.append(0, b"\x00\x63unknown-to-this-version", b"\x00\x00")
    node.logs[partition].append(bytearray(batch.build()))
    before = snapshot(node)
    with caplog.at_level(logging.WARNING, logger="broker_runtime.coordinator.group.loader"):
        node = cluster.restart()
    assert snapshot(node) == before
    assert "type 99, unknown to this version, ignored" in caplog.text


def test_records_are_kafkas() -> None:
    """Key = int16 record type + non-flexible key; value = int16 version 0 + flexible body (Kafka 4.4's
    ``ConsumerGroupMetadataKey``/``Value`` bytes, checked by hand from the schemas)."""
    key = consumer_records.group_key(consumer_records.GROUP_METADATA, "g")
    assert key == b"\x00\x03" + b"\x00\x01g"
    from broker_runtime.coordinator.group.consumer_state import ConsumerGroupState

    records = consumer_records.group_records("g", ConsumerGroupState(group_epoch=5), {})
    # Epoch int32 5, no tagged field (MetadataHash 0 is the default)
    assert records[key] == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00"
