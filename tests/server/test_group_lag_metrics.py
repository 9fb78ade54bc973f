"""The consumer-group lag gauges (:mod:`broker_runtime.server.group_lag`), read through a real GET /metrics.

A group commits through OffsetCommit (the admin facade's simple commit); the gauges show its committed offset
and the high watermark minus it, follow new records and new commits, drop to 0 when the group catches up and
vanish with the group. The cap on series holds with its WARNING and counter, and keeps the groups known first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.coordinator.group.state import CommittedOffset, Group, GroupState
from broker_runtime.launch import create_topic
from broker_runtime.protocol.records import RecordBatchBuilder
from broker_runtime.server.group_lag import GroupLagReader
from tests.server.test_metrics import scrape
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(60)

CAP = 4
OFFSET, LAG = "kafka_consumergroup_group_offset", "kafka_consumergroup_group_lag"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One broker for the module; each test deletes the groups it made."""
    instance = start_broker(
        tmp_path_factory.mktemp("lag"),
        {"pylog.metrics.listener": "127.0.0.1:0", "pylog.metrics.consumer.lag.max.partitions": str(CAP)},
    )
    try:
        yield instance
    finally:
        instance.stop()


def produce(client: KafkaClient, topic: str, partition: int, count: int) -> None:
    batch = RecordBatchBuilder()
    for i in range(count):
        batch.append(0, None, b"r%d" % i)
    client.produce(
        client.leader_for(topic, partition), {(topic, partition): batch.build()}, acks=-1, timeout_ms=5000
    )


def series(samples: dict[Any, float], name: str) -> dict[tuple[str, str, int], float]:
    """(group, topic, partition) -> value of one family's samples."""
    out = {}
    for (sample, labels), value in samples.items():
        if sample == name:
            got = dict(labels)
            out[(got["group"], got["topic"], int(got["partition"]))] = value
    return out


def test_lag_is_the_high_watermark_minus_the_committed_offset_and_drops_to_zero(broker: Any) -> None:
    create_topic(broker.bootstrap, "lagged", 2)
    with KafkaClient(broker.bootstrap) as client:
        produce(client, "lagged", 0, 10)
        produce(client, "lagged", 1, 4)
        assert series(scrape(broker), LAG) == {}  # no group, no series
        client.groups.commit_offsets("reader", {("lagged", 0): 3, ("lagged", 1): 4})
        first = scrape(broker)
        assert series(first, OFFSET) == {("reader", "lagged", 0): 3, ("reader", "lagged", 1): 4}
        assert series(first, LAG) == {("reader", "lagged", 0): 7, ("reader", "lagged", 1): 0}
        assert first[("pylog_consumergroup_lag_unknown_partitions", ())] == 0
        assert first[("pylog_consumergroup_lag_omitted_partitions", ())] == 0

        produce(client, "lagged", 1, 5)  # computed at scrape time: new records show without a commit
        assert series(scrape(broker), LAG)[("reader", "lagged", 1)] == 5

        client.groups.commit_offsets("reader", {("lagged", 0): 10, ("lagged", 1): 9})
        caught_up = scrape(broker)
        assert series(caught_up, LAG) == {("reader", "lagged", 0): 0, ("reader", "lagged", 1): 0}
        assert series(caught_up, OFFSET) == {("reader", "lagged", 0): 10, ("reader", "lagged", 1): 9}

        client.groups.delete_group("reader")
        gone = scrape(broker)
        assert series(gone, OFFSET) == {} and series(gone, LAG) == {}


def test_the_series_cap_warns_counts_and_keeps_the_groups_known_first(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    create_topic(broker.bootstrap, "wide", 6)
    with KafkaClient(broker.bootstrap) as client:
        client.groups.commit_offsets("zeta", {("wide", p): 0 for p in range(3)})
        client.groups.commit_offsets("alpha", {("wide", p): 0 for p in range(3)})
        try:
            with caplog.at_level(logging.WARNING, logger="broker_runtime.server.group_lag"):
                first = scrape(broker)
                second = scrape(broker)
        finally:
            client.groups.delete_group("zeta")
            client.groups.delete_group("alpha")
        assert scrape(broker)[("pylog_consumergroup_lag_omitted_partitions", ())] == 0
    kept = series(first, OFFSET)
    assert len(kept) == CAP
    assert {("zeta", "wide", p) for p in range(3)} <= set(
        kept
    )  # the group known first keeps all its series (not the first by name)
    assert first[("pylog_consumergroup_lag_omitted_partitions", ())] == 2
    assert first[("pylog_consumergroup_lag_truncated_scrapes_total", ())] == 1
    assert second[("pylog_consumergroup_lag_truncated_scrapes_total", ())] == 2
    warnings = [r for r in caplog.records if "pylog.metrics.consumer.lag.max.partitions" in r.getMessage()]
    assert len(warnings) == 1, "one WARNING per run of truncated scrapes, not one per scrape"


class _Replica:
    def __init__(self, hw: int) -> None:
        self.high_watermark = hw


def test_a_partition_without_a_local_replica_has_its_offset_and_no_lag() -> None:
    # A cluster's coordinator need not host the consumed partition: the reader is given no replica for it.
    group = Group("g", state=GroupState.EMPTY)
    group.offsets[("here", 0)] = CommittedOffset(5, -1, "", 0)
    group.offsets[("elsewhere", 0)] = CommittedOffset(2, -1, "", 0)
    dead = Group("dead", state=GroupState.DEAD)
    dead.offsets[("here", 0)] = CommittedOffset(1, -1, "", 0)
    replicas = {("here", 0): _Replica(8)}
    snap = GroupLagReader(10).read([group, dead], lambda t, p: replicas.get((t, p)))
    assert sorted(snap.rows) == [("g", "elsewhere", 0, 2, None), ("g", "here", 0, 5, 3)]
    assert snap.unknown == 1 and snap.omitted == 0
