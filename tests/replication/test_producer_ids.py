"""Producer ids are unique across a cluster (issue: two nodes allocating from 0 on their own).

Before, every node of ``pylog-broker cluster`` allocated producer ids from 0 with its own file, so two
idempotent producers that asked different nodes could get the same (producerId, epoch); writing the same
partition, the second one's batches were taken for duplicates -- acknowledged with the first one's offsets and
never written (400 records acked, 200 readable). Now a node takes its blocks from ``cluster.json``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.storage.producer_state import ProducerIdManager
from tests.server.rawclient import RawConnection, build_batch, produce_body, request
from tests.support.cluster import create_replicated, high_watermark, metadata

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with cluster_process(tmp_path_factory.mktemp("pid-cluster"), 3) as running:
        yield running


def _init_producer_id(bootstrap: str) -> int:
    answer = request(
        bootstrap,
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"TransactionalId": None, "TransactionTimeoutMs": 60000, "ProducerId": -1, "ProducerEpoch": -1},
    )
    assert answer["ErrorCode"] == ErrorCode.NONE, answer
    assert answer["ProducerEpoch"] == 0
    producer_id: int = answer["ProducerId"]
    return producer_id


def test_every_node_hands_out_ids_no_other_node_handed_out(cluster: BrokerCluster) -> None:
    ids = [_init_producer_id(node.bootstrap) for node in cluster.nodes for _ in range(3)]
    assert len(set(ids)) == len(ids), ids


def test_idempotent_producers_from_different_nodes_all_get_written(cluster: BrokerCluster) -> None:
    """The measured loss: two producers, ids from two nodes, 200 records each to one partition."""
    topic = "two-producers"
    create_replicated(cluster, topic, partitions=1, rf=3)
    first, second = (
        _init_producer_id(cluster.nodes[0].bootstrap),
        _init_producer_id(cluster.nodes[1].bootstrap),
    )
    leader_id = metadata(cluster.bootstrap, [topic])["Topics"][0]["Partitions"][0]["LeaderId"]
    leader = cluster.nodes[leader_id].bootstrap
    start = high_watermark(leader, topic)
    acked = 0
    for producer_id in (first, second):
        batch = build_batch(200, producer_id=producer_id, producer_epoch=0, base_sequence=0)
        with RawConnection(leader) as conn:
            answer = conn.call(ApiKey.PRODUCE, 9, produce_body(topic, 0, batch, acks=-1))
        partition = answer["Responses"][0]["PartitionResponses"][0]
        assert partition["ErrorCode"] == ErrorCode.NONE, partition
        acked += 200
    assert high_watermark(leader, topic) - start == acked == 400


def test_a_node_never_goes_below_its_own_earlier_ids(tmp_path: Path) -> None:
    """A node's local record of its last block is the floor of every block the cluster gives it."""
    handed: list[tuple[int, int]] = []
    cluster_next = [0]

    def allocate(floor: int, size: int) -> tuple[int, int]:  # the cluster file's rule, in memory
        start = max(cluster_next[0], floor)
        cluster_next[0] = start + size
        handed.append((start, start + size - 1))
        return start, start + size - 1

    standalone = ProducerIdManager(tmp_path / "producer-ids", block_size=10)
    assert [standalone.next_id() for _ in range(3)] == [0, 1, 2]  # block [0, 9] recorded locally
    joined = ProducerIdManager(tmp_path / "producer-ids", block_size=10, allocate_block=allocate)
    assert joined.next_id() == 10
    assert handed == [(10, 19)]
    restarted = ProducerIdManager(tmp_path / "producer-ids", block_size=10, allocate_block=allocate)
    assert restarted.next_id() == 20
