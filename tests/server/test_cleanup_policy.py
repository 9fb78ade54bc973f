"""cleanup.policy per topic through the running broker: time and size retention delete the old segments of a
``delete`` topic and leave a ``compact`` topic to the cleaner (Kafka's rule); the cleaner thread compacts a topic
while librdkafka produces to it, and a librdkafka consumer reads the last value of every key across the offset
gaps."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    return {
        "log.retention.check.interval.ms": "50",
        "log.cleaner.backoff.ms": "50",
        "auto.create.topics.enable": "false",
    }


def _produce_old(bootstrap: str, topic: str, count: int, old_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode() * 20, timestamp=old_ms + i)
        producer.poll(0)
    assert producer.flush(30) == 0


def _read_all(
    bootstrap: str, topic: str, expected: int, end: int | None = None
) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, value) from offset 0 until ``expected`` records or, given ``end``, the record before ``end``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    got: list[tuple[int, bytes, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            if end is not None and got and got[-1][0] == end - 1:
                break
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def test_retention_deletes_a_delete_topic_and_keeps_a_compact_topic(broker: Any, bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Distinct keys: the cleaner finds nothing to remove, so every record must survive retention.
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
    assert [offset for offset, _, _ in got] == list(range(300))
    assert [value for _, _, value in got] == [f"v{i}".encode() * 20 for i in range(300)]


def test_the_cleaner_compacts_while_producing_and_a_consumer_reads_the_last_value_per_key(
    broker: Any, bootstrap: str
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", "segment.bytes": "10000", "min.cleanable.dirty.ratio": "0.1"}
    admin.create_topics([NewTopic("compacted", 1, 1, config=config)])["compacted"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "batch.size": 2000})
    errors: list[Any] = []
    model: dict[bytes, bytes | None] = {}
    for i in range(3000):
        key = f"key-{i % 40}".encode()
        value = None if i % 97 == 0 else f"value-{i}".encode() * 3
        model[key] = value
        producer.produce("compacted", key=key, value=value, on_delivery=lambda e, m: e and errors.append(e))
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors, errors[:2]
    log = broker.ctx.topics.get_log("compacted", 0)
    deadline = time.monotonic() + 30
    while log.size_bytes > log.segments[-1].size + 40 * 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.size_bytes <= log.segments[-1].size + 40 * 200, "the cleaner did not compact the topic"
    got = _read_all(bootstrap, "compacted", 3000, end=3000)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)) and offsets[-1] == 2999 and len(offsets) < 1000
    last = {key: value for _, key, value in got}
    assert last == model
    checkpoint = Path(broker.config.log_dirs[0]) / "cleaner-offset-checkpoint"
    assert "compacted 0 " in checkpoint.read_text()


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


def _consume_to_end(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, bytes, bytes | None]]:
    """Every record of partition 0 from offset 0 to the end, read by librdkafka with ``isolation.level``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    got: list[tuple[int, bytes, bytes | None]] = []
    try:
        tp = TopicPartition(topic, 0, 0)
        consumer.assign([tp])
        end = consumer.get_watermark_offsets(tp, timeout=10)[1]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.3):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                got.append((msg.offset(), msg.key(), msg.value()))
            if consumer.position([tp])[0].offset >= end:
                break
    finally:
        consumer.close()
    return got


def test_librdkafka_reads_a_cleaned_transactional_topic_read_committed_and_read_uncommitted(
    broker: Any, bootstrap: str
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", "segment.bytes": "3000", "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([NewTopic("txn-compacted", 1, 1, config=config)])["txn-compacted"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cleaned-txn", "linger.ms": 1})
    producer.init_transactions(30)
    committed: dict[bytes, bytes] = {}
    aborted_values: set[bytes] = set()
    for t in range(12):
        producer.begin_transaction()
        aborting = t % 3 == 1
        # An aborted transaction writes keys of its own: only the abort, not a later value, removes them.
        name = f"aborted-{t}-" if aborting else "key-"
        batch = {f"{name}{(t * 7 + i) % 25}".encode(): f"t{t}-{i}".encode() * 4 for i in range(30)}
        for key, value in batch.items():
            producer.produce("txn-compacted", key=key, value=value)
        assert producer.flush(30) == 0  # written before an abort (an abort purges what is still queued)
        if aborting:
            producer.abort_transaction(30)
            aborted_values.update(batch.values())
        else:
            producer.commit_transaction(30)
            committed.update(batch)
    log = broker.ctx.topics.get_log("txn-compacted", 0)
    checkpoint = Path(broker.config.log_dirs[0]) / "cleaner-offset-checkpoint"

    def cleaned_up_to_the_active_segment() -> bool:
        if not checkpoint.exists():  # the cleaner's first pass has not ended yet
            return False
        line = [w for w in checkpoint.read_text().splitlines() if w.startswith("txn-compacted 0 ")]
        return bool(line) and int(line[0].split()[2]) == log.segments[-1].base_offset

    deadline = time.monotonic() + 30
    while not cleaned_up_to_the_active_segment() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cleaned_up_to_the_active_segment(), "the cleaner did not reach the active segment"
    active = log.segments[-1].base_offset

    read_committed = _consume_to_end(bootstrap, "txn-compacted", "read_committed")
    assert not {v for _, _, v in read_committed} & aborted_values
    assert {k: v for _, k, v in read_committed} == committed
    keys_below = [k for o, k, _ in read_committed if o < active]
    assert len(keys_below) == len(set(keys_below)), "one record per key below the active segment"

    read_uncommitted = _consume_to_end(bootstrap, "txn-compacted", "read_uncommitted")
    assert not [v for o, _, v in read_uncommitted if o < active and v in aborted_values], (
        "aborted data is gone"
    )
    assert [r for r in read_uncommitted if r[2] not in aborted_values] == read_committed
