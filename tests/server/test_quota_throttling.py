"""Client quotas, the enforcement, judged by a real librdkafka producer and consumer and raw connections: a
producer_byte_rate holds a greedy producer near its quota (measured on the broker, from the partition's size on
disk) and the producer sees the throttle in its statistics; removing the quota lets it go fast again; a
consumer_byte_rate holds a consumer likewise; request_percentage answers ThrottleTimeMs and mutes the connection
for that long; connection_creation_rate holds back new connections from one address.

One broker with short quota windows (2 samples of 1 s: a rate is measured over at least 1 s, a throttle lasts at
most 2 s), so each check takes a few seconds. Rates are asserted with generous margins (the machine is shared):
the point is "held near the quota" versus "tens of MB/s" unthrottled."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from broker_runtime.client import KafkaClient
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, fetch_body
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(90)

QUOTA = 200_000  # bytes/s
VALUE = b"v" * 1000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    started = start_broker(
        tmp_path_factory.mktemp("quota-throttle"),
        {
            "quota.window.num": "2",
            "quota.window.size.seconds": "1",
            "num.partitions": "1",
            "pylog.metrics.listener": "127.0.0.1:0",
        },
    )
    yield started
    started.stop()


@pytest.fixture(scope="module")
def admin(broker: Any) -> Iterator[KafkaClient]:
    with KafkaClient(broker.bootstrap) as client:
        yield client


def _set(admin: KafkaClient, entity: dict[str, str | None], **quotas: float | None) -> None:
    assert admin.admin.alter_client_quotas([(entity, quotas)]) == [None]


def _log_bytes(admin: KafkaClient, topic: str) -> int:
    dirs = admin.admin.describe_log_dirs(0)
    return sum(
        p["PartitionSize"] for d in dirs for t in d["Topics"] if t["Name"] == topic for p in t["Partitions"]
    )


def _produce_for(producer: Producer, topic: str, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            producer.produce(topic, VALUE)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)


def test_producer_byte_rate_holds_a_greedy_producer_then_lets_go(broker: Any, admin: KafkaClient) -> None:
    topic = "quota-produce"
    _set(admin, {"client-id": "greedy"}, producer_byte_rate=QUOTA)
    stats: list[dict[str, Any]] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "greedy",
            "linger.ms": 5,
            "batch.size": 16384,
            "acks": 1,
            "queue.buffering.max.kbytes": 2048,
            "statistics.interval.ms": 500,
            "stats_cb": lambda text: stats.append(json.loads(text)),
        }
    )
    try:
        _produce_for(producer, topic, 1.5)  # the first window's burst, then throttled
        before, t0 = _log_bytes(admin, topic), time.monotonic()
        _produce_for(producer, topic, 2.5)
        held = (_log_bytes(admin, topic) - before) / (time.monotonic() - t0)
        assert 0.3 * QUOTA < held < 1.8 * QUOTA, f"{held:.0f} B/s with a quota of {QUOTA} B/s"
        throttles = [b["throttle"]["max"] for s in stats for b in s["brokers"].values() if "throttle" in b]
        assert max(throttles, default=0) > 0, "librdkafka saw no throttle time"
        scraped = urllib.request.urlopen(f"http://{broker.metrics_address}/metrics").read().decode()
        samples = dict(line.rsplit(" ", 1) for line in scraped.splitlines() if not line.startswith("#"))
        assert float(samples['kafka_server_produce_throttle_time{client_id="greedy",user=""}']) > 0
        assert float(samples['kafka_server_produce_byte_rate{client_id="greedy",user=""}']) > 0
        _set(admin, {"client-id": "greedy"}, producer_byte_rate=None)
        _produce_for(producer, topic, 2.2)  # the last mute (at most 2 s) ends
        before, t0 = _log_bytes(admin, topic), time.monotonic()
        _produce_for(producer, topic, 1.5)
        free = (_log_bytes(admin, topic) - before) / (time.monotonic() - t0)
        assert free > 3 * QUOTA, f"{free:.0f} B/s after the quota was removed"
    finally:
        producer.flush(10)


def _fill(broker: Any, topic: str, records: int) -> None:
    # batches well below what one fetch may take under the quota (a larger first batch is always sent whole)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 16384})
    for _ in range(records):
        producer.produce(topic, VALUE)
        producer.poll(0)
    assert producer.flush(30) == 0


def test_consumer_byte_rate_holds_a_consumer(broker: Any, admin: KafkaClient) -> None:
    topic = "quota-fetch"
    _fill(broker, topic, 3000)  # 3 MB
    _set(admin, {"client-id": "reader"}, consumer_byte_rate=QUOTA)
    stats: list[dict[str, Any]] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "reader",
            "group.id": "quota-readers",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "statistics.interval.ms": 500,
            "stats_cb": lambda text: stats.append(json.loads(text)),
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join to wait for
        got = 0
        end = time.monotonic() + 1.5
        while time.monotonic() < end or (not got and time.monotonic() < end + 10):
            got += sum(len(m.value() or b"") for m in consumer.consume(100, 0.1) if m.error() is None)
        start, t0 = got, time.monotonic()
        while time.monotonic() - t0 < 2.5:
            got += sum(len(m.value() or b"") for m in consumer.consume(100, 0.1) if m.error() is None)
        held = (got - start) / (time.monotonic() - t0)
        assert held < 2.0 * QUOTA, f"{held:.0f} B/s consumed with a quota of {QUOTA} B/s"
        assert got < 3_000_000, "the whole topic was read: the quota held nothing back"
        throttles = [b["throttle"]["max"] for s in stats for b in s["brokers"].values() if "throttle" in b]
        assert max(throttles, default=0) > 0, "librdkafka saw no throttle time"
    finally:
        consumer.close()
        _set(admin, {"client-id": "reader"}, consumer_byte_rate=None)


def test_a_fetch_takes_one_window_of_quota_and_a_throttled_fetch_is_empty(
    broker: Any, admin: KafkaClient
) -> None:
    """Kafka's fetch under a consumer_byte_rate: at most quota x (quota.window.num - 1) x window bytes per fetch;
    the fetch that takes the rate over is answered with no partitions, ThrottleTimeMs set."""
    _fill(broker, "quota-window", 600)
    _set(admin, {"client-id": "raw-test"}, consumer_byte_rate=QUOTA)
    try:
        with RawConnection(broker.bootstrap) as conn:
            first = conn.call(ApiKey.FETCH, 11, fetch_body("quota-window", 0, 0, max_bytes=10 << 20))
            records = first["Responses"][0]["Partitions"][0]["Records"]
            assert 0 < len(records) <= QUOTA + 16384 + 1024, len(records)
            second = conn.call(ApiKey.FETCH, 11, fetch_body("quota-window", 0, 0, max_bytes=10 << 20))
            assert second["Responses"] == [] and second["ThrottleTimeMs"] > 0, second
    finally:
        _set(admin, {"client-id": "raw-test"}, consumer_byte_rate=None)


def test_request_percentage_answers_throttle_time_and_mutes_the_connection(
    broker: Any, admin: KafkaClient
) -> None:
    _set(admin, {"client-id": "raw-test"}, request_percentage=0.0001)
    try:
        with RawConnection(broker.bootstrap) as conn:
            answer = conn.call(ApiKey.METADATA, 9, {"Topics": [], "AllowAutoTopicCreation": False})
            throttle = answer["ThrottleTimeMs"]
            assert throttle > 500, answer
            sent = time.monotonic()
            conn.call(ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
            waited = time.monotonic() - sent
            assert waited > 0.8 * throttle / 1000, f"answered after {waited:.3f} s, throttled {throttle} ms"
    finally:
        _set(admin, {"client-id": "raw-test"}, request_percentage=None)


def test_connection_creation_rate_holds_back_one_address(broker: Any, admin: KafkaClient) -> None:
    """127.0.0.2 gets 2 new connections/s; the same address is still free on another quota's absence."""
    _set(admin, {"ip": "127.0.0.2"}, connection_creation_rate=2)
    host, _, port = broker.bootstrap.rpartition(":")
    sockets: list[socket.socket] = []
    try:
        answered = 0
        for _ in range(8):
            s = socket.create_connection((host, int(port)), timeout=5, source_address=("127.0.0.2", 0))
            sockets.append(s)
            conn = RawConnection.__new__(RawConnection)
            conn.sock, conn.correlation_id = s, 0
            try:
                conn.sock.settimeout(0.5)
                conn.call(ApiKey.API_VERSIONS, 0, {})
                answered += 1
            except (TimeoutError, ConnectionError, OSError):
                pass
        assert 1 <= answered < 8, f"{answered} of 8 rapid connections answered"
        with RawConnection(broker.bootstrap) as other:  # 127.0.0.1 has no quota
            other.call(ApiKey.API_VERSIONS, 0, {})
    finally:
        for s in sockets:
            s.close()
        _set(admin, {"ip": "127.0.0.2"}, connection_creation_rate=None)
