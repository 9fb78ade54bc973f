"""Clients riding through a leader failover, with real broker processes: confluent-kafka's idempotent producer
and pylog's own produce path (the connector's TaskProducer, without Spark) keep writing while the leader is
SIGKILLed; pylog's KafkaClient then reads everything back from the new leaders through a cache that still
names the dead one. Every acknowledged record is there exactly once, in order per partition.

The tests share one 3-node cluster (started once per module, made whole again by
:func:`~tests.support.cluster.heal` before each test), each on a topic of its own."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.protocol.messages import LATEST_TIMESTAMP
from broker_runtime.protocol.record_codec.decode import decode_batches
from tests.support.cluster import FAST, create_replicated, heal, partition_state, paused, wait_for

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 3


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with cluster_process(tmp_path_factory.mktemp("client-failover"), nodes=3, overrides=FAST) as running:
        yield running


@pytest.fixture
def cluster(shared_cluster: BrokerCluster) -> BrokerCluster:
    """The module's cluster, made whole for the test (every node running, unfenced, every partition with its
    full ISR): what the previous test killed or stopped is restored."""
    heal(shared_cluster)
    return shared_cluster


def _kill(cluster: BrokerCluster, node_id: int) -> None:
    proc = cluster.nodes[node_id].proc
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def _hang_then_kill(cluster: BrokerCluster, node_id: int) -> None:
    """SIGKILL a leader that hung first: batches it appended and its followers fetched in the last moments
    were never acknowledged, so the producer must resend them and the new leader recognise them."""
    proc = cluster.nodes[node_id].proc
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(0.3)
    _kill(cluster, node_id)


def _leader(cluster: BrokerCluster, topic: str, partition: int) -> int:
    leader: int = partition_state(cluster.nodes[0].bootstrap, topic, partition)["LeaderId"]
    return leader


def _read_all(client: KafkaClient, topic: str, partitions: int) -> dict[int, list[tuple[bytes, int]]]:
    """Every record (value, offset) of each partition up to its high watermark, read with pylog's client."""
    out: dict[int, list[tuple[bytes, int]]] = {}
    ends = client.list_offsets({(topic, p): LATEST_TIMESTAMP for p in range(partitions)})
    for p in range(partitions):
        end = ends[(topic, p)][0]
        got: list[tuple[bytes, int]] = []
        offset = 0
        deadline = time.monotonic() + 30
        while offset < end:
            assert time.monotonic() < deadline, f"partition {p}: read {offset} of {end}"
            result = client.fetch({(topic, p): offset})[(topic, p)]
            assert result.error == 0, result
            decoded = decode_batches(result.records or b"", start_offset=offset, end_offset=end)
            values = decoded.column("value").to_pylist()
            offsets = decoded.column("offset").to_pylist()
            got += list(zip(values, offsets, strict=True))
            if offsets:
                offset = offsets[-1] + 1
        out[p] = got
    return out


def _check_exactly_once(read: dict[int, list[tuple[bytes, int]]], acked: set[int]) -> None:
    counts = Counter(int(v) for part in read.values() for v, _ in part)
    duplicates = [v for v, c in counts.items() if c > 1]
    assert duplicates == [], f"{len(duplicates)} record(s) twice, e.g. {duplicates[:5]}"
    missing = acked - set(counts)
    assert not missing, f"{len(missing)} acknowledged record(s) lost, e.g. {sorted(missing)[:5]}"
    for p, part in read.items():  # the stream was produced in order: each partition holds increasing numbers
        numbers = [int(v) for v, _ in part]
        assert numbers == sorted(numbers), f"partition {p} out of order"


def _cached_client(cluster: BrokerCluster, topic: str) -> KafkaClient:
    """A pylog client whose metadata cache is filled now (so it still names the leader about to die)."""
    client = KafkaClient(cluster.bootstrap, request_timeout_ms=5000, retry_timeout_ms=20000)
    client.metadata([topic])
    return client


def test_confluent_kafka_idempotent_producer_rides_through_a_leader_sigkill(cluster: BrokerCluster) -> None:
    from confluent_kafka import Producer

    topic = "confluent-idempotent"
    create_replicated(cluster, topic, PARTITIONS, rf=3, configs={"min.insync.replicas": "2"})
    victim = _leader(cluster, topic, 0)
    reader = _cached_client(cluster, topic)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 200,
            "message.timeout.ms": 60000,
        }
    )
    acked: set[int] = set()
    failed: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(err)
        else:
            acked.add(int(msg.value()))

    total = 20_000
    for n in range(total):
        while True:
            try:
                producer.produce(topic, str(n).encode(), key=str(n % 101).encode(), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if n % 500 == 0:
            producer.poll(0)
        if n == total // 3:
            # A third of the stream is produced: once the leader acknowledged some of it (the kill must
            # not come before the first acknowledgement), it dies with batches of every partition in flight.
            deadline = time.monotonic() + 60
            while len(acked) <= 1000:
                assert time.monotonic() < deadline, f"only {len(acked)} acknowledged in 60 s"
                producer.poll(0.01)
            _hang_then_kill(cluster, victim)
    assert producer.flush(60) == 0
    assert failed == [], failed[:3]
    assert len(acked) == total
    new_leader = _leader_from_survivors(cluster, topic, victim, 0)
    assert new_leader != victim
    with reader:
        _check_exactly_once(_read_all(reader, topic, PARTITIONS), acked)


def _leader_from_survivors(cluster: BrokerCluster, topic: str, dead: int, partition: int) -> int:
    survivor = next(n.bootstrap for n in cluster.nodes if n.node_id != dead)
    state = wait_for(
        lambda: (s := partition_state(survivor, topic, partition))["LeaderId"] not in (dead, -1) and s,
        what="a new leader",
    )
    leader: int = state["LeaderId"]
    return leader


def test_pylog_task_producer_rides_through_a_leader_sigkill(cluster: BrokerCluster) -> None:
    """The connector's producer (accumulator + sender) without Spark: the leader of partition 0 dies while
    requests are in flight; the sender resends to the new leader, which recognises what was replicated."""
    from spark_kafka_log.common.schema import InputLayout
    from spark_kafka_log.common.writer_options import parse_writer_options
    from spark_kafka_log.write.producer import TaskProducer

    topic = "task-producer"
    create_replicated(cluster, topic, PARTITIONS, rf=3, configs={"min.insync.replicas": "2"})
    victim = _leader(cluster, topic, 0)
    reader = _cached_client(cluster, topic)
    options = parse_writer_options(
        {
            "kafka.bootstrap.servers": cluster.bootstrap,
            "topic": topic,
            "kafka.batch.size": "4096",
            "kafka.linger.ms": "0",
            "kafka.request.timeout.ms": "5000",
            "kafka.delivery.timeout.ms": "30000",
        }
    )
    producer = TaskProducer(options, cluster.bootstrap, InputLayout(value="value", key="key"))
    rows, per_batch = 20_000, 500
    try:
        for start in range(0, rows, per_batch):
            numbers = range(start, start + per_batch)
            producer.write(
                pa.record_batch(
                    {
                        "key": pa.array([str(n % 101).encode() for n in numbers], pa.binary()),
                        "value": pa.array([str(n).encode() for n in numbers], pa.binary()),
                    }
                )
            )
            if start == (rows // 3) // per_batch * per_batch:
                _hang_then_kill(cluster, victim)  # requests of this task are in flight to it now
        producer.flush()
    finally:
        producer.close()
    assert sum(s.records for s in producer.stats.values()) == rows
    with reader:
        _check_exactly_once(_read_all(reader, topic, PARTITIONS), set(range(rows)))


def test_a_dead_bootstrap_server_is_skipped_and_a_stopped_one_times_out_to_the_next(
    cluster: BrokerCluster,
) -> None:
    topic = "bootstrap-list"
    create_replicated(cluster, topic, 1, rf=3)
    every_node = ",".join(
        n.bootstrap for n in cluster.nodes
    )  # cluster.bootstrap would leave out the dead one
    _kill(cluster, 0)
    with KafkaClient(every_node, request_timeout_ms=1000) as client:  # node 0 first in the list
        assert topic in client.metadata([topic]).topics
    with paused(cluster.nodes[1].pid):
        started = time.monotonic()
        with KafkaClient(every_node, request_timeout_ms=1000) as client:
            md = client.metadata([topic])
        assert topic in md.topics
        assert time.monotonic() - started < 5


def test_a_partition_that_stays_leaderless_fails_naming_the_partition_and_the_error(
    cluster: BrokerCluster,
) -> None:
    topic = "leaderless"
    create_replicated(cluster, topic, 1, rf=2)
    state = partition_state(cluster.nodes[0].bootstrap, topic)
    leader = state["LeaderId"]
    (follower,) = (r for r in state["ReplicaNodes"] if r != leader)
    with paused(cluster.nodes[follower].pid):
        wait_for(
            lambda: partition_state(cluster.nodes[leader].bootstrap, topic)["IsrNodes"] == [leader],
            timeout_s=10,
            what="ISR shrink to the leader",
        )
        _kill(cluster, leader)
    survivor = cluster.nodes[follower].bootstrap
    wait_for(lambda: partition_state(survivor, topic)["LeaderId"] == -1, what="the partition offline")
    with KafkaClient(cluster.bootstrap, retry_timeout_ms=1500, retry_backoff_ms=100) as client:
        started = time.monotonic()
        with pytest.raises(KafkaError) as info:
            client.list_offsets({(topic, 0): LATEST_TIMESTAMP})
        assert info.value.code == ErrorCode.LEADER_NOT_AVAILABLE
        assert f"{topic}-0" in str(info.value) and "retry budget 1500 ms" in str(info.value)
        assert 1.0 < time.monotonic() - started < 10
        result = client.fetch({(topic, 0): 0})[(topic, 0)]
        assert result.error == ErrorCode.LEADER_NOT_AVAILABLE


def test_fetch_and_list_offsets_carry_the_leader_epoch_of_the_metadata(cluster: BrokerCluster) -> None:
    """CurrentLeaderEpoch as librdkafka sends it: a failover bumps the epoch, the client follows it."""
    topic = "leader-epochs"
    create_replicated(cluster, topic, 1, rf=3)
    with KafkaClient(cluster.bootstrap, retry_timeout_ms=20000) as client:
        client.metadata([topic])
        before = client.leader_epoch_for(topic, 0)
        assert before >= 0
        assert client.fetch({(topic, 0): 0})[(topic, 0)].error == 0
        victim = client.leader_for(topic, 0)
        _kill(cluster, victim)
        assert client.list_offsets({(topic, 0): LATEST_TIMESTAMP})[(topic, 0)][0] == 0
        assert client.leader_for(topic, 0) != victim
        assert client.leader_epoch_for(topic, 0) > before
        assert client.fetch({(topic, 0): 0})[(topic, 0)].error == 0
