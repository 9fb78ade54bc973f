"""Benchmark section "failover": how long a partition takes writes again after its leader dies or stops.

Each run starts a fresh 3-node cluster of broker processes (``broker_runtime.launch.cluster_process``), creates
one topic with one partition, replication factor 3 and ``min.insync.replicas=2``, and runs a real librdkafka
producer (confluent-kafka, idempotent, acks=all, default retry settings) paced at ``RATE`` messages per second in
chunks of 20, each message numbered. After ``STEADY_S`` of steady load the partition's leader is SIGKILLed (or
SIGSTOPped, continued at the end of the run) and the load goes on for ``AFTER_S``. Per run:

* **failover time**: from the signal to the delivery report of the first message *sent after* the signal
  (with idempotence, that message is delivered only after everything queued before it, through the new leader);
* latencies (produce() to delivery report): p50 and p99 over the steady part, and p99 / max over the messages
  sent in the ``AFTER_S`` after the signal.

Every message must be delivered (no delivery errors) -- a run that loses one raises. Figures: medians over runs
(spread min-max). Variants: SIGKILL with default settings (target: median <= 10 s), SIGSTOP with the default
``broker.session.timeout.ms`` (9 s), and SIGSTOP with ``broker.session.timeout.ms=3000`` (the session is the knob
for hung brokers; a dead process is seen at once whatever the session). A stopped leader holds the client's
in-flight requests until the client gives up on them (librdkafka's ``socket.timeout.ms``, 60 s by default), so
the SIGSTOP runs give the producer 5 s timeouts; the failover then takes the longer of the session and that.

Quick mode: the SIGKILL variant once, with ``QUICK_STEADY_S`` and ``QUICK_AFTER_S`` instead.

Where the SIGKILL time goes (librdkafka debug log of one run): the new leader is in Metadata within 0.5 s of the
kill; the rest is librdkafka's own leader re-query schedule and its drain of the requests it had in flight to
the dead leader before it produces to the new one.
"""

from __future__ import annotations

import os
import signal
import statistics
import tempfile
import time
from typing import Any

from jobs.bench.common import Result

__all__ = ["run"]

SECTION = "failover"
RATE = 2000
STEADY_S = 3.0
AFTER_S = 14.0
#: Quick mode (the test suite's smoke run): one SIGKILL run, 1 s of steady load (the steady figures skip the
#: first 0.5 s), 2 s of load after the kill.
QUICK_STEADY_S = 1.0
QUICK_AFTER_S = 2.0
_CHUNK = 20


def _leader(bootstrap: str, topic: str) -> int:
    from broker_runtime.client import KafkaClient

    with KafkaClient(bootstrap) as client:
        return client.leader_for(topic, 0)


def _one_run(
    sig: signal.Signals,
    overrides: dict[str, str],
    after_s: float,
    client: dict[str, Any],
    steady_s: float = STEADY_S,
) -> dict[str, float]:
    from confluent_kafka import Producer

    from broker_runtime.launch import cluster_process, create_topic

    with (
        tempfile.TemporaryDirectory(prefix="pylog-bench-") as data,
        cluster_process(data, nodes=3, overrides=overrides) as cluster,
    ):
        create_topic(cluster.bootstrap, "fo", 1, {"min.insync.replicas": "2"}, replication_factor=3)
        leader = _leader(cluster.bootstrap, "fo")
        p = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                **client,
            }
        )
        now = time.perf_counter
        sent: list[float] = []
        done: dict[int, float] = {}
        errors: list[Any] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                done[int.from_bytes(msg.value()[:8], "big")] = now()

        t0 = now()
        signal_at = t0 + steady_s
        signalled = False
        end = signal_at + after_s
        i = 0
        try:
            while now() < end:
                due = t0 + i / RATE
                while (left := due - now()) > 0:
                    p.poll(left)
                if not signalled and now() >= signal_at:
                    signal_at = now()
                    os.kill(cluster.nodes[leader].pid, sig)
                    signalled = True
                for _ in range(_CHUNK):
                    sent.append(now())
                    p.produce("fo", i.to_bytes(8, "big") + b"x" * 92, on_delivery=on_delivery)
                    i += 1
                p.poll(0)
        finally:
            if sig == signal.SIGSTOP:
                os.kill(cluster.nodes[leader].pid, signal.SIGCONT)
        left = p.flush(60)
        if left or errors or len(done) != len(sent):
            raise RuntimeError(
                f"{SECTION} benchmark: {left} undelivered, {len(errors)} failed deliveries "
                f"(first: {errors[:1]}), {len(sent) - len(done)} without a report"
            )
    first_after = next(n for n, t in enumerate(sent) if t >= signal_at)
    steady = sorted(done[n] - sent[n] for n in range(first_after) if sent[n] >= t0 + 0.5)
    across = sorted(done[n] - sent[n] for n in range(first_after, len(sent)))
    return {
        "failover_s": done[first_after] - signal_at,
        "steady_p50": steady[len(steady) // 2] * 1000,
        "steady_p99": steady[int(len(steady) * 0.99)] * 1000,
        "across_p99": across[int(len(across) * 0.99)] * 1000,
        "across_max": across[-1] * 1000,
    }


def _spread(runs: list[dict[str, float]], key: str) -> tuple[float, tuple[float, float]]:
    values = [r[key] for r in runs]
    return statistics.median(values), (min(values), max(values))


def run(quick: bool) -> list[Result]:
    # A stopped leader keeps the client's in-flight requests unanswered until the client's own timeout
    # (librdkafka: socket.timeout.ms, 60 s by default), whatever the cluster does; the SIGSTOP runs set it to 5 s.
    short = {"socket.timeout.ms": 5000, "request.timeout.ms": 5000}
    variants: list[tuple[str, signal.Signals, dict[str, str], int, float, dict[str, Any]]] = [
        (
            "leader SIGKILL, defaults",
            signal.SIGKILL,
            {},
            1 if quick else 5,
            QUICK_AFTER_S if quick else AFTER_S,
            {},
        ),
    ]
    if not quick:
        variants += [
            ("leader SIGSTOP, defaults, client timeouts 5 s", signal.SIGSTOP, {}, 3, AFTER_S, short),
            (
                "leader SIGSTOP, broker.session.timeout.ms=3000, client 5 s",
                signal.SIGSTOP,
                {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"},
                3,
                AFTER_S,
                short,
            ),
        ]
    results: list[Result] = []
    for name, sig, overrides, reps, after_s, client in variants:
        steady_s = QUICK_STEADY_S if quick else STEADY_S
        runs = [_one_run(sig, overrides, after_s, client, steady_s) for _ in range(reps)]
        value, spread = _spread(runs, "failover_s")
        target = "<= 10 s" if sig == signal.SIGKILL else ""
        met = (value <= 10) if target else None
        results.append(Result(SECTION, f"failover time, {name}", value, "s", target, met, spread))
        if sig == signal.SIGKILL:
            for key, label in (
                ("steady_p50", "steady p50"),
                ("steady_p99", "steady p99"),
                ("across_p99", "p99 of messages sent in the 14 s after the kill"),
                ("across_max", "max of messages sent in the 14 s after the kill"),
            ):
                v, s = _spread(runs, key)
                results.append(Result(SECTION, f"acks=all latency {label} ({RATE} msg/s)", v, "ms", spread=s))
    return results
