"""Benchmark section "broker": a real librdkafka producer (confluent-kafka) against pylog's broker.

The broker runs as a child process (``broker_runtime.embedded.embedded_broker``), as in production. Figures:

* throughput: N messages of 100 B value (4-byte key), acks=1, linger.ms=5, batch.size=1 MiB, 4 partitions,
  uncompressed; messages per second from the first ``produce()`` to the last delivery report (target >= 1M/s);
* latency: the same producer paced at half the measured maximum rate; per message, the time from
  ``produce()`` to its delivery callback (the acks=1 round trip including linger); p50 and p99.

N is 1,000,000 (quick mode: 20,000). With a single producer process on a small machine the client's own
Python ``produce()`` loop (about 1 us per call) and librdkafka's threads take most of the CPU, so the figure is
client-bound; the broker's own cost is reported separately: the child process's CPU time (user + system, from
``getrusage(RUSAGE_CHILDREN)`` after it exits) per message over every message of the section, and the rate one
core of broker time could sustain at that cost.
"""

from __future__ import annotations

import resource
import tempfile
import time
from typing import Any

from jobs.bench.common import Result

__all__ = ["run"]

SECTION = "broker"
VALUE = b"x" * 100
PARTITIONS = 4


def _producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "message.max.bytes": 1 << 24,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "partitioner": "murmur2_random",
        }
    )


def _throughput(bootstrap: str, topic: str, n: int) -> float:
    producer = _producer(bootstrap)
    produce = producer.produce
    failures = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal failures
        if err is not None:
            failures += 1

    keys = [i.to_bytes(4, "big") for i in range(1024)]
    t0 = time.perf_counter()
    for i in range(n):
        try:
            produce(topic, VALUE, keys[i & 1023], on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            produce(topic, VALUE, keys[i & 1023], on_delivery=on_delivery)
        if i & 0xFFFF == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - t0
    if remaining or failures:
        raise RuntimeError(f"broker benchmark: {remaining} undelivered, {failures} failed deliveries")
    return n / elapsed


def _latency(bootstrap: str, topic: str, n: int, rate: float) -> tuple[float, float]:
    producer = _producer(bootstrap)
    sent = [0.0] * n
    latencies: list[float] = []
    now = time.perf_counter

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            latencies.append(now() - sent[int.from_bytes(msg.key(), "big")])

    t0 = now()
    chunk = 100
    for start in range(0, n, chunk):
        due = t0 + start / rate
        while now() < due:
            producer.poll(0)
        for i in range(start, min(start + chunk, n)):
            sent[i] = now()
            producer.produce(topic, VALUE, i.to_bytes(4, "big"), on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(120)
    latencies.sort()
    if not latencies:
        raise RuntimeError("broker benchmark: no delivery reports in the latency run")
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return p50 * 1000, p99 * 1000


def run(quick: bool) -> list[Result]:
    from broker_runtime.embedded import create_topic, embedded_broker

    n = 20_000 if quick else 1_000_000
    warmup = min(n, 20_000)
    latency_n = max(n // 5, 10_000)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory(prefix="pylog-bench-") as data, embedded_broker(data) as bootstrap:
        create_topic(bootstrap, "bench", PARTITIONS)
        create_topic(bootstrap, "bench-latency", PARTITIONS)
        _throughput(bootstrap, "bench", warmup)  # warm-up: connections, metadata, page cache
        rate = _throughput(bootstrap, "bench", n)
        p50, p99 = _latency(bootstrap, "bench-latency", latency_n, rate / 2)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    broker_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    total = warmup + n + latency_n
    per_message_us = broker_cpu / total * 1e6
    target = 1_000_000
    return [
        Result(
            SECTION,
            f"produce 100 B, acks=1, linger 5 ms ({n:,} msgs)",
            rate,
            "msg/s",
            ">= 1M/s",
            rate >= target,
        ),
        Result(SECTION, f"produce latency p50 at {rate / 2:,.0f} msg/s", p50, "ms"),
        Result(SECTION, f"produce latency p99 at {rate / 2:,.0f} msg/s", p99, "ms"),
        Result(SECTION, f"broker CPU per message ({total:,} msgs, whole section)", per_message_us, "us"),
        Result(
            SECTION,
            "broker capacity at that cost (1 core)",
            1e6 / per_message_us if per_message_us > 0 else 0.0,
            "msg/s",
            ">= 1M/s",
            per_message_us > 0 and 1e6 / per_message_us >= target,
        ),
    ]
