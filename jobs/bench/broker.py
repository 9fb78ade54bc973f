"""Benchmark section "broker": a real librdkafka producer (confluent-kafka) against pylog's broker.

The broker runs as a child process (``broker_runtime.launch.broker_process``), as in production. Figures:

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

from jobs.bench.common import Result
from jobs.bench.kafka_load import latency, throughput

__all__ = ["run"]

SECTION = "broker"
PARTITIONS = 4


def run(quick: bool) -> list[Result]:
    from broker_runtime.launch import broker_process, create_topic

    n = 20_000 if quick else 1_000_000
    warmup = min(n, 20_000)
    latency_n = max(n // 5, 10_000)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory(prefix="pylog-bench-") as data, broker_process(data) as bootstrap:
        create_topic(bootstrap, "bench", PARTITIONS)
        create_topic(bootstrap, "bench-latency", PARTITIONS)
        throughput(SECTION, bootstrap, "bench", "1", warmup)  # warm-up: connections, metadata, page cache
        rate = throughput(SECTION, bootstrap, "bench", "1", n)
        p50, p99 = latency(SECTION, bootstrap, "bench-latency", "1", latency_n, rate / 2, spin=True)
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
