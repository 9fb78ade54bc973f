"""librdkafka (confluent-kafka) as the peer: Producer with every acks/codec/idempotence setting, Consumer with
assign + explicit offsets (no group APIs), AdminClient.create_topics. Messages come back exactly, in order."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_runtime.protocol.batch_header import iter_batch_spans

pytestmark = pytest.mark.timeout(120)

Message = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def _messages(n: int, seed: int = 0) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        key = None if i % 7 == 3 else f"key-{(i * 31 + seed) % 1000}".encode()
        value = None if i % 11 == 5 else f"value-{i}-".encode() * (1 + i % 4)
        headers: list[tuple[str, bytes | None]] = (
            [("i", str(i).encode())] if i % 3 else [("h", None), ("i", str(i).encode())]
        )
        out.append((key, value, headers))
    return out


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(30)


def _produce(bootstrap: str, topic: str, msgs: list[Message], **conf: Any) -> dict[int, list[int]]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5, **conf}
    )
    errors: list[Any] = []
    delivered: dict[int, list[int]] = defaultdict(list)

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered[msg.partition()].append(msg.offset())

    for key, value, headers in msgs:
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return delivered


def _consume(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list[Message]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "pylog-test", "enable.auto.commit": False}
    )
    got: dict[int, list[Message]] = defaultdict(list)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 60
        count = 0
        while count < expected and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                assert msg.offset() == len(got[msg.partition()])  # dense, in order, from 0
                got[msg.partition()].append((msg.key(), msg.value(), list(msg.headers() or [])))
                count += 1
    finally:
        consumer.close()
    assert sum(len(v) for v in got.values()) == expected
    return got


def _check_roundtrip(sent: list[Message], got: dict[int, list[Message]]) -> None:
    # Per partition, the order of the sent messages is kept.
    by_content = [m for p in sorted(got) for m in got[p]]
    assert sorted(map(repr, by_content)) == sorted(map(repr, sent))
    for messages in got.values():
        indexes = [int(dict(h)["i"]) for _, _, h in messages]  # type: ignore[arg-type]
        assert indexes == sorted(indexes)


def _stored_codecs(broker: Any, topic: str, partitions: int) -> set[int]:
    codecs = set()
    for p in range(partitions):
        log = broker.ctx.topics.get_log(topic, p)
        data = log.read(0, 1 << 30, max_offset=log.high_watermark).records
        codecs.update(h.compression for _, h in iter_batch_spans(data))
    return codecs


@pytest.mark.parametrize(
    ("acks", "codec", "idempotent"),
    [
        ("0", "none", False),
        ("1", "gzip", False),
        ("all", "snappy", False),
        ("all", "lz4", True),
        ("1", "zstd", False),
        ("all", "zstd", True),
        ("all", "none", True),
    ],
)
def test_producer_settings_roundtrip(
    broker: Any, bootstrap: str, acks: str, codec: str, idempotent: bool
) -> None:
    topic = f"t-{acks}-{codec}-{int(idempotent)}"
    _create(bootstrap, topic, 3)
    msgs = _messages(3000)
    _produce(
        bootstrap, topic, msgs, acks=acks, **{"compression.codec": codec, "enable.idempotence": idempotent}
    )
    got = _consume(bootstrap, topic, 3, len(msgs))
    _check_roundtrip(msgs, got)
    expected_codec = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    assert _stored_codecs(broker, topic, 3) == {expected_codec}


def test_100k_messages_keys_headers_nulls(bootstrap: str) -> None:
    topic = "big"
    _create(bootstrap, topic, 4)
    msgs = _messages(100_000, seed=7)
    delivered = _produce(
        bootstrap, topic, msgs, acks="all", **{"enable.idempotence": True, "compression.codec": "lz4"}
    )
    for offsets in delivered.values():
        assert sorted(offsets) == list(range(len(offsets)))
    got = _consume(bootstrap, topic, 4, len(msgs))
    _check_roundtrip(msgs, got)
    # murmur2_random puts keyed messages where Java's default partitioner would.
    from broker_runtime.protocol.murmur2 import murmur2

    for partition, messages in got.items():
        for key, _, _ in messages[:200]:
            if key is not None:
                assert (murmur2(key) & 0x7FFFFFFF) % 4 == partition


def test_consumer_seek_and_auto_created_topic(bootstrap: str) -> None:
    msgs = _messages(50)
    _produce(bootstrap, "auto", msgs, acks="1")  # the producer's metadata request creates the topic
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("auto", 0, 40)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
        assert [m.offset() for m in got] == list(range(40, 50))
        lo, hi = consumer.get_watermark_offsets(TopicPartition("auto", 0), timeout=10)
        assert (lo, hi) == (0, 50)
        ts = consumer.offsets_for_times([TopicPartition("auto", 0, 0)], timeout=10)
        assert ts[0].offset == 0
    finally:
        consumer.close()


def test_admin_create_topics_errors(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("dup", 2, 1)])["dup"].result(30)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic("dup", 2, 1)])["dup"].result(30)
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        admin.create_topics([NewTopic("rf", 1, 3)])["rf"].result(30)
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["dup"].partitions) == 2


_CODEC_IDS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def test_topic_compression_type_recompresses_for_an_idempotent_producer(broker: Any, bootstrap: str) -> None:
    """Each topic compression.type other than producer: batches of another codec are stored recompressed,
    with the producer's id, epoch and sequences kept (the idempotent producer sees no sequence error)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = {f"recompress-{target}": target for target in _CODEC_IDS}
    futures = admin.create_topics(
        [
            NewTopic(t, num_partitions=1, replication_factor=1, config={"compression.type": c})
            for t, c in topics.items()
        ]
    )
    for future in futures.values():
        future.result(30)
    msgs = _messages(1500, seed=3)
    for topic, target in topics.items():
        source = "lz4" if target != "lz4" else "gzip"
        _produce(
            bootstrap,
            topic,
            msgs,
            acks="all",
            **{"compression.codec": source, "enable.idempotence": True, "batch.num.messages": 400},
        )
        got = _consume(bootstrap, topic, 1, len(msgs))
        _check_roundtrip(msgs, got)
        assert _stored_codecs(broker, topic, 1) == {_CODEC_IDS[target]}, target
        log = broker.ctx.topics.get_log(topic, 0)
        headers = [
            h for _, h in iter_batch_spans(log.read(0, 1 << 30, max_offset=log.high_watermark).records)
        ]
        assert len(headers) > 1 and all(h.producer_id >= 0 for h in headers)
        sequences = [(h.base_sequence, h.records_count) for h in headers]
        assert all(s + n == nxt for (s, n), (nxt, _) in zip(sequences, sequences[1:], strict=False)), (
            sequences
        )


def test_broker_compression_type_applies_to_topics_without_their_own(tmp_path: Any) -> None:
    from tests.support.brokers import start_broker

    zstd_broker = start_broker(tmp_path, {"compression.type": "zstd"})
    try:
        address = str(zstd_broker.bootstrap)
        _create(address, "broker-zstd", 1)
        msgs = _messages(300)
        _produce(address, "broker-zstd", msgs, **{"compression.codec": "none"})
        _check_roundtrip(msgs, _consume(address, "broker-zstd", 1, len(msgs)))
        assert _stored_codecs(zstd_broker, "broker-zstd", 1) == {4}
    finally:
        zstd_broker.stop()
