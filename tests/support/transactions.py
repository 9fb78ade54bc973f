"""Set-ups the transaction tests share: a transactional librdkafka producer, the values a transaction wrote read
back at an isolation level, and a broker in this process whose transaction markers are held.

Holding markers: while the file named by the broker setting :data:`HOLD_MARKERS` exists, a single node's marker
writes fail, so a committed transaction stays in PrepareCommit until the file is gone and the coordinator's
periodic check (``transaction.abort.timed.out.transaction.cleanup.interval.ms``, or the test calling
``abort_timed_out()``) writes them. :func:`broker_holding_markers` starts such a broker; :func:`commit_held`
commits a transaction into that state.

Threading: called from the test's thread; the broker's handlers run on its own loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.brokers import start_broker

__all__ = [
    "HOLD_MARKERS",
    "broker_holding_markers",
    "commit_held",
    "read_values",
    "transactional_producer",
    "numbered_values",
]

#: The broker setting naming the file whose existence holds a single node's transaction markers (tests only).
HOLD_MARKERS = "pylog.test.transaction.markers.hold.file"


def transactional_producer(
    bootstrap: str, txn_id: str, timeout_ms: int = 60000, *, init_timeout_s: float = 30, **config: Any
) -> Producer:
    """A librdkafka producer of ``txn_id`` (``transaction.timeout.ms`` ``timeout_ms``, more settings in
    ``config`` with ``_`` for ``.``), its ``init_transactions`` done."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": timeout_ms,
            **{key.replace("_", "."): value for key, value in config.items()},
        }
    )
    producer.init_transactions(init_timeout_s)
    return producer


def numbered_values(prefix: str, n: int) -> list[bytes]:
    """``prefix-0`` ... ``prefix-(n-1)``."""
    return [f"{prefix}-{i}".encode() for i in range(n)]


def read_values(
    bootstrap: str,
    parts: list[tuple[str, int]],
    isolation: str,
    until: set[bytes] | None = None,
    *,
    wait_s: float = 3,
    deadline_s: float = 30,
) -> list[bytes]:
    """Every value of ``parts`` from offset 0 at ``isolation``: until ``until`` is all seen (and 0.5 s more, for
    what must not follow), at most ``deadline_s``; without ``until`` (or an empty one), what ``wait_s`` brings."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(t, p, 0) for t, p in parts])
    got: list[bytes] = []
    deadline = time.monotonic() + (deadline_s if until else wait_s)
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if until and until <= set(got):
                end = time.monotonic() + 0.5
                while time.monotonic() < end:
                    msg = consumer.poll(0.1)
                    if msg is not None and msg.error() is None:
                        got.append(msg.value())
                break
    finally:
        consumer.close()
    return got


@contextmanager
def broker_holding_markers(tmp_path: Path, settings: dict[str, str]) -> Iterator[tuple[Any, Path]]:
    """``(broker, hold)``: a broker in this process with ``settings``, its markers held while the file ``hold``
    exists (it does not yet); the file is removed and the broker stopped on exit."""
    hold = tmp_path / "hold-markers"
    broker = start_broker(tmp_path, {**settings, HOLD_MARKERS: str(hold)})
    try:
        yield broker, hold
    finally:
        hold.unlink(missing_ok=True)
        broker.stop()


def commit_held(broker: Any, hold: Path, topic: str, txn_id: str, **config: Any) -> tuple[Producer, Any]:
    """``(producer, metadata)``: ``txn_id``'s first transaction (one record, ``committed``, on partition 0 of
    ``topic``) committed with its markers held, so the coordinator's ``metadata`` is in PrepareCommit."""
    producer = transactional_producer(broker.bootstrap, txn_id, **config)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed", partition=0)
    producer.poll(0)
    hold.touch()
    producer.commit_transaction(30)  # answered with the markers still held: PrepareCommit
    meta = broker.ctx.txn_coordinator.metadata(txn_id)
    assert meta is not None and meta.in_prepare, meta
    return producer, meta
