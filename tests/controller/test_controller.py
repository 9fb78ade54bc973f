"""The controller role and liveness on real files: several brokers' controllers in one process, each with its own
session (flock locks conflict between open files even within one process), and a controllable clock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.controller import (
    ClusterMetadata,
    Controller,
    ControllerChannel,
    ControllerConfig,
    ControllerRecord,
    SingleHostMetadataStore,
    TopicRules,
    process_alive,
)
from broker_runtime.replication import assign_replicas


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


RULES = TopicRules(lambda name: None, lambda name, partitions, configs: None, assign_replicas)


class Node:
    """A broker's metadata side: its session and channel (registered as a broker registers), and its controller."""

    def __init__(self, tmp_path: Path, node_id: int, clock: Clock, **config: Any) -> None:
        self.store = SingleHostMetadataStore(tmp_path)
        self.session = self.store.session(node_id)
        self.channel = ControllerChannel(self.store, self.session, "cluster", RULES)
        self.channel.register("127.0.0.1", 9000 + node_id)
        self.controller = Controller(
            self.store, self.session, ControllerConfig(session_timeout_ms=1000, **config), clock=clock
        )

    def beat(self, clock: Clock) -> None:
        self.session.beat(clock.now)

    def create_topic(self, name: str, replicas: list[int]) -> None:
        self.channel.create_topic(name, 1, len(replicas), {}, {0: replicas})


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _meta(tmp_path: Path) -> ClusterMetadata:
    return SingleHostMetadataStore(tmp_path).read()


def test_one_controller_is_claimed_and_a_dead_one_is_replaced_with_a_higher_epoch(
    tmp_path: Path, clock: Clock
) -> None:
    nodes = [Node(tmp_path, i, clock) for i in range(3)]
    for n in nodes:
        n.beat(clock)
    assert nodes[0].controller.tick()
    assert not nodes[1].controller.tick() and not nodes[2].controller.tick()
    assert [n.controller.active for n in nodes] == [True, False, False]
    assert _meta(tmp_path).controller == ControllerRecord(0, 1)
    nodes[0].session.release()  # the process is gone
    assert not process_alive(tmp_path, 0)
    assert nodes[2].controller.tick()
    assert _meta(tmp_path).controller == ControllerRecord(2, 2)
    # The old controller, were it still running, finds a newer epoch and steps down without writing.
    before = _meta(tmp_path)
    assert not nodes[0].controller.tick()
    assert not nodes[0].controller.active
    assert _meta(tmp_path).controller == before.controller


def test_a_dead_broker_is_fenced_and_its_leaderships_move(tmp_path: Path, clock: Clock) -> None:
    nodes = [Node(tmp_path, i, clock) for i in range(3)]
    nodes[0].create_topic("t", [1, 2, 0])
    for n in nodes:
        n.beat(clock)
    nodes[0].controller.tick()
    nodes[1].session.release()
    assert nodes[0].controller.tick()
    meta = _meta(tmp_path)
    assert meta.brokers[1].fenced is True
    part = meta.topics["t"].partitions[0]
    assert part.leader == 2 and part.leader_epoch == 1 and part.isr == (0, 2)
    assert nodes[0].controller.fenced_total == 1


def test_a_broker_whose_session_expires_is_fenced_and_unfenced_when_it_beats_again(
    tmp_path: Path, clock: Clock
) -> None:
    nodes = [Node(tmp_path, i, clock) for i in range(2)]
    nodes[0].create_topic("t", [1, 0])
    for n in nodes:
        n.beat(clock)
    nodes[0].controller.tick()
    clock.now += 0.9
    assert not nodes[0].controller.tick(), "within the session: nothing to do"
    clock.now += 0.2  # node 1's last heartbeat is now 1.1 s old > broker.session.timeout.ms=1000
    assert nodes[0].controller.tick()
    part = _meta(tmp_path).topics["t"].partitions[0]
    assert part.leader == 0 and part.isr == (0,)
    nodes[1].beat(clock)  # SIGCONT: it runs again (same broker epoch)
    assert nodes[0].controller.tick()
    meta = _meta(tmp_path)
    assert meta.brokers[1].fenced is False
    assert meta.topics["t"].partitions[0].leader == 0, "leadership does not move back by unfencing"


def test_restart_fences_the_old_incarnation_in_the_registration(tmp_path: Path, clock: Clock) -> None:
    nodes = [Node(tmp_path, i, clock) for i in range(2)]
    nodes[0].create_topic("t", [1, 0])
    nodes[1].session.release()
    again = Node(tmp_path, 1, clock)  # restarted before any controller noticed
    meta = _meta(tmp_path)
    assert meta.brokers[1].broker_epoch == again.session.broker_epoch == 2
    part = meta.topics["t"].partitions[0]
    assert part.leader == 0 and part.leader_epoch == 1 and part.isr == (0,)


def test_auto_leader_rebalance_gives_preferred_leaders_their_partitions_back(
    tmp_path: Path, clock: Clock
) -> None:
    nodes = [
        Node(
            tmp_path,
            i,
            clock,
            leader_imbalance_check_interval_ms=5000,
            leader_imbalance_per_broker_percentage=10,
        )
        for i in range(2)
    ]
    nodes[0].create_topic("t", [1, 0])
    with nodes[0].store.update() as meta:  # the state a failover leaves: the preferred replica 1 not leading
        meta.set_partition("t", 0, replace(meta.topics["t"].partitions[0], leader=0, leader_epoch=3))
    for n in nodes:
        n.beat(clock)
    nodes[0].controller.tick()
    assert _meta(tmp_path).topics["t"].partitions[0].leader == 0
    clock.now += 5.0
    for n in nodes:
        n.beat(clock)
    assert nodes[0].controller.tick()
    part = _meta(tmp_path).topics["t"].partitions[0]
    assert part.leader == 1 and part.leader_epoch == 4
