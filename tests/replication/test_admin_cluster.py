"""The admin APIs in a 3-broker cluster of real processes: a deleted topic's files go on every broker,
configs (topic overrides and the cluster-wide broker defaults) reach every broker, CreatePartitions places the
new partitions through the metadata and every replica creates them, and DeleteRecords on the leader moves the
followers' log start too. Driven by confluent-kafka's and kafka-python's admin clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions

from broker_runtime.client import KafkaClient
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.launch.process import CLUSTER_DIR
from tests.support.cluster import create_replicated, metadata, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with cluster_process(tmp_path_factory.mktemp("admin-cluster"), 3) as running:
        yield running


def _node_dir(cluster: BrokerCluster, node_id: int) -> Path:
    return cluster.data_dir / CLUSTER_DIR / f"node-{node_id}"


def test_delete_topic_removes_its_files_on_every_broker(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "doomed", partitions=2, rf=3)
    for node in cluster.nodes:
        assert (_node_dir(cluster, node.node_id) / "doomed-1").is_dir()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(30)
    for node in cluster.nodes:
        wait_for(
            lambda n=node.node_id: (
                not any(p.name.startswith("doomed-") for p in _node_dir(cluster, n).iterdir())
            ),
            what=f"node {node.node_id} deleted the files of doomed",
        )
        assert "doomed" not in {t["Name"] for t in metadata(node.bootstrap)["Topics"]}


def test_configs_and_new_partitions_reach_every_broker(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "shared", partitions=1, rf=3)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.alter_configs(
            [KpConfigResource(ConfigResourceType.TOPIC, "shared", {"segment.bytes": "65536"})]
        )
        admin.create_partitions({"shared": KpNewPartitions(3)})
    finally:
        admin.close()
    with KafkaClient(cluster.bootstrap) as client:
        client.admin.alter_configs(4, "", {"log.retention.bytes": "7777777"})
    for node in cluster.nodes:
        node_dir = _node_dir(cluster, node.node_id)
        # Every broker applied the override to its replicas (persisted with each partition) and hosts the new ones.
        wait_for(
            lambda d=node_dir: all(
                (d / f"shared-{i}" / "topic.config").is_file()
                and "segment.bytes=65536" in (d / f"shared-{i}" / "topic.config").read_text()
                for i in range(3)
            ),
            what=f"node {node.node_id} applied segment.bytes and created shared-1, shared-2",
        )
        with KafkaClient(node.bootstrap) as client:
            entries = {e.name: e for e in client.admin.describe_config_entries(2, "shared")}
            assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("65536", 1)
            assert (entries["retention.bytes"].value, entries["retention.bytes"].source) == ("7777777", 3)
        leaders = [p["LeaderId"] for p in metadata(node.bootstrap, ["shared"])["Topics"][0]["Partitions"]]
        # Placed as CreateTopics places a 3-partition topic: partition p led by node p % 3.
        assert leaders == [0, 1, 2]


def test_delete_records_moves_the_followers_log_start(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "trim", partitions=1, rf=3, configs={"segment.bytes": "200"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(10):
        producer.produce("trim", b"value-%d" % i, partition=0)
        producer.flush(10)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    tp = CkTopicPartition("trim", 0, 6)
    assert admin.delete_records([tp])[tp].result(30).low_watermark == 6

    def first_base(node_id: int) -> int:
        return min(int(p.stem) for p in (_node_dir(cluster, node_id) / "trim-0").glob("*.log"))

    for node in cluster.nodes:
        wait_for(
            lambda n=node.node_id: first_base(n) > 0,
            what=f"node {node.node_id} deleted old segments of trim-0",
        )
