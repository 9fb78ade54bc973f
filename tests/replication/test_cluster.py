"""A 3-node cluster of real broker processes: acks=-1 waits for the followers (observed through the high
watermark and the followers' log files), pauses shorter and longer than the request timeout, 5,000 parked
requests, metadata with replicas and ISR, leader-only serving, librdkafka with acks=all, and a compacted topic
that every replica cleans on its own (as Kafka's) and that converges to the same last value per key.

``replica.lag.time.max.ms`` is 60 s here, so pausing a follower for a few seconds never shrinks the ISR (the
ISR tests live in ``test_isr.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import BrokerCluster, cluster_process
from tests.server.rawclient import RawConnection, build_batch, fetch_body, produce_body
from tests.support.cluster import (
    cluster_metadata,
    create_replicated,
    high_watermark,
    leo_on_disk,
    metadata,
    paused,
    readable,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

PRODUCE, FETCH = 0, 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with cluster_process(
        tmp_path_factory.mktemp("cluster"),
        3,
        overrides={"replica.lag.time.max.ms": "60000", "log.cleaner.backoff.ms": "100"},
    ) as running:
        yield running


def _produce_request(conn: RawConnection, topic: str, count: int = 3, timeout_ms: int = 10000) -> bytes:
    body = produce_body(topic, 0, build_batch(count), acks=-1)
    body["TimeoutMs"] = timeout_ms
    return conn.encode(PRODUCE, 9, body)


def _partition_answer(conn: RawConnection) -> dict[str, Any]:
    _, answer = conn.read_response(PRODUCE, 9)
    result: dict[str, Any] = answer["Responses"][0]["PartitionResponses"][0]
    return result


def test_a_started_cluster_names_its_recorded_controller_on_every_node(cluster: BrokerCluster) -> None:
    # First in this module: the cluster has just announced itself. Each broker runs one controller round before
    # it does, so the role is already held and no node reports a controller that nobody holds (a view without a
    # controller record used to say node 0, then the real holder a tick later).
    answers = [metadata(node.bootstrap)["ControllerId"] for node in cluster.nodes]
    recorded = cluster_metadata(cluster).controller
    assert recorded is not None and answers == [recorded.id] * len(cluster.nodes)


def test_metadata_shows_all_brokers_replicas_and_isr(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "md", partitions=3, rf=3)
    create_replicated(cluster, "md2", partitions=2, rf=2)
    for node in cluster.nodes:
        md = metadata(node.bootstrap, ["md", "md2"])
        assert sorted((b["NodeId"], f"{b['Host']}:{b['Port']}") for b in md["Brokers"]) == [
            (n.node_id, n.bootstrap) for n in cluster.nodes
        ]
        # Whichever node claimed the controller role first; every node reports the same one.
        assert md["ControllerId"] in [n.node_id for n in cluster.nodes]
        assert md["ControllerId"] == metadata(cluster.nodes[0].bootstrap)["ControllerId"]
        parts = {t["Name"]: t["Partitions"] for t in md["Topics"]}
        # Round-robin: partition p led by node p % 3, followers shifted after it.
        assert [(p["LeaderId"], p["ReplicaNodes"]) for p in parts["md"]] == [
            (0, [0, 1, 2]),
            (1, [1, 2, 0]),
            (2, [2, 0, 1]),
        ]
        assert [sorted(p["IsrNodes"]) for p in parts["md"]] == [[0, 1, 2]] * 3
        assert [p["ReplicaNodes"] for p in parts["md2"]] == [[0, 1], [1, 2]]
    # Only the replicas host a log.
    assert (Path(cluster.data_dir) / "kafka-logs/node-2/md2-1").is_dir()
    assert not (Path(cluster.data_dir) / "kafka-logs/node-2/md2-0").exists()


def test_only_the_leader_serves_clients(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "lead")
    with RawConnection(cluster.nodes[1].bootstrap) as follower:
        produced = follower.call(PRODUCE, 9, produce_body("lead", 0, build_batch(1), acks=1))
        assert (
            produced["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        )
        fetched = follower.call(FETCH, 12, fetch_body("lead", 0, 0))
        assert fetched["Responses"][0]["Partitions"][0]["ErrorCode"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with RawConnection(cluster.nodes[0].bootstrap) as leader:
        produced = leader.call(PRODUCE, 9, produce_body("lead", 0, build_batch(2), acks=1))
        assert produced["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == 0


def test_acks_all_completes_only_after_both_followers_fetched(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "wait")
    leader = cluster.nodes[0]
    with RawConnection(leader.bootstrap) as conn:
        with paused(cluster.nodes[2].pid):
            t0 = time.monotonic()
            conn.send_raw(_produce_request(conn, "wait", count=5))
            # Follower 1 copies the batch; follower 2 is stopped, so the HW stays at 0 and no answer comes.
            wait_for(lambda: leo_on_disk(cluster, 1, "wait") == 5, what="follower 1 caught up")
            assert not readable(conn.sock, 1.0)
            assert high_watermark(leader.bootstrap, "wait") == 0
            assert leo_on_disk(cluster, 2, "wait") == 0
        # Continued well before the 10 s timeout: the request completes late, successfully.
        answer = _partition_answer(conn)
        elapsed = time.monotonic() - t0
    assert (answer["ErrorCode"], answer["BaseOffset"]) == (0, 0)
    assert 1.0 <= elapsed < 10
    assert leo_on_disk(cluster, 2, "wait") == 5
    assert high_watermark(leader.bootstrap, "wait") == 5


def test_follower_paused_longer_than_the_timeout_gives_request_timed_out(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "slow")
    leader = cluster.nodes[0]
    with RawConnection(leader.bootstrap) as conn, paused(cluster.nodes[1].pid):
        t0 = time.monotonic()
        conn.send_raw(_produce_request(conn, "slow", timeout_ms=800))
        answer = _partition_answer(conn)
        elapsed = time.monotonic() - t0
        assert answer["ErrorCode"] == ErrorCode.REQUEST_TIMED_OUT
        assert 0.75 <= elapsed < 5
        assert answer["BaseOffset"] == 0  # appended on the leader all the same (Kafka's semantics)
    # Once the follower runs again it catches up and the high watermark covers the records.
    wait_for(lambda: high_watermark(leader.bootstrap, "slow") == 3, what="HW after resume")


def test_five_thousand_parked_requests_all_complete(cluster: BrokerCluster) -> None:
    create_replicated(cluster, "many")
    leader = cluster.nodes[0]
    conns = [RawConnection(leader.bootstrap, timeout_s=60) for _ in range(5)]
    per_conn = 1000
    try:
        with paused(cluster.nodes[2].pid):
            for conn in conns:
                conn.send_raw(
                    b"".join(
                        _produce_request(conn, "many", count=1, timeout_ms=60000) for _ in range(per_conn)
                    )
                )
            # Every request is appended by the leader and parked (none can complete while a follower sleeps).
            wait_for(
                lambda: leo_on_disk(cluster, 0, "many") == 5 * per_conn, timeout_s=60, what="all appended"
            )
            assert not any(readable(c.sock, 0.2) for c in conns)
            t0 = time.monotonic()
        offsets = []
        for conn in conns:
            answers = [_partition_answer(conn) for _ in range(per_conn)]
            assert all(a["ErrorCode"] == 0 for a in answers)
            bases = [a["BaseOffset"] for a in answers]
            assert bases == sorted(bases)  # answered in request order
            offsets += bases
        elapsed = time.monotonic() - t0
    finally:
        for conn in conns:
            conn.close()
    assert sorted(offsets) == list(range(5 * per_conn))
    assert high_watermark(leader.bootstrap, "many") == 5 * per_conn
    print(f"5000 parked acks=-1 requests completed {elapsed * 1000:.0f} ms after the follower resumed")


def test_confluent_kafka_acks_all_round_trip(cluster: BrokerCluster) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    create_replicated(cluster, "rdk", partitions=3)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "linger.ms": 2,
            "partitioner": "murmur2_random",
        }
    )
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    sent = {p: [f"p{p}-{i}".encode() for i in range(300)] for p in range(3)}
    for p, values in sent.items():
        for value in values:
            producer.produce("rdk", value=value, partition=p, on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    for p in range(3):
        assert high_watermark(cluster.nodes[p].bootstrap, "rdk", p) == 300  # partition p is led by node p
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "pylog-replication", "enable.auto.commit": False}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition("rdk", p, 0) for p in range(3)])
        got: dict[int, list[bytes]] = {p: [] for p in range(3)}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < 900 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    assert got == sent
    for node in (1, 2):  # the followers hold the same records
        assert [leo_on_disk(cluster, node, "rdk", p) for p in range(3)] == [300, 300, 300]


def _replica_records(
    cluster: BrokerCluster, node_id: int, topic: str
) -> list[tuple[int, bytes, bytes]] | None:
    """(offset, key, value) of every data record in a replica's segment files and the active segment's base
    offset appended as a last (-1, ...) row; None while the cleaner swaps files under the reader."""
    from kafka.record.memory_records import MemoryRecords

    directory = Path(cluster.data_dir) / "kafka-logs" / f"node-{node_id}" / f"{topic}-0"
    out: list[tuple[int, bytes, bytes]] = []
    try:
        paths = sorted(directory.glob("*.log"))
        for path in paths:
            records = MemoryRecords(path.read_bytes())
            while records.has_next():
                batch = records.next_batch()
                if batch is None:
                    break
                if not batch.is_control_batch:
                    out.extend((r.offset, r.key, r.value) for r in batch)
    except FileNotFoundError:
        return None
    out.append((-1, b"", int(paths[-1].name.split(".")[0]).to_bytes(8, "big")))
    return out


def test_a_compacted_topic_converges_to_the_same_last_value_per_key_on_every_replica(
    cluster: BrokerCluster,
) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    config = {"cleanup.policy": "compact", "segment.bytes": "4000", "min.cleanable.dirty.ratio": "0.01"}
    create_replicated(cluster, "compacted-rf3", configs=config)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2, "batch.size": 1500}
    )
    model: dict[bytes, bytes] = {}
    errors: list[Any] = []
    for i in range(3000):
        key, value = f"key-{i % 30}".encode(), f"value-{i}".encode() * 3
        model[key] = value
        producer.produce(
            "compacted-rf3",
            key=key,
            value=value,
            partition=0,
            on_delivery=lambda e, m: e and errors.append(e),
        )
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:2]

    def compacted_everywhere() -> bool:
        for node in cluster.nodes:
            rows = _replica_records(cluster, node.node_id, "compacted-rf3")
            if rows is None:
                return False
            active = int.from_bytes(rows[-1][2], "big")
            closed = [k for o, k, _ in rows[:-1] if o < active]
            if len(rows) < 2 or len(closed) != len(set(closed)) or rows[-2][0] != 2999:
                return False
        return True

    wait_for(compacted_everywhere, timeout_s=40, what="every replica cleaned up to its active segment")
    for node in cluster.nodes:
        rows = _replica_records(cluster, node.node_id, "compacted-rf3")
        assert rows is not None
        assert {k: v for _, k, v in rows[:-1]} == model, f"node {node.node_id}"
        assert len(rows) < 3000 // 2, f"node {node.node_id} compacted its own copy"
