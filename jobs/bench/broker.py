"""Benchmark section "broker": a real librdkafka producer (confluent-kafka) against pylog's broker.

The broker runs as a child process (``broker_runtime.launch.broker_process``), as in production. Figures:

* throughput: N messages of 100 B value (4-byte key), acks=1, linger.ms=5, batch.size=1 MiB, 4 partitions,
  uncompressed; messages per second from the first ``produce()`` to the last delivery report (target >= 1M/s);
* latency (:func:`~jobs.bench.kafka_load.paced_latency`): a producer with ``linger.ms`` 1, its maximum rate
  measured first, then paced at half of it; per message, the time from ``produce()`` to its delivery
  callback (the acks=1 round trip plus at most the 1 ms linger); p50, p99 and p99.9 (target p99 <= 5 ms). The pacing waits
  in ``poll(timeout)``: a spinning client would take a core from the broker on a small machine.

N is 1,000,000 (quick mode: 20,000). With a single producer process on a small machine the client's own
Python ``produce()`` loop (about 1 us per call) and librdkafka's threads take most of the CPU, so the figure is
client-bound; the broker's own cost is reported separately: the child process's CPU time (user + system, from
``getrusage(RUSAGE_CHILDREN)`` after it exits) per message over every message of the section, and the rate one
core of broker time could sustain at that cost.

Metrics cost: the same throughput run against two fresh brokers, one with ``pylog.metrics.listener`` set and one
without, alternated (off, on, off, on, ...: 3 pairs, quick mode 1), each broker measured alone: the producer's
rate and the broker process's CPU per message. Reported as medians and the on/off ratios of the same run (no
scraper runs meanwhile: a scrape costs per partition, not per request).
"""

from __future__ import annotations

import resource
import statistics
import tempfile

from jobs.bench.common import Result
from jobs.bench.kafka_load import LATENCY_LINGER_MS, Latency, paced_latency, throughput

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
        paced, lat = paced_latency(SECTION, bootstrap, "bench-latency", "1", latency_n)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    broker_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    total = warmup + n + 2 * latency_n
    per_message_us = broker_cpu / total * 1e6
    target = 1_000_000
    return _figures(n, rate, paced, lat, total, per_message_us, target) + _metrics_cost(quick)


def _one_broker(metrics: bool, n: int) -> tuple[float, float]:
    """(msg/s, broker CPU us per message) of one throughput run against a fresh broker."""
    from broker_runtime.launch import broker_process, create_topic

    overrides = {"pylog.metrics.listener": "127.0.0.1:0"} if metrics else {}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with (
        tempfile.TemporaryDirectory(prefix="pylog-bench-") as data,
        broker_process(data, overrides) as bootstrap,
    ):
        create_topic(bootstrap, "bench", PARTITIONS)
        throughput(SECTION, bootstrap, "bench", "1", min(n, 20_000))
        rate = throughput(SECTION, bootstrap, "bench", "1", n)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rate, cpu / (n + min(n, 20_000)) * 1e6


def _metrics_cost(quick: bool) -> list[Result]:
    n = 2_000 if quick else 500_000
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(1 if quick else 3):
        for metrics in (False, True):
            runs[metrics].append(_one_broker(metrics, n))
    rate = {m: statistics.median(r for r, _ in runs[m]) for m in runs}
    cpu = {m: statistics.median(c for _, c in runs[m]) for m in runs}
    return [
        Result(SECTION, f"produce with metrics off ({n:,} msgs, median)", rate[False], "msg/s"),
        Result(SECTION, "produce with metrics on / off (same run)", rate[True] / rate[False], "x"),
        Result(SECTION, "broker CPU per message, metrics off", cpu[False], "us"),
        Result(SECTION, "broker CPU per message, metrics on / off (same run)", cpu[True] / cpu[False], "x"),
    ]


def _figures(
    n: int, rate: float, paced: float, lat: Latency, total: int, per_message_us: float, target: int
) -> list[Result]:
    return [
        Result(
            SECTION,
            f"produce 100 B, acks=1, linger 5 ms ({n:,} msgs)",
            rate,
            "msg/s",
            ">= 1M/s",
            rate >= target,
        ),
        Result(
            SECTION,
            f"produce latency p50, linger {LATENCY_LINGER_MS} ms, at {paced:,.0f} msg/s",
            lat.p50,
            "ms",
        ),
        Result(
            SECTION,
            f"produce latency p99, linger {LATENCY_LINGER_MS} ms, at {paced:,.0f} msg/s",
            lat.p99,
            "ms",
            "<= 5 ms",
            lat.p99 <= 5,
        ),
        Result(
            SECTION,
            f"produce latency p99.9, linger {LATENCY_LINGER_MS} ms, at {paced:,.0f} msg/s",
            lat.p999,
            "ms",
        ),
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
