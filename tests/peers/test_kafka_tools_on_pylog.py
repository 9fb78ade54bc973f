"""Apache Kafka's Java client and command-line tools against pylog's broker (a child process on loopback).

Each tool runs as its main class with the pinned release's classpath (``tests/support/apache_kafka``); what it
prints is checked against what pylog's broker holds, read back through pylog's own client.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.client import KafkaClient, NewTopic
from broker_runtime.launch import broker_process
from broker_runtime.protocol.compression import CODEC_NAMES
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from broker_runtime.protocol.records import read_batches
from tests.support.apache_kafka import run_tool

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("apache_kafka_tools")]


@pytest.fixture(scope="module")
def pylog_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pylog-for-kafka-tools")


@pytest.fixture(scope="module")
def pylog(pylog_dir: Path) -> Iterator[str]:
    # No 3 s wait for more members before a first consumer group's rebalance (Kafka's default), as on the
    # Apache Kafka fixtures' nodes.
    overrides = {"group.initial.rebalance.delay.ms": "0"}
    with broker_process(pylog_dir, overrides=overrides) as address:
        yield address


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_kafka_topics_creates_and_describes_a_topic(pylog: str) -> None:
    topic = _name("kt")
    created = run_tool(
        "kafka-topics",
        *("--bootstrap-server", pylog, "--create", "--topic", topic, "--partitions", "3"),
        *(
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=3600000",
            "--config",
            "cleanup.policy=compact",
        ),
    )
    assert created.stdout.strip() == f"Created topic {topic}."
    described = run_tool("kafka-topics", "--bootstrap-server", pylog, "--describe", "--topic", topic)
    header, *partitions = [line.strip() for line in described.stdout.strip().splitlines()]
    fields = dict(re.findall(r"(\w+): (\S*)", header))
    assert (fields["Topic"], fields["PartitionCount"], fields["ReplicationFactor"]) == (topic, "3", "1")
    configs = dict(kv.split("=", 1) for kv in fields["Configs"].split(","))
    assert configs["retention.ms"] == "3600000" and configs["cleanup.policy"] == "compact"
    with KafkaClient(pylog) as client:
        meta = client.metadata([topic]).topics[topic]
    expected = [
        {
            "Topic": topic,
            "Partition": str(p),
            "Leader": str(m.leader),
            "Replicas": str(m.leader),
            "Isr": str(m.leader),
        }
        for p, m in sorted(meta.partitions.items())
    ]
    got = [{k: v for k, v in re.findall(r"(\w+): (\S*)", line) if k in expected[0]} for line in partitions]
    assert got == expected


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_java_idempotent_producer_and_console_consumer_group(pylog: str, codec: str) -> None:
    """kafka-console-producer (the Java producer: idempotent, the codec) writes keyed lines; pylog keeps them in
    batches of that codec from one idempotent producer; kafka-console-consumer in a classic group reads them all
    back and commits the group's offsets at the end of every partition."""
    topic, group = _name(f"kp-{codec}"), _name("kg")
    with KafkaClient(pylog) as client:
        client.create_topics([NewTopic(topic, 3, 1)])
    lines = [f"k{i}\tv{i}-" + "x" * (i % 7) for i in range(60)]
    run_tool(
        "kafka-console-producer",
        *("--bootstrap-server", pylog, "--topic", topic, "--compression-codec", codec),
        *("--command-property", "enable.idempotence=true", "--command-property", "acks=all"),
        *("--command-property", "linger.ms=50", "--reader-property", "parse.key=true"),
        input="\n".join(lines) + "\n",
    )
    with KafkaClient(pylog) as client:
        tps = [(topic, p) for p in range(3)]
        ends = {tp: off for tp, (off, _) in client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP)).items()}
        starts = {
            tp: off for tp, (off, _) in client.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP)).items()
        }
        assert sum(ends.values()) == 60 and set(starts.values()) == {0}
        batches = []
        for result in client.fetch(dict.fromkeys(tps, 0)).values():
            batches += list(read_batches(result.records or b"", allow_partial_tail=True))
        producers = client.describe_producers([tp for tp in tps if ends[tp] > 0])
    assert {b.compression for b in batches} == {CODEC_NAMES[codec]}
    assert sum(b.records_count for b in batches) == 60
    # Idempotent: every batch carries one producer id and sequences; DescribeProducers shows it on each partition.
    assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
    assert all(b.base_sequence >= 0 and not b.is_transactional for b in batches)
    assert all([s["ProducerId"] for s in states] == [batches[0].producer_id] for states in producers.values())

    consumed = run_tool(
        "kafka-console-consumer",
        *("--bootstrap-server", pylog, "--topic", topic, "--group", group, "--from-beginning"),
        *("--max-messages", "60", "--timeout-ms", "30000"),
        *("--formatter-property", "print.key=true", "--formatter-property", "print.partition=true"),
        *("--formatter-property", "print.offset=true"),
    )
    rows = [line.split("\t") for line in consumed.stdout.strip().splitlines()]
    assert sorted(f"{key}\t{value}" for _, _, key, value in rows) == sorted(lines)
    by_partition: dict[int, list[int]] = {}
    for partition, offset, _, _ in rows:
        by_partition.setdefault(int(partition.removeprefix("Partition:")), []).append(
            int(offset.removeprefix("Offset:"))
        )
    assert {(topic, p): offsets for p, offsets in by_partition.items()} == {
        tp: list(range(end)) for tp, end in ends.items() if end
    }
    assert "Processed a total of 60 messages" in consumed.stderr
    with KafkaClient(pylog) as client:
        assert client.committed_offsets(group) == {tp: end for tp, end in ends.items() if end}
    # kafka-consumer-groups reads the same commits (OffsetFetch) and ends (ListOffsets) through its admin client.
    described = run_tool("kafka-consumer-groups", "--bootstrap-server", pylog, "--describe", "--group", group)
    header, *table = [line.split() for line in described.stdout.strip().splitlines() if line.strip()]
    assert header[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert sorted((r[0], r[1], int(r[2]), r[3], r[4], r[5]) for r in table) == [
        (group, topic, p, str(end), str(end), "0") if end else (group, topic, p, "-", "0", "-")
        for (_, p), end in sorted(ends.items())
    ]
