"""librdkafka (confluent-kafka) against leader epochs: its consumer keeps the leader epoch of every fetched
batch with its position and, when the partition's leader epoch changes, validates the position with
OffsetForLeaderEpoch (API 23) before fetching on. With pylog advertising that API, a consumer that sees two
leader changes mid-partition must still read every record exactly once and in order, with truncation detection
armed (``auto.offset.reset=error``: a wrong end offset would surface as an error, not a silent reset).

Nothing dies here (leadership moves by the controller's metadata write, :func:`force_leader`), so the three
nodes run in this process, sharing one cluster directory."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.launch import create_topic
from tests.support.brokers import start_node_brokers
from tests.support.cluster import force_leader, metadata, partition_state, wait_for

TOPIC = "validate"
SETTINGS = {"auto.leader.rebalance.enable": "false", "broker.session.timeout.ms": "60000"}


def _move_leader(cluster_dir: Path, nodes: list[str], new_leader: int) -> int:
    """Leadership to ``new_leader`` with a new epoch (the controller's write), applied on every node (``nodes``:
    their addresses by node id), once the node is back in the ISR (a clean election: it has every acknowledged
    record)."""
    wait_for(
        lambda: new_leader in partition_state(nodes[0], TOPIC)["IsrNodes"],
        timeout_s=30,
        what=f"node {new_leader} in the ISR",
    )
    record = force_leader(cluster_dir, TOPIC, 0, new_leader)
    for node_id, address in enumerate(nodes):
        wait_for(
            lambda a=address: partition_state(a, TOPIC)["LeaderEpoch"] == record.leader_epoch,
            what=f"epoch {record.leader_epoch} on node {node_id}",
        )
    epoch: int = record.leader_epoch
    return epoch


def _produce(confluent_kafka: Any, bootstrap: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[Any] = []
    for value in values:
        producer.produce(TOPIC, value=value, partition=0, on_delivery=lambda e, m: e and errors.append(e))
    assert producer.flush(30) == 0
    assert not errors, errors[:3]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_librdkafka_validates_its_position_across_leader_changes_and_reads_everything_once(
    tmp_path: Path,
) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    cluster_dir = tmp_path / "cluster"
    cluster_dir.mkdir()
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "pylog.cluster.dir": str(cluster_dir), **SETTINGS}
    brokers = start_node_brokers(tmp_path, props, nodes=3)
    try:
        nodes = [b.bootstrap for b in brokers]
        bootstrap = ",".join(nodes)
        create_topic(bootstrap, TOPIC, 1, {"min.insync.replicas": "2"}, replication_factor=3)
        for address in nodes:
            wait_for(
                lambda a=address: len(metadata(a, [TOPIC])["Topics"][0]["Partitions"]) == 1,
                what=f"{TOPIC} known at {address}",
            )
        first = partition_state(nodes[0], TOPIC)["LeaderId"]
        others = [n for n in range(3) if n != first]
        sent = [f"r{i}".encode() for i in range(400)]
        _produce(confluent_kafka, bootstrap, sent[:100])  # epoch 0
        _move_leader(cluster_dir, nodes, others[0])
        _produce(confluent_kafka, bootstrap, sent[100:200])  # epoch 1, another leader
        handler = _Records()
        rdk_log = logging.getLogger("test.librdkafka")
        rdk_log.addHandler(handler)
        rdk_log.setLevel(logging.DEBUG)
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "pylog-epochs",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "max.partition.fetch.bytes": 1024,  # small fetches: the position moves batch by batch
                "topic.metadata.refresh.interval.ms": 200,
                "debug": "fetch,topic",
            },
            logger=rdk_log,
        )
        got: list[bytes] = []
        try:
            consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
            deadline = time.monotonic() + 60
            moves = 0
            while len(got) < len(sent) and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                assert msg.error() is None, (msg.error(), [line for line in handler.lines if "VALID" in line])
                got.append(msg.value())
                # Mid-partition, twice: leadership moves while the consumer holds a position in epoch 1, then
                # again once it reads epoch 2 (one change at a time, so each validation has settled before the
                # next change; overlapping ones may rightly fail with FENCED_LEADER_EPOCH in the client).
                if len(got) == 150 and moves == 0:
                    _move_leader(cluster_dir, nodes, others[1])
                    _produce(confluent_kafka, bootstrap, sent[200:300])  # epoch 2
                    moves += 1
                elif len(got) == 250 and moves == 1:
                    _move_leader(cluster_dir, nodes, first)
                    _produce(confluent_kafka, bootstrap, sent[300:])  # epoch 3
                    moves += 1
        finally:
            consumer.close()
            rdk_log.removeHandler(handler)
        validation = [line for line in handler.lines if "VALID" in line]  # librdkafka's VALIDATE/OFFSETVALID
        assert moves == 2 and got == sent, (moves, len(got), validation)
        # librdkafka's own account: it asked OffsetForLeaderEpoch after each change, and agreed each time.
        assert sum("epoch validation succeeded" in line for line in validation) >= 2, validation
        assert not [line for line in handler.lines if "log truncation detected" in line], validation
    finally:
        for broker in brokers:
            broker.stop()
