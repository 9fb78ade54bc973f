"""Benchmark section "replication": acks=all on replication factor 3 against acks=1 on replication factor 1.

One 3-node cluster of broker processes (``broker_runtime.embedded.embedded_cluster``), two topics in the same
run: ``rf1`` (4 partitions, one replica each) and ``rf3`` (4 partitions, three replicas each; leaders spread
round-robin over the nodes). A real librdkafka producer (confluent-kafka), 100 B values, 4-byte keys,
linger.ms=5, batch.size=1 MiB, uncompressed. Figures:

* throughput of acks=1 on rf1 and of acks=all on rf3 (messages per second from the first ``produce()`` to the
  last delivery report) and their ratio (target >= 0.5: waiting for two follower round trips per batch must
  cost less than half the throughput);
* acks=all latency on rf3 with the producer paced at half the measured acks=all rate: per message, the time
  from ``produce()`` to its delivery report (linger included); p50 and p99 (target p99 <= 15 ms). The pacing
  waits in ``poll(timeout)`` instead of spinning, so the client does not steal a core from the brokers.

N is 300,000 (quick mode: 10,000). On a 2-core machine the three broker processes and the client share the
cores, so these figures are CPU-bound lower bounds.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from jobs.bench.common import Result

__all__ = ["run"]

SECTION = "replication"
VALUE = b"x" * 100
PARTITIONS = 4


def _producer(bootstrap: str, acks: str) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "message.max.bytes": 1 << 24,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "partitioner": "murmur2_random",
        }
    )


def _throughput(bootstrap: str, topic: str, acks: str, n: int) -> float:
    producer = _producer(bootstrap, acks)
    produce = producer.produce
    failures: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)

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
        raise RuntimeError(
            f"replication benchmark ({topic}, acks={acks}): {remaining} undelivered, {len(failures)} failed "
            f"deliveries, first: {failures[:1]}"
        )
    return n / elapsed


def _latency(bootstrap: str, topic: str, n: int, rate: float) -> tuple[float, float]:
    producer = _producer(bootstrap, "all")
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
        # Wait inside librdkafka (poll with a timeout) rather than spinning: on a small machine a spinning
        # client would take a core from the three broker processes whose hops this figure measures.
        while (left := due - now()) > 0:
            producer.poll(left)
        for i in range(start, min(start + chunk, n)):
            sent[i] = now()
            producer.produce(topic, VALUE, i.to_bytes(4, "big"), on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(120)
    latencies.sort()
    if not latencies:
        raise RuntimeError("replication benchmark: no delivery reports in the latency run")
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return p50 * 1000, p99 * 1000


def run(quick: bool) -> list[Result]:
    from broker_runtime.embedded import create_topic, embedded_cluster

    n = 10_000 if quick else 300_000
    warmup = min(n, 10_000)
    latency_n = max(n // 5, 5_000)
    with (
        tempfile.TemporaryDirectory(prefix="pylog-bench-") as data,
        embedded_cluster(data, nodes=3) as bootstrap,
    ):
        create_topic(bootstrap, "rf1", PARTITIONS, replication_factor=1)
        create_topic(bootstrap, "rf3", PARTITIONS, replication_factor=3)
        create_topic(bootstrap, "rf3-latency", PARTITIONS, replication_factor=3)
        _throughput(bootstrap, "rf1", "1", warmup)  # warm-up: connections, metadata, page cache
        _throughput(bootstrap, "rf3", "all", warmup)
        rate_rf1 = _throughput(bootstrap, "rf1", "1", n)
        rate_rf3 = _throughput(bootstrap, "rf3", "all", n)
        p50, p99 = _latency(bootstrap, "rf3-latency", latency_n, rate_rf3 / 2)
    ratio = rate_rf3 / rate_rf1 if rate_rf1 > 0 else 0.0
    return [
        Result(SECTION, f"produce acks=1, RF=1 ({n:,} msgs of 100 B)", rate_rf1, "msg/s"),
        Result(SECTION, f"produce acks=all, RF=3 ({n:,} msgs of 100 B)", rate_rf3, "msg/s"),
        Result(SECTION, "throughput ratio acks=all RF=3 / acks=1 RF=1", ratio, "x", ">= 0.5", ratio >= 0.5),
        Result(SECTION, f"acks=all latency p50 at {rate_rf3 / 2:,.0f} msg/s", p50, "ms"),
        Result(
            SECTION, f"acks=all latency p99 at {rate_rf3 / 2:,.0f} msg/s", p99, "ms", "<= 15 ms", p99 <= 15
        ),
    ]
