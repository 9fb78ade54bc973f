"""A streaming query's lag where operators look for it: a ``readStream.format("pylog")`` query with
``commitOffsetsToGroup=true`` commits its progress to ``kafka.group.id``, and Apache Kafka's
``kafka-consumer-groups``, ``pylog-broker consumer-groups`` and the broker's lag gauges (a real GET /metrics)
all show the same lag; once a running query catches up, the gauges drop to 0 (one query, so one start).

One in-process broker with its metrics endpoint, the suite's shared Spark session, the shared tool-runner JVM.
"""

from __future__ import annotations

import contextlib
import io
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.cli import main as pylog_broker
from broker_runtime.client import KafkaClient
from broker_runtime.launch import create_topic
from broker_runtime.protocol.records import RecordBatchBuilder
from tests.server.test_metrics import scrape
from tests.support.apache_kafka.tool_runner import ToolRunner
from tests.support.brokers import start_broker

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("apache_kafka_tools")]

PARTITIONS = 2
PER_PARTITION = 20
MORE = 5


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    instance = start_broker(tmp_path_factory.mktemp("lag"), {"pylog.metrics.listener": "127.0.0.1:0"})
    try:
        yield instance
    finally:
        instance.stop()


def _produce(bootstrap: str, topic: str, per_partition: int) -> None:
    with KafkaClient(bootstrap) as client:
        for p in range(PARTITIONS):
            batch = RecordBatchBuilder()
            for i in range(per_partition):
                batch.append(0, None, b"v%d" % i)
            client.produce(client.leader_for(topic, p), {(topic, p): batch.build()}, acks=-1, timeout_ms=5000)


def _lag_gauges(broker: Any, group: str) -> dict[int, float]:
    return {
        int(dict(labels)["partition"]): value
        for (name, labels), value in scrape(broker).items()
        if name == "kafka_consumergroup_group_lag" and dict(labels)["group"] == group
    }


def _rows(text: str, group: str) -> dict[int, tuple[str, str, str]]:
    """partition -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG) of a consumer-groups --describe table."""
    rows = [line.split() for line in text.splitlines() if line.split()[:1] == [group]]
    return {int(r[2]): (r[3], r[4], r[5]) for r in rows}


def _pylog_describe(bootstrap: str, group: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = pylog_broker(
            ["consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group]
        )
    assert status == 0
    return out.getvalue()


@pytest.mark.compat("kafka-tools", "kafka-consumer-groups: a Spark query's lag (commitOffsetsToGroup)")
def test_a_querys_group_lag_drops_to_zero_as_it_catches_up_and_shows_the_same_in_the_tools(
    spark: Any, broker: Any, apache_kafka_tool_runner: ToolRunner, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap
    topic, group = f"lag-{uuid.uuid4().hex[:6]}", f"query-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, PARTITIONS)
    _produce(bootstrap, topic, PER_PARTITION)
    query = (
        spark.readStream.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.group.id", group)
        .option("commitOffsetsToGroup", "true")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    # The trigger after a batch commits that batch's end (Spark tells a source a batch is done only then):
    # the group catches up and the gauges, read at scrape time, drop to 0.
    try:
        deadline = time.monotonic() + 60
        while (gauges := _lag_gauges(broker, group)) != dict.fromkeys(range(PARTITIONS), 0):
            assert time.monotonic() < deadline, f"the lag gauges did not drop to 0: {gauges}"
            time.sleep(0.1)
    finally:
        query.stop()
    # Records arriving while the query is stopped are its lag, the same in both tools and in the gauges.
    _produce(bootstrap, topic, MORE)
    behind = {p: (str(PER_PARTITION), str(PER_PARTITION + MORE), str(MORE)) for p in range(PARTITIONS)}
    kafka = apache_kafka_tool_runner.run(
        "kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group
    )
    assert _rows(kafka.stdout, group) == behind, kafka.stdout
    assert _rows(_pylog_describe(bootstrap, group), group) == behind
    assert _lag_gauges(broker, group) == dict.fromkeys(range(PARTITIONS), MORE)
