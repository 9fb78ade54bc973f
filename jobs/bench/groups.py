"""Benchmark section "groups": the group coordinator seen from librdkafka (confluent-kafka), on one broker process.

* Rebalance time: three members of a group consume a 6-partition topic with librdkafka's default settings
  (``session.timeout.ms`` 45 s, ``heartbeat.interval.ms`` 3 s, the ``range,roundrobin`` assignors); once all
  three hold partitions, one closes (LeaveGroup). Timed from the start of ``close()`` until the two others hold
  all 6 partitions between them (their ``on_assign`` callbacks, polled every 10 ms). The others learn of the
  rebalance from their next heartbeat, so this is bounded below by chance within ``heartbeat.interval.ms``.
  The median of 5 (quick: 1), target none (Kafka's own figure is the same heartbeat-bound wait).
  The same with ``group.protocol=consumer`` (KIP-848): the broker computes the assignment and tells each member at
  its next ConsumerGroupHeartbeat, every ``group.consumer.heartbeat.interval.ms`` (Kafka's default 5 s; quick:
  500 ms, to keep the smoke run short); librdkafka's callbacks there are incremental (the partitions added or
  revoked).
* Commit throughput: one member of a group commits one partition's offset synchronously in a loop
  (``commit(offsets=..., asynchronous=False)``); commits per second. Each commit is one append and one fsync of
  the group's ``__consumer_offsets`` partition before the answer. 2,000 commits, 3 runs (quick: 50, one).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from jobs.bench.common import Result, Timing

__all__ = ["run"]

SECTION = "groups"
PARTITIONS = 6


def _member(bootstrap: str, group: str, owned: dict[int, int], index: int, protocol: str = "classic") -> Any:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "group.protocol": protocol,
        }
    )
    # classic (eager range,roundrobin): a callback names the whole assignment; consumer: the partitions added or
    # revoked
    incremental = protocol == "consumer"

    def on_assign(c: Any, parts: list[Any]) -> None:
        owned[index] = (owned.get(index, 0) if incremental else 0) + len(parts)

    def on_revoke(c: Any, parts: list[Any]) -> None:
        owned[index] = owned.get(index, 0) - len(parts) if incremental else 0

    consumer.subscribe(["bench-groups"], on_assign=on_assign, on_revoke=on_revoke)
    return consumer


def _poll_until(members: dict[int, Any], owned: dict[int, int], done: Any, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        for m in members.values():
            m.poll(0.01)
    if not done():
        raise RuntimeError(f"the group did not settle within {timeout_s} s: {owned}")


def _rebalance_times(bootstrap: str, repeat: int, protocol: str = "classic") -> list[float]:
    owned: dict[int, int] = {}
    group = f"bench-rebalance-{protocol}"
    members = {i: _member(bootstrap, group, owned, i, protocol) for i in range(3)}
    times = []
    try:
        for r in range(repeat):
            _poll_until(members, owned, lambda: len(members) == 3 and all(owned.get(i, 0) for i in members))
            leaving = min(members)
            t0 = time.perf_counter()
            members.pop(leaving).close()
            owned.pop(leaving, None)
            _poll_until(members, owned, lambda: sum(owned.get(i, 0) for i in members) == PARTITIONS)
            times.append(time.perf_counter() - t0)
            new = max(members) + 1 + r
            members[new] = _member(bootstrap, group, owned, new, protocol)
    finally:
        for m in members.values():
            m.close()
    return times


def _commit_rate(bootstrap: str, commits: int, repeat: int) -> Timing:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-commits", "auto.offset.reset": "earliest"}
    )
    owned: dict[int, int] = {}
    consumer.subscribe(["bench-groups"], on_assign=lambda c, parts: owned.__setitem__(0, len(parts)))
    try:
        _poll_until({0: consumer}, owned, lambda: owned.get(0) == PARTITIONS)
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for i in range(commits):
                consumer.commit(offsets=[TopicPartition("bench-groups", 0, i)], asynchronous=False)
            runs.append(time.perf_counter() - t0)
    finally:
        consumer.close()
    return Timing(tuple(runs))


def run(quick: bool) -> list[Result]:
    from broker_runtime.launch import broker_process, create_topic

    repeat = 1 if quick else 5
    commits = 50 if quick else 2_000
    with (
        tempfile.TemporaryDirectory(prefix="pylog-bench-") as data,
        broker_process(
            data,
            {
                "group.initial.rebalance.delay.ms": "0",
                "group.consumer.heartbeat.interval.ms": "500" if quick else "5000",
            },
        ) as bootstrap,
    ):
        create_topic(bootstrap, "bench-groups", PARTITIONS)
        rebalance = Timing(tuple(_rebalance_times(bootstrap, repeat)))
        rebalance848 = Timing(tuple(_rebalance_times(bootstrap, repeat, "consumer")))
        commit = _commit_rate(bootstrap, commits, 1 if quick else 3)
    return [
        Result.measured(
            SECTION, "rebalance of 3 members when one leaves (librdkafka defaults)", rebalance.scaled(1), "s"
        ),
        Result.measured(
            SECTION,
            "rebalance of 3 members when one leaves, group.protocol=consumer (KIP-848)",
            rebalance848.scaled(1),
            "s",
        ),
        Result.measured(
            SECTION, "synchronous offset commits from one consumer", commit.rate(commits), "commit/s"
        ),
    ]
