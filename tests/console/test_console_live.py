"""The console's live chart data over plain HTTP (no browser): records and bytes in rise after a produce, a group's
records out after it commits; the sampled topics stay bounded; and the Spark-write provenance records shown on a
topic page (written here by the connector's own recording function; the Spark write itself is checked in
tests/connector/test_writer.py)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.console import rates
from broker_runtime.console.server import ConsoleServer
from broker_runtime.protocol.records import RecordBatchBuilder
from broker_runtime.protocol.spark_writes import TOPIC, SparkWrite
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(60)
#: The console's sampling interval here (5 s by default).
INTERVAL_S = 0.1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = start_broker(tmp_path_factory.mktemp("console-live"))
    try:
        with KafkaClient(broker.bootstrap) as client:
            client.admin.create_topics({"clicks": (2, 1)})
            client.partitions_for("clicks")
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def console(cluster: str) -> Iterator[str]:
    with ConsoleServer(cluster, chart_interval_s=INTERVAL_S) as server:
        yield server.url.rstrip("/")


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
        return json.loads(answer.read())


def _produce(client: KafkaClient, topic: str, partition: int, count: int) -> None:
    batch = RecordBatchBuilder()
    for i in range(count):
        batch.append(int(time.time() * 1000), None, b"click %d" % i)
    answer = client.produce(
        client.leader_for(topic, partition), {(topic, partition): batch.build()}, acks=-1, timeout_ms=5000
    )
    assert answer is not None and answer[(topic, partition)].error == 0


def _until(url: str, check: Any, what: str, timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        data = _json(url)
        if check(data):
            return data
        assert time.monotonic() < deadline, f"{what}: not seen within {timeout_s} s: {data}"
        time.sleep(0.1)


def test_chart_json_shows_records_and_bytes_in_rising_after_a_produce_and_a_groups_records_out(
    cluster: str, console: str
) -> None:
    url = console + "/rates/clicks"
    with KafkaClient(
        cluster
    ) as client:  # a consumer group of the topic, found by the first sample's discovery
        client.groups.commit_offsets("readers", {("clicks", 0): 0, ("clicks", 1): 0})
    first = _json(url)  # asking watches the topic and takes its first sample
    assert "readers" in first["totals"]["committed"], first
    assert first["totals"]["records_in"] == 0 and first["error"] is None, first
    with KafkaClient(cluster) as client:
        _produce(client, "clicks", 0, 7)
        _produce(client, "clicks", 1, 3)
        data = _until(
            url,
            lambda d: d["totals"]["records_in"] == 10 and any(r > 0 for _, r in d["records_in"]),
            "records in rising",
        )
        assert any(r > 0 for _, r in data["bytes_in"]), data  # the leaders' log sizes grew
        assert data["totals"]["bytes"] > 10 * len(b"click 0")
        client.groups.commit_offsets("readers", {("clicks", 0): 5, ("clicks", 1): 2})
    data = _until(
        url, lambda d: any(r > 0 for _, r in d["records_out"]["readers"]), "records out of group readers"
    )
    assert data["totals"]["committed"]["readers"] == 7


def test_sampled_topics_are_bounded(cluster: str) -> None:
    sampler = rates.Rates(0.2)
    for i in range(rates.MAX_WATCHED + 5):
        sampler.watch(f"topic-{i}")
    watched = sampler.watched()
    assert len(watched) == rates.MAX_WATCHED and watched[0] == "topic-5", watched
    with KafkaClient(cluster) as client:
        sampler.sample(client)  # unknown topics: their error is kept, nothing raised, no ring grows
    assert sampler.series("topic-9")["error"] and not sampler.has_samples("topic-9")


def test_topic_page_lists_the_recorded_spark_writes_of_that_topic(cluster: str, console: str) -> None:
    with urllib.request.urlopen(console + "/topics/clicks", timeout=30) as answer:
        page = answer.read().decode()
    assert (
        'id="spark-writes-none"' in page and TOPIC in page
    )  # nothing recorded yet: said, not an empty table
    assert 'data-rates="/rates/clicks"' in page and '<script src="/static/chart.js">' in page
    mine = SparkWrite(
        "write-abc",
        "stream",
        "query-1",
        4,
        "exactly-once",
        2,
        12,
        900,
        int(time.time() * 1000),
        (("clicks", 0, 7, 13, 7), ("clicks", 1, 3, 7, 5)),
    )
    other = SparkWrite("write-zzz", "batch", None, None, "idempotent", 1, 3, 90, 1, (("other", 0, 0, 2, 3),))
    with KafkaClient(cluster) as client:
        client.admin.create_topics({TOPIC: (1, 1)})
        client.partitions_for(TOPIC)
        batch = RecordBatchBuilder()
        for w in (mine, other):
            batch.append(w.committed_ms, w.write_id.encode(), w.to_value())
        batch.append(1, b"junk", b"<not json>")
        client.produce(client.leader_for(TOPIC, 0), {(TOPIC, 0): batch.build()}, acks=-1, timeout_ms=5000)
    with urllib.request.urlopen(console + "/topics/clicks", timeout=30) as answer:
        page = answer.read().decode()
    table = page.split('id="spark-writes"', 1)[1].split("</table>", 1)[0]
    assert "write-abc" in table and "write-zzz" not in table, table
    assert "query-1" in table and "exactly-once" in table
    assert '<td class="num">12</td>' in table  # rows of the whole write; here: 7 + 5
    assert "0@7..13, 1@3..7" in table
    assert "1 record(s) not readable" in page


def test_chart_script_is_served_same_origin(console: str, tmp_path: Path) -> None:
    with urllib.request.urlopen(console + "/static/chart.js", timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("text/javascript")
        body = answer.read().decode()
    assert "textContent" in body and "innerHTML" not in body
