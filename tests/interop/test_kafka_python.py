"""kafka-python as the peer: KafkaProducer (api_version auto-detected from our ApiVersions) and KafkaConsumer with
assign + seek (no group), KafkaAdminClient.create_topics. Also checks the broker version kafka-python infers."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

pytestmark = pytest.mark.timeout(120)


def _roundtrip(bootstrap: str, topic: str, n: int, partitions: int, **producer_conf: Any) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **producer_conf)
    try:
        futures = []
        for i in range(n):
            key = None if i % 5 == 0 else f"k{i % 100}".encode()
            value = None if i % 5 == 2 else f"v{i}".encode() * 3
            futures.append(producer.send(topic, key=key, value=value, headers=[("i", str(i).encode())]))
        producer.flush(60)
        metas = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(10)
    per_partition: dict[int, list[int]] = {}
    for i, meta in enumerate(metas):
        per_partition.setdefault(meta.partition, []).append(i)
        assert meta.offset == len(per_partition[meta.partition]) - 1

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        got: dict[int, list[int]] = {}
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < n and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500, max_records=5000).items():
                for r in records:
                    i = int(dict(r.headers)["i"])
                    assert r.offset == len(got.get(tp.partition, []))
                    assert r.key == (None if i % 5 == 0 else f"k{i % 100}".encode())
                    assert r.value == (None if i % 5 == 2 else f"v{i}".encode() * 3)
                    got.setdefault(tp.partition, []).append(i)
    finally:
        consumer.close()
    assert got == per_partition


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_producer_consumer_roundtrip(bootstrap: str, codec: str | None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(f"kp-{codec}", 2, 1)])
    finally:
        admin.close()
    _roundtrip(bootstrap, f"kp-{codec}", 2000, 2, compression_type=codec, acks="all")


def test_idempotent_producer_and_inferred_version(bootstrap: str) -> None:
    _roundtrip(bootstrap, "kp-idem", 2000, 1, enable_idempotence=True, acks="all")
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        assert consumer.config["api_version"] >= (3, 8)  # from Produce v11 in our ApiVersions
    finally:
        consumer.close()


def test_admin_duplicate_topic(bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic("dupe", 1, 1)])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("dupe", 1, 1)])
    finally:
        admin.close()
