"""Benchmark section "transactions": transactional produce against idempotent produce, and read_committed
fetch against read_uncommitted, on one broker process, all in the same run.

Produce: a real librdkafka producer (confluent-kafka) with the settings of :mod:`.kafka_load` (100 B values,
4-byte keys, linger 5 ms, 1 MiB batches, uncompressed), ``enable.idempotence=true`` (acks=all), to a topic of 4
partitions. Three loads of N messages each, measured in turns (idempotent, 10k per transaction, 1k per
transaction, repeated), so a slow moment of the machine hits all three alike:

* idempotent, no transaction;
* transactional, one transaction per 10,000 messages (begin, produce, commit);
* transactional, one transaction per 1,000 messages.

Each figure is messages per second from the first ``produce()`` to the last delivery report (transactional: to
the last commit's return), after one warm-up message (connections, metadata and the producer id are not
timed); the ratios are of the medians (target >= 0.8 for both).

Fetch: a confluent-kafka consumer (``assign`` from offset 0, no group) reads the whole committed transactional
topic (no aborts: the data read_committed has to check for aborted transactions, yet drops nothing), in turns
with ``isolation.level=read_committed`` and ``read_uncommitted``; messages per second until the last one
arrived; ratio of the medians (target >= 0.9).

N is 200,000, 3 repeats (quick mode: 5,000, one run).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from jobs.bench.common import Figure, Result
from jobs.bench.kafka_load import VALUE

__all__ = ["run"]

SECTION = "transactions"
PARTITIONS = 4
_KEYS = [i.to_bytes(4, "big") for i in range(1024)]


def _producer(bootstrap: str, transactional_id: str | None) -> Any:
    from confluent_kafka import Producer

    conf = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "message.max.bytes": 1 << 24,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000,
        "partitioner": "murmur2_random",
    }
    if transactional_id is not None:
        conf["transactional.id"] = transactional_id
    return Producer(conf)


def _produce(bootstrap: str, topic: str, n: int, per_txn: int | None, txn_id: str) -> float:
    """Messages per second for ``n`` messages; ``per_txn`` messages per transaction, None: not transactional."""
    p = _producer(bootstrap, None if per_txn is None else txn_id)
    if per_txn is not None:
        p.init_transactions(60)
    failures: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)

    # Connections, metadata and the producer id come before the clock starts, for all three loads alike.
    if per_txn is not None:
        p.begin_transaction()
    p.produce("warm", VALUE, _KEYS[0])
    if per_txn is not None:
        p.commit_transaction(60)
    p.flush(60)
    produce = p.produce
    t0 = time.perf_counter()
    for start in range(0, n, per_txn or n):
        if per_txn is not None:
            p.begin_transaction()
        for i in range(start, min(n, start + (per_txn or n))):
            try:
                produce(topic, VALUE, _KEYS[i & 1023], on_delivery=on_delivery)
            except BufferError:
                p.poll(0.01)
                produce(topic, VALUE, _KEYS[i & 1023], on_delivery=on_delivery)
            if i & 0xFFFF == 0:
                p.poll(0)
        if per_txn is not None:
            p.commit_transaction(120)  # flushes this transaction's messages first
    remaining = p.flush(120)
    elapsed = time.perf_counter() - t0
    if remaining or failures:
        raise RuntimeError(
            f"{SECTION} benchmark ({topic}, per transaction {per_txn}): {remaining} undelivered, "
            f"{len(failures)} failed deliveries, first: {failures[:1]}"
        )
    return n / elapsed


def _consume(bootstrap: str, topic: str, n: int, isolation: str) -> float:
    """Messages per second reading the ``n`` messages of ``topic`` from offset 0 with ``isolation``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 8 << 20,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = 0
        t0 = time.perf_counter()
        deadline = t0 + 300
        while got < n:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{SECTION} benchmark: {isolation} read {got} of {n} messages in 300 s")
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is None:
                    got += 1
        return n / (time.perf_counter() - t0)
    finally:
        consumer.close()


def _figure(rates: list[float]) -> Figure:
    return Figure(statistics.median(rates), min(rates), max(rates))


def _in_turns(repeat: int, loads: dict[str, Callable[[int], float]]) -> dict[str, Figure]:
    rates: dict[str, list[float]] = {name: [] for name in loads}
    for run in range(repeat):
        for name, load in loads.items():
            rates[name].append(load(run))
    return {name: _figure(r) for name, r in rates.items()}


def run(quick: bool) -> list[Result]:
    from broker_runtime.launch import broker_process, create_topic

    n = 5_000 if quick else 200_000
    repeat = 1 if quick else 3
    with (
        tempfile.TemporaryDirectory(prefix="pylog-bench-") as data,
        broker_process(data) as bootstrap,
    ):
        for topic in ("warm", "idem", "txn10k", "txn1k"):
            create_topic(bootstrap, topic, PARTITIONS)
        _produce(bootstrap, "warm", min(n, 20_000), None, "")  # connections, metadata, page cache
        _produce(bootstrap, "warm", min(n, 20_000), 1_000, "bench-warm")
        produced = _in_turns(
            repeat,
            {
                "idempotent": lambda r: _produce(bootstrap, "idem", n, None, ""),
                "per 10k": lambda r: _produce(bootstrap, "txn10k", n, 10_000, f"bench-10k-{r}"),
                "per 1k": lambda r: _produce(bootstrap, "txn1k", n, 1_000, f"bench-1k-{r}"),
            },
        )
        # txn10k now holds repeat * n committed transactional messages and no aborted transaction.
        total = repeat * n
        _consume(bootstrap, "txn10k", total, "read_uncommitted")  # page cache
        fetched = _in_turns(
            repeat,
            {
                "read_uncommitted": lambda r: _consume(bootstrap, "txn10k", total, "read_uncommitted"),
                "read_committed": lambda r: _consume(bootstrap, "txn10k", total, "read_committed"),
            },
        )
    idem, t10k, t1k = produced["idempotent"], produced["per 10k"], produced["per 1k"]
    ratio_10k, ratio_1k = t10k.value / idem.value, t1k.value / idem.value
    ru, rc = fetched["read_uncommitted"], fetched["read_committed"]
    ratio_read = rc.value / ru.value
    return [
        Result.measured(SECTION, f"idempotent produce, acks=all ({n:,} msgs of 100 B)", idem, "msg/s"),
        Result.measured(SECTION, "transactional produce, 1 transaction per 10k msgs", t10k, "msg/s"),
        Result.measured(SECTION, "transactional produce, 1 transaction per 1k msgs", t1k, "msg/s"),
        Result(
            SECTION, "ratio transactional (per 10k) / idempotent", ratio_10k, "x", ">= 0.8", ratio_10k >= 0.8
        ),
        Result(
            SECTION, "ratio transactional (per 1k) / idempotent", ratio_1k, "x", ">= 0.8", ratio_1k >= 0.8
        ),
        Result.measured(SECTION, f"fetch read_uncommitted ({total:,} committed msgs)", ru, "msg/s"),
        Result.measured(SECTION, "fetch read_committed, same data (no aborts)", rc, "msg/s"),
        Result(
            SECTION, "ratio read_committed / read_uncommitted", ratio_read, "x", ">= 0.9", ratio_read >= 0.9
        ),
    ]
