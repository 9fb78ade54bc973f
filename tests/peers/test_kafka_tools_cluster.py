"""Apache Kafka's command-line tools against a pylog cluster (three broker processes on loopback) where the answer
depends on replicas: kafka-topics' replica lists, kafka-log-dirs, kafka-leader-election.

The tools run in the shared tool-runner JVM (``tests/support/apache_kafka/tool_runner.py``); what they print is
compared with what pylog holds (its metadata through pylog's client, its replicas' segment files).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker_runtime.client import KafkaClient
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.protocol.messages import LATEST_TIMESTAMP
from tests.support.apache_kafka.tool_runner import ToolRunner
from tests.support.cluster import FAST, create_replicated, force_leader, leo_on_disk, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with cluster_process(tmp_path_factory.mktemp("pylog-cluster-for-kafka-tools"), 3, overrides=FAST) as c:
        yield c


@pytest.fixture
def tools(apache_kafka_tool_runner: ToolRunner) -> ToolRunner:
    return apache_kafka_tool_runner


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    with KafkaClient(bootstrap) as client:
        return {p: m.leader for p, m in client.metadata([topic]).topics[topic].partitions.items()}


@pytest.mark.compat(
    "kafka-tools", "kafka-topics: replica and ISR lists of a replicated topic (pylog cluster)"
)
@pytest.mark.compat("kafka-tools", "kafka-log-dirs: describe every broker's directories and replica sizes")
def test_kafka_topics_and_log_dirs_describe_a_replicated_topic(
    cluster: BrokerCluster, tools: ToolRunner
) -> None:
    """kafka-topics creates a topic with 3 replicas on the pylog cluster and describes each partition's leader,
    replicas and ISR as pylog's metadata holds them; kafka-log-dirs (DescribeLogDirs to every broker) lists
    each node's log directory and, for each replica, the bytes of its segment files and no lag once replicated."""
    topic = _name("rep")
    server = ("--bootstrap-server", cluster.bootstrap)
    created = tools.run(
        "kafka-topics",
        *server,
        "--create",
        "--topic",
        topic,
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    )
    assert created.stdout.strip() == f"Created topic {topic}."
    for node in cluster.nodes:
        wait_for(
            lambda n=node: len(_leaders(n.bootstrap, topic)) == 3, what=f"node {node.node_id} knows {topic}"
        )
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(30):
        producer.produce(topic, key=f"k{i}".encode(), value=b"x" * (10 + i))
    assert producer.flush(15) == 0
    del producer  # its connections close now, not when the cluster stops
    with KafkaClient(cluster.bootstrap) as client:
        answer = client.list_offsets({(topic, p): LATEST_TIMESTAMP for p in range(3)})
    ends = {p: answer[(topic, p)][0] for p in range(3)}
    assert sum(ends.values()) == 30
    for node in cluster.nodes:
        for p, end in ends.items():
            wait_for(
                lambda n=node.node_id, p=p, end=end: leo_on_disk(cluster, n, topic, p) == end,
                what=f"node {node.node_id} holds {topic}-{p} up to {end}",
            )

    described = tools.run("kafka-topics", *server, "--describe", "--topic", topic).stdout
    header, *rows = [dict(re.findall(r"(\w+): (\S*)", line)) for line in described.strip().splitlines()]
    assert (header["PartitionCount"], header["ReplicationFactor"]) == ("3", "3")
    with KafkaClient(cluster.bootstrap) as client:
        meta = client.metadata([topic]).topics[topic].partitions
    assert [(r["Partition"], r["Leader"], r["Replicas"], r["Isr"]) for r in rows] == [
        (str(p), str(m.leader), ",".join(map(str, m.replicas)), ",".join(map(str, m.isr)))
        for p, m in sorted(meta.items())
    ]
    assert all(len(m.replicas) == 3 and sorted(m.isr) == [0, 1, 2] for m in meta.values())

    out = tools.run("kafka-log-dirs", *server, "--describe", "--topic-list", topic).stdout
    assert out.splitlines()[1] == "Received log directory information from brokers 0,1,2"
    answer = json.loads(out.splitlines()[2])
    logs = Path(cluster.data_dir) / "kafka-logs"
    expected = {
        node: [
            {
                "logDir": str(logs / f"node-{node}"),
                "error": None,
                "partitions": {
                    f"{topic}-{p}": (
                        sum(f.stat().st_size for f in (logs / f"node-{node}" / f"{topic}-{p}").glob("*.log")),
                        0,
                        False,
                    )
                    for p in range(3)
                },
            }
        ]
        for node in range(3)
    }
    got = {
        broker["broker"]: [
            {
                "logDir": d["logDir"],
                "error": d["error"],
                "partitions": {
                    x["partition"]: (x["size"], x["offsetLag"], x["isFuture"]) for x in d["partitions"]
                },
            }
            for d in broker["logDirs"]
        ]
        for broker in answer["brokers"]
    }
    assert got == expected


@pytest.mark.compat("kafka-tools", "kafka-leader-election: preferred election (pylog cluster)")
def test_kafka_leader_election_moves_leadership_back_to_the_preferred_replica(
    cluster: BrokerCluster, tools: ToolRunner
) -> None:
    """A partition led by a replica other than its preferred (first) one: kafka-leader-election --election-type
    preferred elects the preferred replica, which every pylog node then reports as the leader; a second run
    finds nothing to do, and says so as Kafka's tool does."""
    topic = _name("elect")
    create_replicated(cluster, topic, partitions=1, rf=3)
    with KafkaClient(cluster.bootstrap) as client:
        replicas = client.metadata([topic]).topics[topic].partitions[0].replicas
    preferred, other = replicas[0], replicas[1]
    wait_for(lambda: _leaders(cluster.bootstrap, topic) == {0: preferred}, what="the preferred replica leads")
    force_leader(Path(cluster.data_dir) / "kafka-logs", topic, 0, other)
    for node in cluster.nodes:
        wait_for(
            lambda n=node: _leaders(n.bootstrap, topic) == {0: other},
            what=f"node {node.node_id}: {other} leads",
        )

    # Kafka elects the preferred replica only while it is in the ISR (else PREFERRED_LEADER_NOT_AVAILABLE): on a
    # loaded machine the old leader, now a follower, may still be catching up with the new one.
    def _isr() -> set[int]:
        with KafkaClient(cluster.bootstrap) as client:
            return set(client.metadata([topic]).topics[topic].partitions[0].isr)

    wait_for(lambda: preferred in _isr(), what=f"the preferred replica {preferred} is in the ISR")
    election = ("--bootstrap-server", cluster.bootstrap, "--election-type", "preferred")
    elected = tools.run("kafka-leader-election", *election, "--topic", topic, "--partition", "0")
    assert (
        elected.stdout.strip()
        == f"Successfully completed leader election (PREFERRED) for partitions {topic}-0"
    )
    for node in cluster.nodes:
        wait_for(
            lambda n=node: _leaders(n.bootstrap, topic) == {0: preferred},
            what=f"node {node.node_id}: the preferred replica {preferred} leads again",
        )
    again = tools.run("kafka-leader-election", *election, "--topic", topic, "--partition", "0")
    assert again.stdout.strip() == f"Valid replica already elected for partitions {topic}-0"
