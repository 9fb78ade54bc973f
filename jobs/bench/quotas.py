"""Benchmark section "quotas": does a producer_byte_rate hold two greedy producers near their quota?

One broker process with Kafka's quota windows (11 samples of 1 s) and a default client-id quota of
``producer_byte_rate`` = :data:`QUOTA` bytes/s: each producer (librdkafka, its own client id, its own topic, in a
thread of its own producing 1 KB records as fast as its queue takes them) gets that rate. Each producer's rate
is measured on the broker, from its topic's segment bytes on disk, from its start over :data:`MEASURE_S` seconds:
four whole quota windows, because Kafka's rate lets a greedy client burst once per window (when the sample that
holds its previous burst expires, the rate it is judged by drops at once), so a shorter span catching one burst
more or less would judge the span, not the quota. The figure is the larger of the two deviations from the
quota, in percent; target: within 10 % (the issue's goal). Quick: 2 samples of 1 s, 0.5 s warm-up, 1 s measured.
"""

from __future__ import annotations

import tempfile
import threading
import time
from typing import Any

from jobs.bench.common import Result, log_mb

__all__ = ["run"]

SECTION = "quotas"
QUOTA = 500_000
WARMUP_S = 0.0
MEASURE_S = 44.0


def _greedy(bootstrap: str, client_id: str, topic: str, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 16384}
    )
    value = b"x" * 1000
    while not stop.is_set():
        try:
            producer.produce(topic, value)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.purge()  # what the quota still holds back is not waited for
    producer.flush(5)


def run(quick: bool) -> list[Result]:
    from broker_runtime.client import KafkaClient
    from broker_runtime.launch import broker_process, create_topic

    windows = {"quota.window.num": "2", "quota.window.size.seconds": "1"} if quick else {}
    warmup, measure = (0.5, 1.0) if quick else (WARMUP_S, MEASURE_S)
    topics = ("bench-quota-a", "bench-quota-b")
    with (
        tempfile.TemporaryDirectory(prefix="pylog-bench-") as data,
        broker_process(data, windows) as bootstrap,
    ):
        for topic in topics:
            create_topic(bootstrap, topic, 1)
        with KafkaClient(bootstrap) as client:
            errors = client.admin.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": QUOTA})])
            if errors != [None]:
                raise RuntimeError(f"setting the quota failed: {errors}")
        stop = threading.Event()
        threads: list[Any] = [
            threading.Thread(target=_greedy, args=(bootstrap, f"greedy-{i}", topic, stop), daemon=True)
            for i, topic in enumerate(topics)
        ]
        for t in threads:
            t.start()
        try:
            time.sleep(warmup)
            before = [log_mb(data, topic) for topic in topics]
            t0 = time.monotonic()
            time.sleep(measure)
            rates = [
                (log_mb(data, topic) - b) * 1e6 / (time.monotonic() - t0)
                for topic, b in zip(topics, before, strict=True)
            ]
        finally:
            stop.set()
            for t in threads:
                t.join(60)
    worst = max(abs(rate / QUOTA - 1) for rate in rates) * 100
    return [
        Result(
            SECTION,
            f"2 greedy producers at producer_byte_rate={QUOTA} B/s each: worst deviation "
            f"({', '.join(f'{r / 1e3:.0f}' for r in rates)} kB/s)",
            worst,
            "%",
            "<= 10",
            None if quick else worst <= 10,
        )
    ]
