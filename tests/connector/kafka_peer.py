"""Real third-party Kafka clients (confluent-kafka / librdkafka) used as peers by the connector tests."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

__all__ = ["Message", "consume_all", "consume_to_end", "partition_counts", "produce_keys"]


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_type: int
    timestamp: int


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pylog-test-peer",
            "enable.auto.commit": False,
            "log_level": 0,
            "api.version.request": True,
        }
    )


def consume_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30) -> list[Message]:
    """Every message of ``topic`` (partitions 0..n-1, up to the high watermarks), in partition/offset order."""
    consumer = _consumer(bootstrap)
    try:
        ends = {}
        for p in range(partitions):
            _, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            ends[p] = hi
        wanted = {p for p, hi in ends.items() if hi > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(wanted)])
        out: list[Message] = []
        position = dict.fromkeys(wanted, 0)
        deadline = time.monotonic() + timeout_s
        while any(position[p] < ends[p] for p in wanted):
            if time.monotonic() > deadline:
                raise AssertionError(f"consumed only {position} of {ends} from {topic}")
            polled: list[Any] = consumer.consume(1000, timeout=1.0)
            for m in polled:
                if m.error():
                    raise AssertionError(f"consumer error: {m.error()}")
                p = m.partition()
                if m.offset() >= ends[p]:
                    continue
                ts_type, ts = m.timestamp()
                headers = tuple((k, v) for k, v in (m.headers() or []))
                out.append(Message(p, m.offset(), m.key(), m.value(), headers, ts_type, ts))
                position[p] = m.offset() + 1
        return sorted(out, key=lambda m: (m.partition, m.offset))
    finally:
        consumer.close()


def consume_to_end(
    bootstrap: str, topic: str, partitions: int, isolation: str, timeout_s: float = 30
) -> list[Message]:
    """Every message of ``topic`` a consumer with ``isolation.level=isolation`` returns from offset 0 until it
    reports the end of every partition (librdkafka's partition EOF: the high watermark, or in read_committed the
    last stable offset), in partition/offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pylog-test-peer",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Message] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{isolation} consumer reached the end of only {sorted(at_end)} of {topic}"
                )
            polled: list[Any] = consumer.consume(1000, timeout=0.5)
            for m in polled:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise AssertionError(f"consumer error: {err}")
                at_end.discard(m.partition())
                ts_type, ts = m.timestamp()
                headers = tuple((k, v) for k, v in (m.headers() or []))
                out.append(Message(m.partition(), m.offset(), m.key(), m.value(), headers, ts_type, ts))
        return sorted(out, key=lambda m: (m.partition, m.offset))
    finally:
        consumer.close()


def partition_counts(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Records per partition (high watermark - low watermark)."""
    consumer = _consumer(bootstrap)
    try:
        out = {}
        for p in range(partitions):
            try:
                lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                    raise
                lo = hi = 0  # the topic does not exist (nothing was written)
            out[p] = hi - lo
        return out
    finally:
        consumer.close()


def produce_keys(bootstrap: str, topic: str, keys: list[bytes]) -> dict[bytes, int]:
    """Produce one record per key with librdkafka's Java-compatible partitioner; key -> partition."""
    placed: dict[bytes, int] = {}

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        placed[msg.key()] = msg.partition()  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "log_level": 0})
    for k in keys:
        producer.produce(topic, value=b"v", key=k, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    return placed
