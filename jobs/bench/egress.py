"""Benchmark section "egress": a real librdkafka consumer (confluent-kafka) served by pylog's broker, with the
zero-copy Fetch path (``pylog.fetch.sendfile=true``, the default) and without it (records read into Python),
and produce latency while old data is being fetched.

Two broker child processes hold the same data (N messages of 100 B values, 4-byte keys, 4 partitions, written
by the librdkafka producer of :mod:`.kafka_load`), one with sendfile and one without. Figures, as same-run
ratios:

* egress: one consumer assigned all partitions reads every message from offset 0 (``consume(10000)``
  batches, ``fetch.max.bytes`` 50 MiB, ``max.partition.fetch.bytes`` 1 MiB); messages per second from the
  first ``consume`` to the last message. Runs alternate (on, off, on, off, ...: 3 pairs, quick mode 1) and
  the medians and their ratio are reported (target >= 2M msg/s with sendfile); with them the broker process's
  CPU time (user + system, ``/proc/<pid>/stat``) over each read, per MB of log served: the consumer's own
  loop bounds the msg/s on a small machine, the broker's CPU per MB is what sendfile changes;
* egress to a C consumer: ``kcat`` (librdkafka's command-line tool, Debian package ``kcat``) assigned all
  partitions reads the same N messages from offset 0 with the same fetch settings, printing nothing per
  message (``-f ''``) and exiting after exactly N messages (``-c N``; a run that does not reach N fails on a
  timeout); messages per second over the whole kcat process (start, metadata and connections included: a lower
  bound), judged against the 2M msg/s target, with kcat's own CPU time (``RUSAGE_CHILDREN``) and the broker's
  CPU per MB over its reads. Runs alternate with the Python consumer's. Without ``kcat`` on the PATH these
  figures are skipped with the reason (tests install it with ``apt-get install -y kcat``; the benchmark does not
  install packages);
* mixed load: on each broker in turn, a consumer process re-reads the old data from offset 0 in a loop while
  a producer with ``linger.ms`` 1 (:mod:`.kafka_load`'s latency configuration), paced at half the acks=1 rate
  that configuration reached on that broker alone, sends to another topic; p50, p99 and p99.9
  produce-to-delivery latency (target p99 <= 5 ms). The pacing waits in ``poll(timeout)``: the client must
  not take a core from the broker and the reader;
* mixed load on replication factor 3: a 3-node cluster (sendfile on), the same reader on an RF=3 topic of old
  data while an acks=all producer (linger.ms 1), paced at half its measured rate, sends to another RF=3
  topic; p50, p99 and p99.9 (target p99 <= 15 ms).

N is 1,000,000 (quick mode: 20,000). On a 2-core machine the consumer's own Python loop and librdkafka's
threads share the cores with the broker, so the egress figure is a lower bound of the broker's.
"""

from __future__ import annotations

import multiprocessing
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from contextlib import ExitStack
from typing import Any

from jobs.bench.common import Result, broker_pid, log_mb, process_cpu_s
from jobs.bench.kafka_load import LATENCY_LINGER_MS, Latency, latency, throughput

__all__ = ["run"]

SECTION = "egress"
PARTITIONS = 4
_MODES = {"sendfile": "true", "read": "false"}


def _consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pylog-bench-egress",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 << 20,
            "max.partition.fetch.bytes": 1 << 20,
            "queued.max.messages.kbytes": 1 << 20,
            "fetch.wait.max.ms": 100,
        }
    )


def _read_all(bootstrap: str, topic: str, n: int) -> float:
    """Messages per second reading ``n`` messages of ``topic`` from offset 0 (all partitions assigned)."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = 0
        t0 = time.perf_counter()
        deadline = t0 + 300
        while got < n:
            batch = consumer.consume(10_000, 1.0)
            for msg in batch:
                if msg.error() is not None:
                    raise RuntimeError(f"{SECTION} benchmark: consumer error {msg.error()}")
            got += len(batch)
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{SECTION} benchmark: read {got} of {n} messages in 300 s")
        return n / (time.perf_counter() - t0)
    finally:
        consumer.close()


def _kcat_read(kcat: str, bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """(messages per second, kcat's CPU seconds) of one ``kcat`` run reading ``n`` messages of ``topic`` from
    offset 0, all partitions, with the consumer settings of :func:`_consumer`; fails unless it read all ``n``."""
    cmd = [kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-c", str(n), "-q", "-f", ""]
    for setting in (
        "fetch.max.bytes=52428800",
        "max.partition.fetch.bytes=1048576",
        "queued.max.messages.kbytes=1048576",
        "fetch.wait.max.ms=100",
    ):
        cmd += ["-X", setting]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"{SECTION} benchmark: kcat did not read {n} messages of {topic!r} in 300 s"
        ) from None
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(
            f"{SECTION} benchmark: kcat exited {done.returncode}: {done.stderr.strip()[-300:]}"
        )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return n / elapsed, cpu


def _reread_loop(bootstrap: str, topic: str, n: int, stop: Any) -> None:
    """Child process: read ``topic`` from offset 0 again and again until ``stop`` is set."""
    while not stop.is_set():
        _read_all(bootstrap, topic, n)


def run(quick: bool) -> list[Result]:
    from broker_runtime.launch import broker_process, create_topic

    n = 20_000 if quick else 1_000_000
    pairs = 1 if quick else 3
    latency_n = 5_000 if quick else 100_000
    rates: dict[str, list[float]] = {mode: [] for mode in _MODES}
    kcat = shutil.which("kcat")
    kcat_rates: dict[str, list[float]] = {mode: [] for mode in _MODES}
    kcat_cpu: dict[str, list[float]] = {mode: [] for mode in _MODES}
    kcat_broker_cpu: dict[str, list[float]] = {mode: [] for mode in _MODES}
    cpu_per_mb: dict[str, list[float]] = {mode: [] for mode in _MODES}
    lat: dict[str, Latency] = {}
    paced: dict[str, float] = {}
    with ExitStack() as stack:
        brokers: dict[str, str] = {}
        pids: dict[str, int] = {}
        dirs: dict[str, str] = {}
        for mode, setting in _MODES.items():
            data = stack.enter_context(tempfile.TemporaryDirectory(prefix="pylog-bench-"))
            bootstrap = stack.enter_context(
                broker_process(data, {"pylog.fetch.sendfile": setting}, startup_timeout_s=120)
            )
            create_topic(bootstrap, "old", PARTITIONS)
            create_topic(bootstrap, "new", PARTITIONS)
            throughput(SECTION, bootstrap, "old", "1", n)
            brokers[mode] = bootstrap
            pids[mode] = broker_pid(data)
            dirs[mode] = data
        for bootstrap in brokers.values():  # warm-up: connections, metadata, page cache
            _read_all(bootstrap, "old", n)
        for _ in range(pairs):
            for mode, bootstrap in brokers.items():
                before = process_cpu_s(pids[mode])
                rates[mode].append(_read_all(bootstrap, "old", n))
                cpu_per_mb[mode].append(
                    (process_cpu_s(pids[mode]) - before) * 1000 / log_mb(dirs[mode], "old")
                )
                if kcat is not None:
                    before = process_cpu_s(pids[mode])
                    rate, cpu = _kcat_read(kcat, bootstrap, "old", n)
                    kcat_rates[mode].append(rate)
                    kcat_cpu[mode].append(cpu)
                    kcat_broker_cpu[mode].append(
                        (process_cpu_s(pids[mode]) - before) * 1000 / log_mb(dirs[mode], "old")
                    )
        for mode, bootstrap in brokers.items():
            rate = paced[mode] = (
                throughput(SECTION, bootstrap, "new", "1", latency_n, linger_ms=LATENCY_LINGER_MS) / 2
            )
            lat[mode] = _with_reader(
                bootstrap,
                "old",
                n,
                quick,
                lambda b=bootstrap, r=rate: latency(SECTION, b, "new", "1", latency_n, r, spin=False),
            )
    rf3_paced, rf3_lat = _replicated_mixed_load(n, latency_n, quick)
    on, off = (statistics.median(rates[m]) for m in _MODES)
    results = [
        Result(
            SECTION,
            f"consumer egress, sendfile ({n:,} msgs of 100 B, median)",
            on,
            "msg/s",
            ">= 2M/s",
            on >= 2_000_000,
        ),
        Result(SECTION, "consumer egress, records read (same run, median)", off, "msg/s"),
        Result(SECTION, "consumer egress sendfile / read (same run)", on / off if off else 0.0, "x"),
    ]
    cpu_on, cpu_off = (statistics.median(cpu_per_mb[m]) for m in _MODES)
    results += [
        Result(SECTION, "broker CPU per MB served, sendfile (median)", cpu_on, "ms/MB"),
        Result(SECTION, "broker CPU per MB served, records read (median)", cpu_off, "ms/MB"),
        Result(
            SECTION, "broker CPU per MB served sendfile / read", cpu_on / cpu_off if cpu_off else 0.0, "x"
        ),
    ]
    results += _kcat_results(n, kcat, kcat_rates, kcat_cpu, kcat_broker_cpu)
    for mode in _MODES:
        p50, p99, p999 = lat[mode]
        results.append(
            Result(SECTION, f"produce p50 under old-data fetch, {mode} ({paced[mode]:,.0f}/s)", p50, "ms")
        )
        results.append(
            Result(
                SECTION,
                f"produce p99 under old-data fetch, {mode} ({paced[mode]:,.0f}/s)",
                p99,
                "ms",
                "<= 5 ms",
                p99 <= 5,
            )
        )
        results.append(
            Result(SECTION, f"produce p99.9 under old-data fetch, {mode} ({paced[mode]:,.0f}/s)", p999, "ms")
        )
    p50, p99, p999 = rf3_lat
    results.append(Result(SECTION, f"acks=all RF=3 p50 under old-data fetch ({rf3_paced:,.0f}/s)", p50, "ms"))
    results.append(
        Result(
            SECTION,
            f"acks=all RF=3 p99 under old-data fetch ({rf3_paced:,.0f}/s)",
            p99,
            "ms",
            "<= 15 ms",
            p99 <= 15,
        )
    )
    results.append(
        Result(SECTION, f"acks=all RF=3 p99.9 under old-data fetch ({rf3_paced:,.0f}/s)", p999, "ms")
    )
    return results


def _kcat_results(
    n: int,
    kcat: str | None,
    rates: dict[str, list[float]],
    cpu: dict[str, list[float]],
    broker_cpu: dict[str, list[float]],
) -> list[Result]:
    if kcat is None:
        return [
            Result(
                SECTION,
                "kcat consumer egress: skipped, no kcat on the PATH (apt-get install -y kcat)",
                0.0,
                "msg/s",
                ">= 2M/s",
            )
        ]
    on, off = (statistics.median(rates[m]) for m in _MODES)
    return [
        Result(
            SECTION,
            f"kcat (C) consumer egress, sendfile ({n:,} msgs, median)",
            on,
            "msg/s",
            ">= 2M/s",
            on >= 2_000_000,
        ),
        Result(SECTION, "kcat consumer egress, records read (same run, median)", off, "msg/s"),
        Result(
            SECTION, "kcat process CPU per run, sendfile (median)", statistics.median(cpu["sendfile"]), "s"
        ),
        Result(
            SECTION,
            "broker CPU per MB served to kcat, sendfile (median)",
            statistics.median(broker_cpu["sendfile"]),
            "ms/MB",
        ),
        Result(
            SECTION,
            "broker CPU per MB served to kcat, records read (median)",
            statistics.median(broker_cpu["read"]),
            "ms/MB",
        ),
    ]


def _with_reader(bootstrap: str, topic: str, n: int, quick: bool, measure: Any) -> Any:
    """``measure()`` while a child process re-reads ``topic`` (``n`` messages) from offset 0 in a loop."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    reader = ctx.Process(target=_reread_loop, args=(bootstrap, topic, n, stop), daemon=True)
    reader.start()
    try:
        time.sleep(0.5 if quick else 2.0)  # the reader is fetching old data by now
        return measure()
    finally:
        stop.set()
        reader.join(60)
        if reader.is_alive():
            reader.terminate()


def _replicated_mixed_load(n: int, latency_n: int, quick: bool) -> tuple[float, Latency]:
    """(paced rate, (p50, p99)) of acks=all on RF=3 while old RF=3 data is fetched (see the module docstring)."""
    from broker_runtime.launch import broker_process, create_topic

    old_n = n // 4
    with (
        tempfile.TemporaryDirectory(prefix="pylog-bench-") as data,
        broker_process(data, nodes=3, startup_timeout_s=120) as bootstrap,
    ):
        create_topic(bootstrap, "old", PARTITIONS, replication_factor=3)
        create_topic(bootstrap, "new", PARTITIONS, replication_factor=3)
        throughput(SECTION, bootstrap, "old", "all", old_n)
        paced = throughput(SECTION, bootstrap, "new", "all", latency_n, linger_ms=LATENCY_LINGER_MS) / 2
        lat = _with_reader(
            bootstrap,
            "old",
            old_n,
            quick,
            lambda: latency(SECTION, bootstrap, "new", "all", latency_n, paced, spin=False),
        )
    return paced, lat
