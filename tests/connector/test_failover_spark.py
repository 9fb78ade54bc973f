"""The Spark connector across a leader failover, against a 3-node cluster of real broker processes (RF=3,
min.insync.replicas=2): the writer rides through a leader SIGKILL with every row exactly once, fails naming
NOT_ENOUGH_REPLICAS when the ISR stays too small, and the reader follows the new leaders (never reading a
replica's local files, which may hold records that were never committed)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.launch import BrokerCluster, cluster_process
from tests.server.rawclient import produce_body, request
from tests.support.cluster import FAST, create_replicated, high_watermark, partition_state, paused, wait_for

pytestmark = [pytest.mark.timeout(240)]

PRODUCE = 0


def _batch(values: list[bytes]) -> bytearray:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 24)
    for i, value in enumerate(values):
        builder.append(i, int(time.time() * 1000), None, value, [])
    return bytearray(builder.build())


def _kill(cluster: BrokerCluster, node_id: int) -> None:
    proc = cluster.nodes[node_id].proc
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def _node_dirs(cluster: BrokerCluster, first: int) -> str:
    """Every node's log dir, node ``first`` first (the direct scan would take the first copy it finds)."""
    order = [first] + [n.node_id for n in cluster.nodes if n.node_id != first]
    return ",".join(str(Path(cluster.data_dir) / "kafka-logs" / f"node-{i}") for i in order)


#: Every task of the writer in the failover test stops before its batch number GATE_AFTER (of 30, 500 rows each)
#: until the test killed the leader: the kill lands inside the write by construction, whatever the speed, and
#: a third of the rows is written after it. Not earlier: the batches before the gate must fill the 64 KiB
#: buffers between the Python workers and the JVM to reach the producer at all.
GATE_AFTER = 20


def _rows(spark: Any, n: int, gate: Path) -> Any:
    """``n`` numbered rows in 2 partitions, in batches of 500; each task waits before its batch
    :data:`GATE_AFTER` until the file ``gate`` exists (and fails after 120 s without it)."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    df = spark.range(0, n, 1, 2).selectExpr(
        "cast(cast(id % 97 as string) as binary) as key", "cast(cast(id as string) as binary) as value"
    )

    def gated(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for i, batch in enumerate(batches):
            if i == GATE_AFTER:
                deadline = time.monotonic() + 120
                while not gate.exists():
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"the test did not open {gate} in 120 s (the leader was never killed)"
                        )
                    time.sleep(0.02)
            yield batch

    return df.mapInArrow(gated, df.schema)


def write_through_a_leader_kill(
    spark: Any, bootstrap: str, leader: str, topic: str, n: int, kill: Callable[[], None], gate: Path
) -> None:
    """Write ``n`` rows (:func:`_rows`) to ``topic`` with the connector's defaults (idempotent, acks=all), and
    call ``kill`` (which crashes the broker ``leader``, partition 0's leader) inside the write: once both tasks
    wrote to partition 0 (two producers there, 500+ rows) while they wait at the gate with a third of their rows
    still to write. Fails unless ``kill`` ran."""
    killed = threading.Event()

    def kill_once_rows_landed() -> None:
        deadline = time.monotonic() + 60
        with KafkaClient(leader) as client:
            while time.monotonic() < deadline:
                writers = len(client.admin.describe_producers([(topic, 0)])[(topic, 0)])
                if writers == 2 and high_watermark(leader, topic, 0) > 500:
                    kill()
                    killed.set()
                    gate.touch()
                    return
                time.sleep(0.02)

    killer = threading.Thread(target=kill_once_rows_landed, daemon=True)
    killer.start()
    (
        _rows(spark, n, gate)
        .write.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.request.timeout.ms", "5000")
        .option("kafka.delivery.timeout.ms", "60000")
        .mode("append")
        .save()
    )
    killer.join(60)
    assert killed.is_set(), "the leader was never killed"


def _read(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = (
        spark.read.format("pylog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _assert_exactly_once(df: Any, n: int) -> None:
    values = [int(r.value) for r in df.select("value").collect()]
    counts = Counter(values)
    assert [v for v, c in counts.items() if c > 1] == [], "duplicates"
    assert set(counts) == set(range(n)), f"{n - len(set(counts) & set(range(n)))} row(s) missing"


@pytest.mark.slow
def test_writer_rides_through_a_leader_sigkill_and_the_reader_follows_the_new_leaders(
    spark: Any, tmp_path: Path
) -> None:
    n, topic = 30_000, "spark-failover"
    with cluster_process(tmp_path / "cluster", nodes=3, overrides=FAST) as cluster:
        create_replicated(cluster, topic, 3, rf=3, configs={"min.insync.replicas": "2"})
        victim = partition_state(cluster.nodes[0].bootstrap, topic, 0)["LeaderId"]
        watcher = next(n.bootstrap for n in cluster.nodes if n.node_id != victim)
        write_through_a_leader_kill(
            spark,
            cluster.bootstrap,
            cluster.nodes[victim].bootstrap,
            topic,
            n,
            lambda: _kill(cluster, victim),
            tmp_path / "leader-killed",
        )
        new = partition_state(watcher, topic, 0)
        assert new["LeaderId"] not in (victim, -1)
        assert high_watermark(cluster.nodes[new["LeaderId"]].bootstrap, topic, 0) > 500

        # Fetch from the new leaders; the dead node is first in the bootstrap list.
        _assert_exactly_once(_read(spark, cluster.bootstrap, topic, **{"pylog.transport": "fetch"}), n)

        # auto with the log dirs of every node, the dead leader's first: replicated partitions are fetched.
        metrics = tmp_path / "metrics"
        df = _read(
            spark,
            cluster.bootstrap,
            topic,
            **{"pylog.logDirs": _node_dirs(cluster, victim), "pylog.metricsDir": str(metrics)},
        )
        _assert_exactly_once(df, n)
        transports = {json.loads(f.read_text())["transport"] for f in metrics.glob("read-*.json")}
        assert transports == {"fetch"}, transports

        with pytest.raises(Exception, match="pylog.transport' is 'local' but .*replicated"):
            _read(
                spark,
                cluster.bootstrap,
                topic,
                **{"pylog.logDirs": _node_dirs(cluster, victim), "pylog.transport": "local"},
            ).count()


@pytest.mark.slow
def test_writer_fails_naming_not_enough_replicas_while_two_of_three_nodes_are_stopped(
    spark: Any, tmp_path: Path
) -> None:
    topic = "spark-isr"
    with cluster_process(tmp_path / "cluster", nodes=3, overrides=FAST) as cluster:
        create_replicated(cluster, topic, 1, rf=3, configs={"min.insync.replicas": "2"})
        survivor = cluster.nodes[2]
        with paused(cluster.nodes[0].pid), paused(cluster.nodes[1].pid):
            wait_for(
                lambda: (
                    (s := partition_state(survivor.bootstrap, topic))["LeaderId"] == 2
                    and s["IsrNodes"] == [2]
                ),
                timeout_s=15,
                what="the survivor leading alone",
            )
            started = time.monotonic()
            with pytest.raises(Exception) as info:
                (
                    spark.range(0, 100, 1, 1)
                    .selectExpr("cast(id as string) as value")
                    .write.format("pylog")
                    .option("kafka.bootstrap.servers", cluster.bootstrap)  # two stopped nodes listed first
                    .option("topic", topic)
                    .option("kafka.request.timeout.ms", "1000")
                    .option("kafka.delivery.timeout.ms", "3000")
                    .mode("append")
                    .save()
                )
            elapsed = time.monotonic() - started
        message = str(info.value)
        assert "NOT_ENOUGH_REPLICAS" in message, message[-2000:]
        assert f"writing to topic '{topic}' partition 0 failed" in message
        assert elapsed < 60


def test_the_reader_never_reads_a_dead_leaders_uncommitted_tail_from_its_files(
    spark: Any, tmp_path: Path
) -> None:
    """The old leader's files hold records no follower copied; after the failover the new leader wrote other
    records at those offsets. Scanning the old leader's directory would return the phantom records."""
    topic = "spark-diverge"
    with cluster_process(tmp_path / "cluster", nodes=3, overrides=FAST) as cluster:
        create_replicated(cluster, topic, 1, rf=3)
        old = partition_state(cluster.nodes[0].bootstrap, topic)["LeaderId"]
        followers = [node for node in cluster.nodes if node.node_id != old]

        def produce(bootstrap: str, values: list[bytes], acks: int) -> int:
            body = produce_body(topic, 0, _batch(values), acks=acks)
            answer = request(bootstrap, PRODUCE, 9, body)["Responses"][0]["PartitionResponses"][0]
            assert answer["ErrorCode"] == 0, answer
            return int(answer["BaseOffset"])

        produce(cluster.nodes[old].bootstrap, [b"committed-%d" % i for i in range(5)], acks=-1)
        with paused(followers[0].pid), paused(followers[1].pid):
            # Fetches the followers sent before they stopped wait up to replica.fetch.wait.max.ms (100 ms)
            # at the leader: let them be answered (empty) first, or the phantom records would reach a
            # follower's socket buffer and be appended when it runs again.
            time.sleep(0.5)
            produce(cluster.nodes[old].bootstrap, [b"phantom-%d" % i for i in range(3)], acks=1)
            _kill(cluster, old)
        survivor = followers[0].bootstrap
        state = wait_for(
            lambda: (s := partition_state(survivor, topic))["LeaderId"] not in (old, -1) and s,
            what="a new leader",
        )
        leader = cluster.nodes[state["LeaderId"]].bootstrap
        assert produce(leader, [b"new-%d" % i for i in range(3)], acks=-1) == 5
        df = _read(
            spark,
            ",".join(n.bootstrap for n in followers),
            topic,
            **{"pylog.logDirs": _node_dirs(cluster, old)},
        )
        values = sorted(bytes(r.value) for r in df.collect())
        assert values == sorted([b"committed-%d" % i for i in range(5)] + [b"new-%d" % i for i in range(3)])
