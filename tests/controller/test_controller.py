"""The controller role and liveness on real files: several brokers' controllers in one process, each with its own
session (flock locks conflict between open files even within one process), and a controllable clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker_runtime.controller import (
    BrokerSession,
    Controller,
    ControllerConfig,
    FileMetadataStore,
    process_alive,
    register_broker,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _topic(doc: dict[str, Any], name: str, replicas: list[int]) -> None:
    doc.setdefault("topics", {})[name] = {
        "configs": {},
        "partitions": [
            {
                "replicas": replicas,
                "leader": replicas[0],
                "leader_epoch": 0,
                "isr": replicas,
                "partition_epoch": 0,
            }
        ],
    }


class Node:
    def __init__(self, tmp_path: Path, node_id: int, clock: Clock, **config: Any) -> None:
        self.store = FileMetadataStore(tmp_path)
        self.session = BrokerSession(tmp_path, node_id)
        self.session.acquire()
        with self.store.update() as doc:
            self.session.broker_epoch = register_broker(
                doc, node_id, "127.0.0.1", 9000 + node_id, unclean_default=False, now=clock()
            )
            self.session.beat()
        self.controller = Controller(
            self.store, self.session, ControllerConfig(session_timeout_ms=1000, **config), clock=clock
        )

    def beat(self, clock: Clock) -> None:
        self.session.beat(clock.now)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _doc(tmp_path: Path) -> dict[str, Any]:
    return FileMetadataStore(tmp_path).read()


def test_one_controller_is_claimed_and_a_dead_one_is_replaced_with_a_higher_epoch(
    tmp_path: Path, clock: Clock
) -> None:
    nodes = [Node(tmp_path, i, clock) for i in range(3)]
    for n in nodes:
        n.beat(clock)
    assert nodes[0].controller.tick()
    assert not nodes[1].controller.tick() and not nodes[2].controller.tick()
    assert [n.controller.active for n in nodes] == [True, False, False]
    assert _doc(tmp_path)["controller"] == {"id": 0, "epoch": 1}
    nodes[0].session.release()  # the process is gone
    assert not process_alive(tmp_path, 0)
    assert nodes[2].controller.tick()
    assert _doc(tmp_path)["controller"] == {"id": 2, "epoch": 2}
    # The old controller, were it still running, finds a newer epoch and steps down without writing.
    before = _doc(tmp_path)
    assert not nodes[0].controller.tick()
    assert not nodes[0].controller.active
    assert _doc(tmp_path)["controller"] == before["controller"]


def test_a_dead_broker_is_fenced_and_its_leaderships_move(tmp_path: Path, clock: Clock) -> None:
    nodes = [Node(tmp_path, i, clock) for i in range(3)]
    with nodes[0].store.update() as doc:
        _topic(doc, "t", [1, 2, 0])
    for n in nodes:
        n.beat(clock)
    nodes[0].controller.tick()
    nodes[1].session.release()
    assert nodes[0].controller.tick()
    doc = _doc(tmp_path)
    assert doc["brokers"]["1"]["fenced"] is True
    part = doc["topics"]["t"]["partitions"][0]
    assert part["leader"] == 2 and part["leader_epoch"] == 1 and part["isr"] == [0, 2]
    assert nodes[0].controller.fenced_total == 1


def test_a_broker_whose_session_expires_is_fenced_and_unfenced_when_it_beats_again(
    tmp_path: Path, clock: Clock
) -> None:
    nodes = [Node(tmp_path, i, clock) for i in range(2)]
    with nodes[0].store.update() as doc:
        _topic(doc, "t", [1, 0])
    for n in nodes:
        n.beat(clock)
    nodes[0].controller.tick()
    clock.now += 0.9
    assert not nodes[0].controller.tick(), "within the session: nothing to do"
    clock.now += 0.2  # node 1's last heartbeat is now 1.1 s old > broker.session.timeout.ms=1000
    assert nodes[0].controller.tick()
    part = _doc(tmp_path)["topics"]["t"]["partitions"][0]
    assert part["leader"] == 0 and part["isr"] == [0]
    nodes[1].beat(clock)  # SIGCONT: it runs again (same broker epoch)
    assert nodes[0].controller.tick()
    doc = _doc(tmp_path)
    assert doc["brokers"]["1"]["fenced"] is False
    assert doc["topics"]["t"]["partitions"][0]["leader"] == 0, "leadership does not move back by unfencing"


def test_restart_fences_the_old_incarnation_in_the_registration(tmp_path: Path, clock: Clock) -> None:
    nodes = [Node(tmp_path, i, clock) for i in range(2)]
    with nodes[0].store.update() as doc:
        _topic(doc, "t", [1, 0])
    nodes[1].session.release()
    again = Node(tmp_path, 1, clock)  # restarted before any controller noticed
    doc = _doc(tmp_path)
    assert doc["brokers"]["1"]["broker_epoch"] == again.session.broker_epoch == 2
    part = doc["topics"]["t"]["partitions"][0]
    assert part["leader"] == 0 and part["leader_epoch"] == 1 and part["isr"] == [0]


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
    with nodes[0].store.update() as doc:
        _topic(doc, "t", [1, 0])
        doc["topics"]["t"]["partitions"][0].update(leader=0, leader_epoch=3)
    for n in nodes:
        n.beat(clock)
    nodes[0].controller.tick()
    assert _doc(tmp_path)["topics"]["t"]["partitions"][0]["leader"] == 0
    clock.now += 5.0
    for n in nodes:
        n.beat(clock)
    assert nodes[0].controller.tick()
    part = _doc(tmp_path)["topics"]["t"]["partitions"][0]
    assert part["leader"] == 1 and part["leader_epoch"] == 4
