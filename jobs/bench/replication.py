"""Benchmark section "replication": acks=all on replication factor 3 against acks=1 on replication factor 1.

One 3-node cluster of broker processes (``broker_runtime.launch.broker_process(..., nodes=3)``), two topics in the same
run: ``rf1`` (4 partitions, one replica each) and ``rf3`` (4 partitions, three replicas each; leaders spread
round-robin over the nodes). A real librdkafka producer (confluent-kafka), 100 B values, 4-byte keys,
linger.ms=5, batch.size=1 MiB, uncompressed. Figures:

* throughput of acks=1 on rf1 and of acks=all on rf3 (messages per second from the first ``produce()`` to the
  last delivery report) and their ratio (target >= 0.5: waiting for two follower round trips per batch must
  cost less than half the throughput);
* acks=all latency on rf3 (:func:`~jobs.bench.kafka_load.paced_latency`): a producer with ``linger.ms`` 1, its
  maximum acks=all rate measured first, then paced at half of it; per message, the time from ``produce()`` to
  its delivery report; p50, p99 and p99.9 (target p99 <= 15 ms). The pacing waits in ``poll(timeout)``
  instead of spinning, so the client does not steal a core from the brokers.

N is 300,000 (quick mode: 10,000). On a 2-core machine the three broker processes and the client share the
cores, so these figures are CPU-bound lower bounds.
"""

from __future__ import annotations

import tempfile

from jobs.bench.common import Result
from jobs.bench.kafka_load import LATENCY_LINGER_MS, paced_latency, throughput

__all__ = ["run"]

SECTION = "replication"
PARTITIONS = 4


def run(quick: bool) -> list[Result]:
    from broker_runtime.launch import broker_process, create_topic

    n = 10_000 if quick else 300_000
    warmup = min(n, 10_000)
    latency_n = max(n // 5, 5_000)
    with (
        tempfile.TemporaryDirectory(prefix="pylog-bench-") as data,
        broker_process(data, nodes=3) as bootstrap,
    ):
        create_topic(bootstrap, "rf1", PARTITIONS, replication_factor=1)
        create_topic(bootstrap, "rf3", PARTITIONS, replication_factor=3)
        create_topic(bootstrap, "rf3-latency", PARTITIONS, replication_factor=3)
        throughput(SECTION, bootstrap, "rf1", "1", warmup)  # warm-up: connections, metadata, page cache
        throughput(SECTION, bootstrap, "rf3", "all", warmup)
        rate_rf1 = throughput(SECTION, bootstrap, "rf1", "1", n)
        rate_rf3 = throughput(SECTION, bootstrap, "rf3", "all", n)
        # Pacing waits in poll(timeout): a spinning client would take a core from the three broker processes.
        paced, lat = paced_latency(SECTION, bootstrap, "rf3-latency", "all", latency_n)
    ratio = rate_rf3 / rate_rf1 if rate_rf1 > 0 else 0.0
    return [
        Result(SECTION, f"produce acks=1, RF=1 ({n:,} msgs of 100 B)", rate_rf1, "msg/s"),
        Result(SECTION, f"produce acks=all, RF=3 ({n:,} msgs of 100 B)", rate_rf3, "msg/s"),
        Result(SECTION, "throughput ratio acks=all RF=3 / acks=1 RF=1", ratio, "x", ">= 0.5", ratio >= 0.5),
        Result(
            SECTION,
            f"acks=all latency p50, linger {LATENCY_LINGER_MS} ms, at {paced:,.0f} msg/s",
            lat.p50,
            "ms",
        ),
        Result(
            SECTION,
            f"acks=all latency p99, linger {LATENCY_LINGER_MS} ms, at {paced:,.0f} msg/s",
            lat.p99,
            "ms",
            "<= 15 ms",
            lat.p99 <= 15,
        ),
        Result(
            SECTION,
            f"acks=all latency p99.9, linger {LATENCY_LINGER_MS} ms, at {paced:,.0f} msg/s",
            lat.p999,
            "ms",
        ),
    ]
