"""Kafka transactions in a 3-node cluster, with confluent-kafka's transactional producer and read_committed /
read_uncommitted consumers (assign, no groups) against real broker processes: the coordinator of a
transactional id is the leader of its ``__transaction_state`` partition (replicated, RF 3), markers reach
partitions led by other nodes through WriteTxnMarkers, and the coordinator's failover completes what it
decided (SIGKILL after PrepareCommit), while a SIGKILLed partition leader gets its marker on the new leader."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker_runtime.coordinator.transaction import TRANSACTION_STATE_TOPIC, partition_for
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.protocol.messages import ApiKey
from tests.replication.conftest import create_replicated, metadata, partition_state, wait_for
from tests.server.rawclient import request

pytestmark = pytest.mark.timeout(240)

FAST = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "1500",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "transaction.state.log.num.partitions": "5",
    "auto.leader.rebalance.enable": "false",
}


def _producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 60000,
            "message.timeout.ms": 60000,
        }
    )
    producer.init_transactions(60)
    return producer


def _read(
    bootstrap: str, parts: list[tuple[str, int]], isolation: str, until: set[bytes], wait_s: float = 3
) -> list[bytes]:
    """Values of ``parts`` from offset 0: until ``until`` is all seen (then 0.5 s more), or ``wait_s`` of quiet."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(t, p, 0) for t, p in parts])
    got: list[bytes] = []
    deadline = time.monotonic() + (45 if until else wait_s)
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if until and until <= set(got):
                end = time.monotonic() + 0.5
                while time.monotonic() < end:
                    msg = consumer.poll(0.1)
                    if msg is not None and msg.error() is None:
                        got.append(msg.value())
                break
    finally:
        consumer.close()
    return got


def _values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def _coordinator(bootstrap: str, txn_id: str) -> int:
    answer = request(bootstrap, ApiKey.FIND_COORDINATOR, 3, {"Key": txn_id, "KeyType": 1})
    assert answer["ErrorCode"] == 0, answer
    node: int = answer["NodeId"]
    return node


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = metadata(bootstrap, [topic])
    return {p["PartitionIndex"]: p["LeaderId"] for p in md["Topics"][0]["Partitions"]}


def _describe(bootstrap: str, txn_id: str) -> dict[str, Any]:
    answer = request(bootstrap, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"TransactionalIds": [txn_id]})
    state: dict[str, Any] = answer["TransactionStates"][0]
    return state


def test_commit_and_abort_across_partitions_led_by_different_nodes(tmp_path: Path) -> None:
    with cluster_process(tmp_path, nodes=3, overrides=FAST) as cluster:
        create_replicated(cluster, "orders", 3, 3, {"min.insync.replicas": "2"})
        leaders = _leaders(cluster.bootstrap, "orders")
        assert len(set(leaders.values())) == 3, f"leaders should be spread over the nodes: {leaders}"
        parts = [("orders", p) for p in range(3)]
        producer = _producer(cluster.bootstrap, "tx-cluster")
        coordinator = _coordinator(cluster.bootstrap, "tx-cluster")
        state = partition_state(cluster.bootstrap, TRANSACTION_STATE_TOPIC, partition_for("tx-cluster", 5))
        assert (
            state["LeaderId"] == coordinator
            and len(state["ReplicaNodes"]) == 3
            and len(state["IsrNodes"]) == 3
        )

        committed, aborted, after = _values("c", 30), _values("a", 12), _values("z", 6)
        producer.begin_transaction()
        for i, value in enumerate(committed):
            producer.produce("orders", value=value, partition=i % 3)
        producer.commit_transaction(60)
        producer.begin_transaction()
        for i, value in enumerate(aborted):
            producer.produce("orders", value=value, partition=i % 3)
        producer.flush(60)
        producer.abort_transaction(60)
        producer.begin_transaction()
        for i, value in enumerate(after):
            producer.produce("orders", value=value, partition=i % 3)
        producer.commit_transaction(60)

        everything = set(committed) | set(aborted) | set(after)
        assert sorted(_read(cluster.bootstrap, parts, "read_uncommitted", everything)) == sorted(everything)
        visible = _read(cluster.bootstrap, parts, "read_committed", set(committed) | set(after))
        assert sorted(visible) == sorted(committed + after), "aborted records must never reach read_committed"
        wait_for(
            lambda: (
                _describe(_node(cluster, coordinator), "tx-cluster")["TransactionState"] == "CompleteCommit"
            ),
            15,
            "CompleteCommit",
        )
        others = [n.bootstrap for n in cluster.nodes if n.node_id != coordinator]
        assert _describe(others[0], "tx-cluster")["ErrorCode"] == 16, (
            "only the coordinator describes it (NOT_COORDINATOR)"
        )


def _node(cluster: BrokerCluster, node_id: int) -> str:
    return next(n.bootstrap for n in cluster.nodes if n.node_id == node_id)
