"""Kafka transactions in a 3-node cluster, with confluent-kafka's transactional producer and read_committed /
read_uncommitted consumers (assign, no groups) against real broker processes: the coordinator of a
transactional id is the leader of its ``__transaction_state`` partition (replicated, RF 3), markers reach
partitions led by other nodes through WriteTxnMarkers, and the coordinator's failover completes what it
decided (SIGKILL after PrepareCommit), while a SIGKILLed partition leader gets its marker on the new leader.

The tests share one 3-node cluster (started once per module, made whole again by
:func:`~tests.support.cluster.heal` before each test), each with a topic and a transactional id of its
own. Its brokers hold transaction markers back while the module's hold file exists (a test creates it and
removes it; one a failed test left is removed before the next)."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.coordinator.transaction import TRANSACTION_STATE_TOPIC, partition_for
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import fetch_body, request
from tests.support import transactions
from tests.support.cluster import FAST as CLUSTER_FAST
from tests.support.cluster import create_replicated, heal, metadata, partition_state, wait_for
from tests.support.transactions import numbered_values, transactional_producer

#: A cluster's reads wait longer than one broker's: a failover may come first.
read_values = functools.partial(transactions.read_values, deadline_s=45)

pytestmark = pytest.mark.timeout(240)

FAST = {
    **CLUSTER_FAST,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "transaction.state.log.num.partitions": "5",
    "auto.leader.rebalance.enable": "false",
}
#: The producers wait out a failover (init_transactions and their records).
PRODUCER_WAITS = {"init_timeout_s": 60, "message_timeout_ms": 60000}


@pytest.fixture(scope="module")
def hold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hold file: while it exists, the brokers hold transaction markers back."""
    return tmp_path_factory.mktemp("hold") / "hold-markers"


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory, hold: Path) -> Iterator[BrokerCluster]:
    overrides = {**FAST, "pylog.test.transaction.markers.hold.file": str(hold)}
    with cluster_process(tmp_path_factory.mktemp("cluster"), nodes=3, overrides=overrides) as running:
        yield running


@pytest.fixture
def cluster(shared_cluster: BrokerCluster, hold: Path) -> BrokerCluster:
    """The module's cluster, made whole for the test (every node running, unfenced, every partition with its
    full ISR: what the previous test killed or stopped is restored), no markers held."""
    hold.unlink(missing_ok=True)
    heal(shared_cluster)
    return shared_cluster


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


def test_commit_and_abort_across_partitions_led_by_different_nodes(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "orders", 3, 3, {"min.insync.replicas": "2"})
    leaders = _leaders(cluster.bootstrap, "orders")
    assert len(set(leaders.values())) == 3, f"leaders should be spread over the nodes: {leaders}"
    parts = [("orders", p) for p in range(3)]
    producer = transactional_producer(cluster.bootstrap, "tx-cluster", **PRODUCER_WAITS)
    coordinator = _coordinator(cluster.bootstrap, "tx-cluster")
    state = partition_state(cluster.bootstrap, TRANSACTION_STATE_TOPIC, partition_for("tx-cluster", 5))
    assert (
        state["LeaderId"] == coordinator and len(state["ReplicaNodes"]) == 3 and len(state["IsrNodes"]) == 3
    )

    committed, aborted, after = numbered_values("c", 30), numbered_values("a", 12), numbered_values("z", 6)
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
    assert sorted(read_values(cluster.bootstrap, parts, "read_uncommitted", everything)) == sorted(everything)
    visible = read_values(cluster.bootstrap, parts, "read_committed", set(committed) | set(after))
    assert sorted(visible) == sorted(committed + after), "aborted records must never reach read_committed"
    wait_for(
        lambda: _describe(_node(cluster, coordinator), "tx-cluster")["TransactionState"] == "CompleteCommit",
        15,
        "CompleteCommit",
    )
    others = [n.bootstrap for n in cluster.nodes if n.node_id != coordinator]
    assert _describe(others[0], "tx-cluster")["ErrorCode"] == 16, (
        "only the coordinator describes it (NOT_COORDINATOR)"
    )


def _node(cluster: BrokerCluster, node_id: int) -> str:
    return next(n.bootstrap for n in cluster.nodes if n.node_id == node_id)


# --- failures ------------------------------------------------------------------------------------------------


def _live(cluster: BrokerCluster, *gone: int) -> str:
    return ",".join(n.bootstrap for n in cluster.nodes if n.node_id not in gone)


def _committed_while_markers_held(
    cluster: BrokerCluster, hold: Path, txn_id: str, topic: str
) -> tuple[list[bytes], int]:
    """A committed transaction over the 3 partitions of a new ``topic`` whose markers are held back; (its
    values, its coordinator)."""
    create_replicated(cluster, topic, 3, 3, {"min.insync.replicas": "2"})
    producer = transactional_producer(cluster.bootstrap, txn_id, **PRODUCER_WAITS)
    coordinator = _coordinator(cluster.bootstrap, txn_id)
    values = numbered_values(txn_id, 18)
    hold.touch()
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % 3)
    producer.commit_transaction(60)  # answered once PrepareCommit is replicated; the markers wait
    state = _describe(_node(cluster, coordinator), txn_id)
    assert state["TransactionState"] == "PrepareCommit", state
    parts = [(topic, p) for p in range(3)]
    assert read_values(cluster.bootstrap, parts, "read_committed", set(), wait_s=2) == [], (
        "nothing visible before markers"
    )
    return values, coordinator


def _new_coordinator(cluster: BrokerCluster, txn_id: str, old: int) -> int:
    live = _live(cluster, old)

    def moved() -> int:
        try:
            node = _coordinator(live, txn_id)
        except AssertionError:
            return 0
        return node + 1 if node != old else 0

    return int(wait_for(moved, 20, "a new transaction coordinator")) - 1


def test_sigkill_of_the_coordinator_after_prepare_commit_the_new_coordinator_completes_it(
    cluster: BrokerCluster,
    hold: Path,
) -> None:
    values, coordinator = _committed_while_markers_held(cluster, hold, "tx-coord-dies", "orders-coord-dies")
    cluster.kill(coordinator)
    hold.unlink()
    successor = _new_coordinator(cluster, "tx-coord-dies", coordinator)
    parts = [("orders-coord-dies", p) for p in range(3)]
    visible = read_values(_live(cluster, coordinator), parts, "read_committed", set(values))
    assert sorted(visible) == sorted(values), "the new coordinator must complete the commit, all of it"
    wait_for(
        lambda: _describe(_node(cluster, successor), "tx-coord-dies")["TransactionState"] == "CompleteCommit",
        15,
        "CompleteCommit on the new coordinator",
    )


def test_sigkill_of_a_partition_leader_while_markers_are_pending_the_marker_lands_on_the_new_leader(
    cluster: BrokerCluster,
    hold: Path,
) -> None:
    values, coordinator = _committed_while_markers_held(cluster, hold, "tx-leader-dies", "orders-leader-dies")
    leaders = _leaders(cluster.bootstrap, "orders-leader-dies")
    victim_partition = next(p for p, leader in leaders.items() if leader != coordinator)
    victim = leaders[victim_partition]
    cluster.kill(victim)
    hold.unlink()  # at once: the first marker attempts meet the dead leader (or no leader) and must be retried
    live = _live(cluster, victim)
    wait_for(
        lambda: partition_state(live, "orders-leader-dies", victim_partition)["LeaderId"] not in (-1, victim),
        15,
        "new leader",
    )

    parts = [("orders-leader-dies", p) for p in range(3)]
    visible = read_values(live, parts, "read_committed", set(values))
    assert sorted(visible) == sorted(values), (
        "the marker of the dead leader's partition must land on the new one"
    )
    wait_for(
        lambda: (
            _describe(_node(cluster, coordinator), "tx-leader-dies")["TransactionState"] == "CompleteCommit"
        ),
        15,
        "CompleteCommit",
    )


def _markers_on(bootstrap: str, topic: str, partition: int) -> list[tuple[int, int]]:
    """(control type, coordinator epoch) of every transaction marker in ``topic``-``partition``, in log order."""
    from kafka.record.default_records import DefaultRecordBatch

    part = request(bootstrap, ApiKey.FETCH, 11, fetch_body(topic, partition, 0))["Responses"][0][
        "Partitions"
    ][0]
    assert part["ErrorCode"] == 0, part
    data, pos, found = bytes(part["Records"] or b""), 0, []
    while pos + 12 <= len(data):
        size = int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
        batch = DefaultRecordBatch(data[pos : pos + size])
        if batch.is_control_batch:
            for record in batch:
                found.append(
                    (int.from_bytes(record.key[2:4], "big"), int.from_bytes(record.value[2:6], "big"))
                )
        pos += size
    return found


def test_a_stopped_coordinator_that_returns_cannot_end_the_transaction_again(
    cluster: BrokerCluster, hold: Path
) -> None:
    from tests.support.cluster import paused

    values, old = _committed_while_markers_held(cluster, hold, "tx-zombie", "orders-zombie")
    parts = [("orders-zombie", p) for p in range(3)]
    with paused(cluster.nodes[old].pid):
        successor = _new_coordinator(cluster, "tx-zombie", old)
        hold.unlink()  # the successor writes the markers with its (higher) coordinator epoch
        visible = read_values(_live(cluster, old), parts, "read_committed", set(values))
        assert sorted(visible) == sorted(values)
        wait_for(
            lambda: _describe(_node(cluster, successor), "tx-zombie")["TransactionState"] == "CompleteCommit",
            15,
            "CompleteCommit on the successor",
        )
    # The old coordinator runs again with its held markers of the old epoch: they must not land after the
    # successor's (refused as TRANSACTION_COORDINATOR_FENCED, or never sent once it sees it lost the partition).
    wait_for(
        lambda: _describe(_node(cluster, old), "tx-zombie")["ErrorCode"] == 16,
        15,
        "old one: NOT_COORDINATOR",
    )
    time.sleep(1)
    for p in range(3):
        leader = _node(cluster, _leaders(_live(cluster, old), "orders-zombie")[p])
        markers = _markers_on(leader, "orders-zombie", p)
        assert markers and all(kind == 1 for kind, _ in markers), (p, markers)
        epochs = [epoch for _, epoch in markers]
        assert epochs == sorted(epochs), f"a stale coordinator's marker landed after a newer one: {markers}"
    assert sorted(read_values(cluster.bootstrap, parts, "read_committed", set(values))) == sorted(values)


def test_state_writes_need_the_minimum_isr_of_the_transaction_state_partition(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "orders-isr", 1, 3)
    transactional_producer(
        cluster.bootstrap, "tx-isr", **PRODUCER_WAITS
    )  # creates __transaction_state (RF 3, min ISR 2)
    coordinator = _coordinator(cluster.bootstrap, "tx-isr")
    index = partition_for("tx-isr", 5)
    state = partition_state(cluster.bootstrap, TRANSACTION_STATE_TOPIC, index)
    assert sorted(state["ReplicaNodes"]) == [0, 1, 2]
    for node in range(3):
        if node != coordinator:
            cluster.kill(node)
    leader = _node(cluster, coordinator)
    wait_for(
        lambda: partition_state(leader, TRANSACTION_STATE_TOPIC, index)["IsrNodes"] == [coordinator],
        15,
        "the state partition's ISR down to its leader",
    )
    body = {
        "TransactionalId": "tx-isr",
        "TransactionTimeoutMs": 60000,
        "ProducerId": -1,
        "ProducerEpoch": -1,
    }
    answer = request(leader, ApiKey.INIT_PRODUCER_ID, 4, body)
    assert answer["ErrorCode"] == 15, f"COORDINATOR_NOT_AVAILABLE expected under the minimum ISR: {answer}"
