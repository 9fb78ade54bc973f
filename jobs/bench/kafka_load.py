"""Load generation with a real librdkafka producer (confluent-kafka), shared by the "broker" and "replication" sections.

Every message has a 100 B value and a 4-byte big-endian key; the producer lingers 5 ms (``linger_ms`` changes
it), batches up to 1 MiB, sends uncompressed (``compression_type="lz4"`` in the extra settings changes it) and
partitions with ``murmur2_random`` (Kafka's Java default).

* :func:`throughput`: messages per second from the first ``produce()`` to the last delivery report;
* :func:`latency`: the producer paced at a given rate in chunks of 100; per message, the time from
  ``produce()`` to its delivery report (linger included); p50 and p99 in milliseconds.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["VALUE", "latency", "producer", "throughput"]

VALUE = b"x" * 100
_KEYS = [i.to_bytes(4, "big") for i in range(1024)]
_CHUNK = 100


def producer(bootstrap: str, acks: str, linger_ms: int = 5, **extra: str) -> Any:
    """A confluent-kafka ``Producer`` with the settings every load in this module uses (plus ``extra``, e.g. the
    security settings; keys with ``_`` for ``.``)."""
    from confluent_kafka import Producer

    return Producer(
        {
            **{k.replace("_", "."): v for k, v in extra.items()},
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": linger_ms,
            "batch.size": 1 << 20,
            "message.max.bytes": 1 << 24,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "partitioner": "murmur2_random",
        }
    )


def throughput(
    section: str,
    bootstrap: str,
    topic: str,
    acks: str,
    n: int,
    *,
    client: Any = None,
    linger_ms: int = 5,
    **extra: str,
) -> float:
    """Produce ``n`` messages as fast as the client can; messages per second until the last delivery report.

    ``client``: a producer made by :func:`producer` (already connected, e.g. by a warm-up); by default a new one
    with ``linger_ms`` and ``extra``. Raises ``RuntimeError`` (naming ``section``, the topic and acks) if any
    message was not delivered.
    """
    p = producer(bootstrap, acks, linger_ms, **extra) if client is None else client
    produce = p.produce
    failures: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)

    t0 = time.perf_counter()
    for i in range(n):
        try:
            produce(topic, VALUE, _KEYS[i & 1023], on_delivery=on_delivery)
        except BufferError:
            p.poll(0.01)
            produce(topic, VALUE, _KEYS[i & 1023], on_delivery=on_delivery)
        if i & 0xFFFF == 0:
            p.poll(0)
    remaining = p.flush(120)
    elapsed = time.perf_counter() - t0
    if remaining or failures:
        raise RuntimeError(
            f"{section} benchmark ({topic}, acks={acks}): {remaining} undelivered, {len(failures)} failed "
            f"deliveries, first: {failures[:1]}"
        )
    return n / elapsed


def latency(
    section: str, bootstrap: str, topic: str, acks: str, n: int, rate: float, *, spin: bool
) -> tuple[float, float]:
    """Produce ``n`` messages paced at ``rate`` per second; (p50, p99) produce-to-delivery latency in ms.

    ``spin=True`` waits for each chunk's due time by spinning on ``poll(0)`` (the tightest pacing, for a
    client that has a core to itself); ``spin=False`` waits inside librdkafka (``poll(timeout)``), so the client
    does not take a core from broker processes on the same machine.
    """
    p = producer(bootstrap, acks)
    sent = [0.0] * n
    latencies: list[float] = []
    now = time.perf_counter

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            latencies.append(now() - sent[int.from_bytes(msg.key(), "big")])

    t0 = now()
    for start in range(0, n, _CHUNK):
        due = t0 + start / rate
        if spin:
            while now() < due:
                p.poll(0)
        else:
            while (left := due - now()) > 0:
                p.poll(left)
        for i in range(start, min(start + _CHUNK, n)):
            sent[i] = now()
            p.produce(topic, VALUE, i.to_bytes(4, "big"), on_delivery=on_delivery)
        p.poll(0)
    p.flush(120)
    latencies.sort()
    if not latencies:
        raise RuntimeError(f"{section} benchmark: no delivery reports in the latency run")
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return p50 * 1000, p99 * 1000
