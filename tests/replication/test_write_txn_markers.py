"""WriteTxnMarkers (API 27) on a partition leader of a 3-node cluster, sent as a coordinator would (raw requests):
the marker is appended only by the leader, is replicated before the answer (acks=-1), ends the transaction for
read_committed readers, and a marker from an older coordinator epoch than the producer's last one is refused
with TRANSACTION_COORDINATOR_FENCED; under the minimum ISR nothing is appended (NOT_ENOUGH_REPLICAS)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import fetch_body, produce_body, request
from tests.support.cluster import FAST, create_replicated, isr, leo_on_disk, partition_state, wait_for

pytestmark = pytest.mark.timeout(180)

TOPIC = "markers"


def _txn_batch(producer_id: int, epoch: int, first_seq: int, values: list[bytes]) -> bytearray:
    """A transactional batch built by kafka-python (not by pylog)."""
    builder = DefaultRecordBatchBuilder(2, 0, True, producer_id, epoch, first_seq, 1 << 20)
    now = int(time.time() * 1000)
    for i, value in enumerate(values):
        builder.append(i, now, None, value, [])
    return bytearray(builder.build())


def _node(cluster: BrokerCluster, node_id: int) -> str:
    return next(n.bootstrap for n in cluster.nodes if n.node_id == node_id)


def _markers(bootstrap: str, pid: int, epoch: int, commit: bool, coordinator_epoch: int) -> int:
    body = {
        "Markers": [
            {
                "ProducerId": pid,
                "ProducerEpoch": epoch,
                "TransactionResult": commit,
                "Topics": [{"Name": TOPIC, "PartitionIndexes": [0]}],
                "CoordinatorEpoch": coordinator_epoch,
            }
        ]
    }
    answer = request(bootstrap, ApiKey.WRITE_TXN_MARKERS, 1, body)
    marker = answer["Markers"][0]
    assert marker["ProducerId"] == pid
    code: int = marker["Topics"][0]["Partitions"][0]["ErrorCode"]
    return code


def _read_committed(bootstrap: str) -> tuple[list[bytes], int]:
    """The values a read_committed Fetch returns from offset 0 (aborted ones dropped), and the LSO."""
    body = fetch_body(TOPIC, 0, 0)
    body["IsolationLevel"] = 1
    part = request(bootstrap, ApiKey.FETCH, 11, body)["Responses"][0]["Partitions"][0]
    assert part["ErrorCode"] == 0, part
    aborted = {(a["ProducerId"], a["FirstOffset"]) for a in part["AbortedTransactions"] or []}
    values: list[bytes] = []
    from kafka.record.default_records import DefaultRecordBatch

    data = bytes(part["Records"] or b"")
    pos = 0
    while pos + 12 <= len(data):
        size = int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
        batch = DefaultRecordBatch(data[pos : pos + size])
        if not batch.is_control_batch and not any(
            p == batch.producer_id and first <= batch.base_offset for p, first in aborted
        ):
            values += [r.value for r in batch]
        pos += size
    return values, part["LastStableOffset"]


def _produce(bootstrap: str, batch: bytearray) -> dict[str, Any]:
    answer = request(bootstrap, ApiKey.PRODUCE, 9, produce_body(TOPIC, 0, batch, acks=-1))
    part: dict[str, Any] = answer["Responses"][0]["PartitionResponses"][0]
    return part


def test_markers_on_the_leader_replicated_fenced_by_coordinator_epoch(tmp_path: Path) -> None:
    with cluster_process(tmp_path, nodes=3, overrides=FAST) as cluster:
        create_replicated(cluster, TOPIC, 1, 3, {"min.insync.replicas": "2"})
        state = partition_state(cluster.bootstrap, TOPIC)
        leader = _node(cluster, state["LeaderId"])
        followers = [n for n in state["ReplicaNodes"] if n != state["LeaderId"]]
        init = request(
            leader,
            ApiKey.INIT_PRODUCER_ID,
            4,
            {"TransactionalId": None, "TransactionTimeoutMs": -1, "ProducerId": -1, "ProducerEpoch": -1},
        )
        pid, epoch = init["ProducerId"], init["ProducerEpoch"]

        # Transaction 1: open, invisible to read_committed, then committed by a marker of coordinator epoch 3.
        assert _produce(leader, _txn_batch(pid, epoch, 0, [b"t1-a", b"t1-b"]))["ErrorCode"] == 0
        values, lso = _read_committed(leader)
        assert values == [] and lso == 0
        assert _markers(_node(cluster, followers[0]), pid, epoch, True, 3) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert _markers(leader, pid, epoch, True, 3) == ErrorCode.NONE
        # acks=-1: once answered, the marker (offset 2) is on every ISR member's disk.
        for node in isr(cluster.bootstrap, TOPIC):
            wait_for(lambda node=node: leo_on_disk(cluster, node, TOPIC) == 3, 5, f"marker on node {node}")
        values, lso = _read_committed(leader)
        assert values == [b"t1-a", b"t1-b"] and lso == 3

        # Transaction 2: a stale coordinator (epoch 2 < 3) cannot end it; the current one aborts it.
        assert _produce(leader, _txn_batch(pid, epoch, 2, [b"t2"]))["ErrorCode"] == 0
        assert _markers(leader, pid, epoch, True, 2) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        values, lso = _read_committed(leader)
        assert values == [b"t1-a", b"t1-b"] and lso == 3, "a fenced marker must not end the transaction"
        assert _markers(leader, pid, epoch, False, 3) == ErrorCode.NONE
        values, lso = _read_committed(leader)
        assert values == [b"t1-a", b"t1-b"] and lso == 5

        # Under the minimum ISR (both followers dead), a marker is refused before anything is appended.
        assert _produce(leader, _txn_batch(pid, epoch, 3, [b"t3"]))["ErrorCode"] == 0
        for node in followers:
            cluster.kill(node)
        wait_for(lambda: isr(leader, TOPIC) == [state["LeaderId"]], 15, "ISR shrunk to the leader")
        assert _markers(leader, pid, epoch, True, 4) == ErrorCode.NOT_ENOUGH_REPLICAS
        assert leo_on_disk(cluster, state["LeaderId"], TOPIC) == 6, "nothing appended under the minimum ISR"
