"""Load generation with a real librdkafka producer (confluent-kafka), shared by the "broker", "replication" and
"egress" sections.

Every message has a 100 B value and a 4-byte big-endian key; the producer batches up to 1 MiB, sends
uncompressed (``compression_type="lz4"`` in the extra settings changes it) and partitions with
``murmur2_random`` (Kafka's Java default). Two configurations:

* throughput: ``linger.ms`` 5 (:data:`THROUGHPUT_LINGER_MS`), batches fill up;
* latency: ``linger.ms`` 1 (:data:`LATENCY_LINGER_MS`): every latency includes up to 1 ms the client chose
  to wait (with a linger of L ms, up to L ms by construction), the rest is the round trip (client queueing,
  network, broker, replication). Not 0: at half its maximum rate a linger-0 producer sends a request per few
  messages (about 7 in one measured run, where the maximum-rate run, backed up, sent many per request), so the
  paced run costs the broker more requests per message than the run it is paced from and saturates it -- what
  it measures is a queue, not a round trip. 1 ms keeps the paced run's requests near the maximum-rate run's.

Functions:

* :func:`throughput`: messages per second from the first ``produce()`` to the last delivery report;
* :func:`latency`: the producer (latency configuration) paced at a given rate in chunks of 100; per message,
  the time from ``produce()`` to its delivery report; p50, p99 and p99.9 in milliseconds (:class:`Latency`).
  The producer is warmed up first, unmeasured (:data:`WARMUP_MESSAGES` delivered): a new producer's first
  message waits for its bootstrap connection, the metadata and the connection to the leader (against pylog's
  broker, 11-27 at load 16: a median 7.0 ms over 8 new producers, 3.8-102 ms, where the next message took
  1.4-17 ms, median 1.6), and every message produced meanwhile waits with it. At 200k msg/s a start of W ms holds
  W x 200 messages, 1 % of a 100,000-message run per 5 ms, so a start of 15 ms alone gives such a run a p99 of
  about 10 ms and a p99.9 near 15 ms -- the shape of both brokers' unwarmed acks=1 rows of 11-27 (pylog
  p50 / p99 / p99.9 2.4 / 11.7 / 14.2 ms, Apache Kafka's node 1.3 / 10.6 / 15.0). The time to a first
  acknowledgement is a figure of its own ("start to first ack" in the anchors section);
* :func:`paced_latency`: the maximum rate of the latency configuration measured first (same topic, same
  acks), then :func:`latency` at half of it.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

__all__ = [
    "LATENCY_LINGER_MS",
    "THROUGHPUT_LINGER_MS",
    "WARMUP_MESSAGES",
    "VALUE",
    "Latency",
    "latency",
    "paced_latency",
    "producer",
    "throughput",
]

VALUE = b"x" * 100
_KEYS = [i.to_bytes(4, "big") for i in range(1024)]
_CHUNK = 100
#: linger.ms of the throughput runs.
THROUGHPUT_LINGER_MS = 5
#: linger.ms of the latency runs (and of the maximum-rate run they are paced from).
LATENCY_LINGER_MS = 1
#: Messages a latency run's producer delivers before its measured messages (see the module docstring).
WARMUP_MESSAGES = 1_000


class Latency(NamedTuple):
    """Produce-to-delivery latency percentiles of one paced run, in milliseconds."""

    p50: float
    p99: float
    p999: float


def producer(bootstrap: str, acks: str, linger_ms: int = THROUGHPUT_LINGER_MS, **extra: str) -> Any:
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
    linger_ms: int = THROUGHPUT_LINGER_MS,
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


def paced_latency(
    section: str, bootstrap: str, topic: str, acks: str, n: int, *, spin: bool = False
) -> tuple[float, Latency]:
    """(rate, latency): the latency configuration's maximum rate over ``n`` messages, then :func:`latency` of
    ``n`` more messages paced at half that rate."""
    rate = throughput(section, bootstrap, topic, acks, n, linger_ms=LATENCY_LINGER_MS) / 2
    return rate, latency(section, bootstrap, topic, acks, n, rate, spin=spin)


def latency(
    section: str, bootstrap: str, topic: str, acks: str, n: int, rate: float, *, spin: bool = False
) -> Latency:
    """Produce ``n`` messages paced at ``rate`` per second (``linger.ms`` :data:`LATENCY_LINGER_MS`); the
    produce-to-delivery latency percentiles in ms.

    ``spin=True`` waits for each chunk's due time by spinning on ``poll(0)`` (the tightest pacing, for a
    client that has a core to itself); ``spin=False`` waits inside librdkafka (``poll(timeout)``), so the client
    does not take a core from broker processes on the same machine.
    """
    p = producer(bootstrap, acks, LATENCY_LINGER_MS)
    for i in range(WARMUP_MESSAGES):
        p.produce(topic, VALUE, _KEYS[i & 1023])
    if p.flush(60):
        raise RuntimeError(
            f"{section} benchmark: the latency run's warm-up messages were not delivered in 60 s"
        )
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
    if len(latencies) < n:
        raise RuntimeError(f"{section} benchmark: {n - len(latencies)} of {n} messages not delivered")
    last = len(latencies) - 1
    return Latency(*(latencies[min(last, int(len(latencies) * q))] * 1000 for q in (0.5, 0.99, 0.999)))
