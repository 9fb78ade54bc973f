"""cleanup.policy per topic through the running broker: time and size retention delete the old segments of a
``delete`` topic and leave a ``compact`` topic whole (Kafka's rule); a librdkafka consumer reads every record
of the compact topic back after several retention passes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    return {"log.retention.check.interval.ms": "50", "auto.create.topics.enable": "false"}


def _produce_old(bootstrap: str, topic: str, count: int, old_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i in range(count):
        producer.produce(topic, key=f"k{i % 10}".encode(), value=f"v{i}".encode() * 20, timestamp=old_ms + i)
        producer.poll(0)
    assert producer.flush(30) == 0


def _read_all(bootstrap: str, topic: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def test_retention_deletes_a_delete_topic_and_keeps_a_compact_topic(broker: Any, bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    small = {"segment.bytes": "2000", "retention.ms": "1000", "retention.bytes": "100"}
    topics = {
        "kept-compact": NewTopic("kept-compact", 1, 1, config={**small, "cleanup.policy": "compact"}),
        "gone-delete": NewTopic("gone-delete", 1, 1, config={**small, "cleanup.policy": "delete"}),
    }
    for future in admin.create_topics(list(topics.values())).values():
        future.result(30)
    old = int(time.time() * 1000) - 3_600_000
    for topic in topics:
        _produce_old(bootstrap, topic, 300, old)
    deleting = broker.ctx.topics.get_log("gone-delete", 0)
    deadline = time.monotonic() + 30
    while deleting.log_start_offset < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert deleting.log_start_offset == 300, "retention never ran on the delete topic"
    time.sleep(0.2)  # a few more passes over both topics
    compact = broker.ctx.topics.get_log("kept-compact", 0)
    assert compact.log_start_offset == 0 and len(compact.segments) > 3
    got = _read_all(bootstrap, "kept-compact", 300)
    assert [offset for offset, _ in got] == list(range(300))
    assert [value for _, value in got] == [f"v{i}".encode() * 20 for i in range(300)]


def test_create_topics_refuses_bad_compaction_settings_naming_them(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    bad = {
        "bad-ratio": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.5"},
        "bad-lags": {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
        "bad-policy": {"cleanup.policy": "compact,shrink"},
    }
    futures = admin.create_topics([NewTopic(name, 1, 1, config=config) for name, config in bad.items()])
    for name, future in futures.items():
        with pytest.raises(KafkaException) as info:
            future.result(30)
        error = info.value.args[0]
        assert error.code() == KafkaError.INVALID_CONFIG, (name, error)
        assert list(bad[name])[0 if name == "bad-lags" else -1] in error.str(), error.str()
