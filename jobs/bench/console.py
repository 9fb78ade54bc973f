"""Benchmark section "console": the web console's topic list of 1,000 topics (issue 37: "renders in under a
second").

One broker process holds 1,000 topics of one partition each (quick: 5 on a broker in this process, which starts
in a fraction of the time), created in batches of 250 with CreateTopics; the console (:class:`~broker_runtime.console.server.ConsoleServer`) runs in this process on a free
loopback port. Timed: one HTTP GET of ``/topics`` from ``urllib`` to its last byte, which is the console's whole
work for the page (one Metadata request for every topic, the model, the HTML, the answer):

* cold: a new console each run, so the GET also connects its Kafka client (ApiVersions, the first Metadata);
  the median of 5 runs (quick: 1);
* warm: the same console's next GETs; the median of 10 (quick: 2) after one discarded;
* render only: :func:`~broker_runtime.console.render.topics_page` of the same rows, no I/O (its share of a GET).

Targets: cold and warm under 1 s. The figures are the machine's at the time (on a loaded shared machine they
are upper bounds).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from jobs.bench.common import Result, Timing, timed

__all__ = ["run"]

SECTION = "console"
TOPICS = 1_000
QUICK_TOPICS = 5
BATCH = 250
TARGET_S = 1.0


def _create(bootstrap: str, count: int) -> None:
    from broker_runtime.client import KafkaClient

    names = [f"bench-console-{i:04d}" for i in range(count)]
    with KafkaClient(bootstrap, request_timeout_ms=120000) as client:
        for start in range(0, count, BATCH):
            chunk = names[start : start + BATCH]
            codes = client.admin.create_topics({n: (1, 1) for n in chunk}, timeout_ms=120000)
            failed = {n: c for n, c in codes.items() if c}
            if failed:
                raise RuntimeError(f"creating the benchmark's topics failed: {list(failed.items())[:3]}")
        # every topic is in the metadata before anything is timed
        deadline = time.monotonic() + 60
        while len([t for t in client.metadata(None).topics if t.startswith("bench-console-")]) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {count} topics did not all appear in the metadata within 60 s")
            time.sleep(0.1)


def _get(url: str, count: int) -> None:
    with urllib.request.urlopen(url, timeout=60) as answer:
        page = answer.read().decode()
    if answer.status != 200 or f"<p>{count + 1} topics" not in page and f"<p>{count} topics" not in page:
        raise RuntimeError(f"the topics page did not list the {count} topics: {page[-300:]}")


@contextlib.contextmanager
def _broker(data: str, quick: bool) -> Iterator[str]:
    if not quick:
        from broker_runtime.launch import broker_process

        with broker_process(data) as bootstrap:
            yield bootstrap
        return
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(Path(data) / "logs")}
    broker = Broker(BrokerConfig.from_properties(props)).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def run(quick: bool) -> list[Result]:
    from broker_runtime.client import KafkaClient
    from broker_runtime.console import model, render
    from broker_runtime.console.server import ConsoleServer

    count = QUICK_TOPICS if quick else TOPICS
    cold_runs, warm_runs = (1, 2) if quick else (5, 10)
    with (
        tempfile.TemporaryDirectory(prefix="pylog-bench-") as data,
        _broker(data, quick) as bootstrap,
    ):
        _create(bootstrap, count)
        cold = []
        for _ in range(cold_runs):
            with ConsoleServer(bootstrap) as server:
                t0 = time.perf_counter()
                _get(server.url + "topics", count)
                cold.append(time.perf_counter() - t0)
        with ConsoleServer(bootstrap) as server:
            warm = timed(lambda: _get(server.url + "topics", count), repeat=warm_runs, warmup=1)
        with KafkaClient(bootstrap) as client:
            rows = model.topics(client)
        rendered = timed(lambda: render.topics_page(rows), repeat=warm_runs, warmup=1)
    judged = not quick
    return [
        Result.measured(
            SECTION,
            f"GET /topics of {count} topics, cold (a new console)",
            Timing(tuple(cold)).scaled(1000),
            "ms",
            "< 1000 ms",
            (Timing(tuple(cold)).median < TARGET_S) if judged else None,
        ),
        Result.measured(
            SECTION,
            f"GET /topics of {count} topics, warm",
            warm.scaled(1000),
            "ms",
            "< 1000 ms",
            (warm.median < TARGET_S) if judged else None,
        ),
        Result.measured(
            SECTION, f"render of the {count}-topic page only (no I/O)", rendered.scaled(1000), "ms"
        ),
    ]
