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
client-bound; the broker's own cost is reported separately: the broker process's CPU time (user + system, from
``/proc/<pid>/stat`` read just before the measured throughput run and just after it, so the broker's start-up,
the warm-up and the latency run are not counted) per message, and the rate one core of broker time could
sustain at that cost.

Ingest (issue #18's figure): TWO producer processes at once (``multiprocessing``, spawn), each with its own
librdkafka producer in a throughput configuration -- acks=1, ``linger.ms`` 50, ``batch.size`` 1 MiB, as
Kafka's own producer throughput tests use large batches and lingers of tens of ms -- each sending N/2 messages
of 100 B values (4-byte keys) to a fresh topic of 4 partitions, uncompressed and then lz4 (the benchmark's
values are one repeated byte, so lz4 shrinks the segment bytes about 12x), and the same two-producer run with the
``linger.ms`` 5 of the single-producer figure for comparison. Each producer connects and sends a warm-up of
1,000 messages before a barrier; the broker's /proc CPU is read at the barrier and after both producers'
last delivery reports. Reported: msgs/s (all messages over the wall time from the barrier to the later
producer's last delivery report), MB/s and broker CPU ms per MB, where MB is the message bytes produced
(key + value: 104 B per message, 10^6 bytes per MB, the same for both codecs); the MB of the segment files
written by the measured messages is printed with it (uncompressed: about 9 % more than the message bytes, the
batch headers and each record's framing). The target
of issue #18, broker CPU <= 0.5 ms per MB, is judged on each codec's figure. Quick mode runs the uncompressed
``linger.ms`` 50 form only.

Metrics cost: the same throughput run against two fresh brokers, one with ``pylog.metrics.listener`` set and one
without, alternated (off, on, off, on, ...: 3 pairs, quick mode 1), each broker measured alone: the producer's
rate and the broker process's CPU per message. Reported as medians and the on/off ratios of the same run (no
scraper runs meanwhile: a scrape costs per partition, not per request).
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import time
import uuid
from typing import Any

from jobs.bench.common import Result, broker_pid, log_mb, process_cpu_s
from jobs.bench.kafka_load import LATENCY_LINGER_MS, VALUE, Latency, paced_latency, producer, throughput

__all__ = ["run"]

SECTION = "broker"
PARTITIONS = 4
#: The ingest figure's producers: processes at once, linger.ms of the throughput configuration, warm-up msgs.
PRODUCERS = 2
INGEST_LINGER_MS = 50
_INGEST_WARMUP = 1_000
#: Message bytes per message (4-byte key + 100-byte value) for the ingest figure's MB.
_MESSAGE_BYTES = 4 + len(VALUE)
TARGET_MS_PER_MB = 0.5


def run(quick: bool) -> list[Result]:
    from broker_runtime.launch import broker_process, create_topic

    n = 20_000 if quick else 1_000_000
    warmup = min(n, 20_000)
    latency_n = max(n // 5, 10_000)
    with tempfile.TemporaryDirectory(prefix="pylog-bench-") as data, broker_process(data) as bootstrap:
        pid = broker_pid(data)
        create_topic(bootstrap, "bench", PARTITIONS)
        create_topic(bootstrap, "bench-latency", PARTITIONS)
        throughput(SECTION, bootstrap, "bench", "1", warmup)  # warm-up: connections, metadata, page cache
        before = process_cpu_s(pid)
        rate = throughput(SECTION, bootstrap, "bench", "1", n)
        broker_cpu = process_cpu_s(pid) - before
        paced, lat = paced_latency(SECTION, bootstrap, "bench-latency", "1", latency_n)
        ingest = _ingest(bootstrap, data, n, "none", INGEST_LINGER_MS)
        if not quick:  # quick mode: the one form of the figure (each run spawns two producer processes)
            ingest += _ingest(bootstrap, data, n, "lz4", INGEST_LINGER_MS) + _ingest(
                bootstrap, data, n, "none", 5
            )
    per_message_us = broker_cpu / n * 1e6
    target = 1_000_000
    return _figures(n, rate, paced, lat, per_message_us, target) + ingest + _metrics_cost(quick)


def _producer_process(bootstrap: str, topic: str, n: int, codec: str, linger_ms: int, barrier: Any) -> None:
    """One ingest producer (a child process): connect and warm up, wait at ``barrier``, send ``n`` messages."""
    client = producer(bootstrap, "1", linger_ms, compression_type=codec)
    throughput(SECTION, bootstrap, topic, "1", _INGEST_WARMUP, client=client)
    barrier.wait()
    throughput(SECTION, bootstrap, topic, "1", n, client=client)


def _ingest(bootstrap: str, data_dir: str, n: int, codec: str, linger_ms: int) -> list[Result]:
    """The two-producer ingest figure (see the module docstring) on a fresh topic of the running broker."""
    from broker_runtime.launch import create_topic

    topic = f"ingest-{codec}-{linger_ms}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    pid = broker_pid(data_dir)
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that has run librdkafka threads
    barrier = ctx.Barrier(PRODUCERS + 1)
    each = n // PRODUCERS
    procs = [
        ctx.Process(target=_producer_process, args=(bootstrap, topic, each, codec, linger_ms, barrier))
        for _ in range(PRODUCERS)
    ]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(timeout=120)
        cpu0, t0 = process_cpu_s(pid), time.perf_counter()
        for proc in procs:
            proc.join(300)
        elapsed, cpu = time.perf_counter() - t0, process_cpu_s(pid) - cpu0
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
    if any(proc.exitcode != 0 for proc in procs):
        raise RuntimeError(f"{SECTION} benchmark: an ingest producer failed ({[p.exitcode for p in procs]})")
    total = each * PRODUCERS
    mb = total * _MESSAGE_BYTES / 1e6
    seg_mb = log_mb(data_dir, topic) * total / (total + PRODUCERS * _INGEST_WARMUP)
    ms_per_mb = cpu * 1000 / mb
    label = f"{PRODUCERS} producers {codec} linger {linger_ms}"
    return [
        Result(SECTION, f"ingest {label} ({total:,} msgs)", total / elapsed, "msg/s"),
        Result(SECTION, f"ingest {label}: MB/s (segment MB {seg_mb:,.0f})", mb / elapsed, "MB/s"),
        Result(
            SECTION,
            f"ingest {label}: broker CPU per MB",
            ms_per_mb,
            "ms/MB",
            f"<= {TARGET_MS_PER_MB}",
            ms_per_mb <= TARGET_MS_PER_MB,
        ),
    ]


def _one_broker(metrics: bool, n: int) -> tuple[float, float]:
    """(msg/s, broker CPU us per message) of one throughput run against a fresh broker."""
    from broker_runtime.launch import broker_process, create_topic

    overrides = {"pylog.metrics.listener": "127.0.0.1:0"} if metrics else {}
    with (
        tempfile.TemporaryDirectory(prefix="pylog-bench-") as data,
        broker_process(data, overrides) as bootstrap,
    ):
        pid = broker_pid(data)
        create_topic(bootstrap, "bench", PARTITIONS)
        throughput(SECTION, bootstrap, "bench", "1", min(n, 20_000))
        before = process_cpu_s(pid)
        rate = throughput(SECTION, bootstrap, "bench", "1", n)
        cpu = process_cpu_s(pid) - before
    return rate, cpu / n * 1e6


def _metrics_cost(quick: bool) -> list[Result]:
    n = 20_000 if quick else 500_000
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
        Result(
            SECTION,
            "broker CPU per message, metrics on / off (same run)",
            cpu[True] / cpu[False] if cpu[False] else 0.0,  # a quick run may use less than one clock tick
            "x",
        ),
    ]


def _figures(
    n: int, rate: float, paced: float, lat: Latency, per_message_us: float, target: int
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
        Result(SECTION, "broker CPU per message (the throughput run, /proc)", per_message_us, "us"),
        Result(
            SECTION,
            "broker capacity at that cost (1 core)",
            1e6 / per_message_us if per_message_us > 0 else 0.0,
            "msg/s",
            ">= 1M/s",
            per_message_us > 0 and 1e6 / per_message_us >= target,
        ),
    ]
