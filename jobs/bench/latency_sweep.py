"""Produce latency against the offered rate, pylog's broker and an Apache Kafka node side by side, with the CPU
the measuring client and each broker use: what sets the "anchors" section's acks=1 p99 on this machine.

Not a benchmark section (no targets): a tool for the question "machine or broker?". It starts the two brokers
as the anchors section does (:func:`jobs.bench.anchors._pylog_broker`, :func:`jobs.bench.anchors._kafka_broker`:
default settings, Kafka's JVM as its start script runs it), one fresh topic on each, then for every rate in
``--rates`` runs :func:`jobs.bench.kafka_load.latency` (the anchors' paced run: confluent-kafka driven from
Python, linger.ms 1, one delivery callback a message, 1,000 unmeasured messages first) for ``--seconds`` of
messages, the two brokers alternating, ``--repeat`` times. Per rate and broker it prints the medians of p50,
p99 (with its range) and p99.9, the client's CPU (``time.process_time`` over the run's wall time, in cores), the
broker's (its process's utime+stime from ``/proc``, in cores) and the load average, and writes every run to
``jobs/bench/results/latency_sweep.json``.

Run: ``python -m jobs.bench.latency_sweep [--rates 232000,116000,58000,23000] [--seconds 2] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

RESULTS = Path(__file__).resolve().parent / "results" / "latency_sweep.json"


def main(argv: list[str] | None = None) -> int:
    from jobs.bench import anchors
    from jobs.bench.kafka_load import latency

    parser = argparse.ArgumentParser(prog="python -m jobs.bench.latency_sweep", description=__doc__)
    parser.add_argument("--rates", default="232000,116000,58000,23000", help="msg/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=2.0, help="each run's length at its rate")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--acks", default="1")
    args = parser.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",")]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="pylog-latency-sweep-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        brokers = [
            stack.enter_context(anchors._pylog_broker(work)),
            stack.enter_context(anchors._kafka_broker(work)),
        ]
        topics = {b.name: anchors._fresh_topic(b.bootstrap) for b in brokers}
        for rate in rates:
            for _ in range(args.repeat):
                for b in brokers:
                    cpu0, wall0, broker0 = time.process_time(), time.perf_counter(), b.cpu_s()
                    lat = latency(
                        "latency_sweep",
                        b.bootstrap,
                        topics[b.name],
                        args.acks,
                        int(rate * args.seconds),
                        rate,
                    )
                    wall = time.perf_counter() - wall0
                    runs.append(
                        {
                            "rate": rate,
                            "broker": b.name,
                            "p50_ms": lat[0],
                            "p99_ms": lat[1],
                            "p999_ms": lat[2],
                            "client_cores": (time.process_time() - cpu0) / wall,
                            "broker_cores": (b.cpu_s() - broker0) / wall,
                            "load": os.getloadavg()[0],
                        }
                    )
            for b in brokers:
                mine = [r for r in runs if r["rate"] == rate and r["broker"] == b.name]

                def med(key: str, rs: list[dict[str, Any]] = mine) -> float:
                    return statistics.median(r[key] for r in rs)

                p99 = [r["p99_ms"] for r in mine]
                print(
                    f"rate {rate:>7,} msg/s  {b.name:<13} p50 {med('p50_ms'):6.2f}  p99 {med('p99_ms'):6.2f} "
                    f"({min(p99):.2f}-{max(p99):.2f})  p99.9 {med('p999_ms'):6.2f} ms;  client "
                    f"{med('client_cores'):.2f} cores, broker {med('broker_cores'):.2f} cores, "
                    f"load {med('load'):.1f}",
                    flush=True,
                )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                "acks": args.acks,
                "seconds": args.seconds,
                "runs": runs,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"latency_sweep: every run in {RESULTS}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
