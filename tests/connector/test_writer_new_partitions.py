"""After CreatePartitions the pylog writer spreads keys over the new partitions: each write asks the broker for
the topic's partition count (a fresh metadata request per task), so the next write after librdkafka's
AdminClient raised the count hashes every key over all of them, as Kafka's default partitioner does."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from broker_runtime.protocol.murmur2 import partitions_for_keys
from tests.connector.kafka_peer import partition_counts


def _write(spark: Any, bootstrap: str, topic: str, keys: list[str]) -> None:
    df = spark.createDataFrame([(k, f"v-{k}") for k in keys], "key string, value string")
    df.write.format("pylog").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode(
        "append"
    ).save()


def test_writer_uses_partitions_added_by_create_partitions(spark: Any, broker: str) -> None:
    topic = f"grow-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    first = [f"a{i}" for i in range(100)]
    _write(spark, broker, topic, first)
    assert partition_counts(broker, topic, 4) == {0: 100, 1: 0, 2: 0, 3: 0}

    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    second = [f"b{i}" for i in range(200)]
    _write(spark, broker, topic, second)
    expected = Counter(int(p) for p in partitions_for_keys(pa.array([k.encode() for k in second]), 4))
    counts = partition_counts(broker, topic, 4)
    assert counts == {p: expected.get(p, 0) + (100 if p == 0 else 0) for p in range(4)}
    assert all(counts[p] > 0 for p in (1, 2, 3))
