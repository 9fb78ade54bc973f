"""The web console end to end in a real headless chromium: one pylog broker holding known data
(:mod:`jobs.console.demo`, written with pylog's client), the console serving it, and a browser clicking through
the pages: cluster, topic -> partition -> record, seek by timestamp, hostile record contents shown as text,
transaction markers and aborted records, a group's lag dropping after its consumer commits, an open transaction
flagged then gone after its commit; with --allow-writes, an empty group's offsets reset after a confirmation page
(a group with members refused with Kafka's tool's message); and the same pages on Apache Kafka, deleting records
there too. Screenshots of each page are kept under
the test run's temporary directory (``console-screenshots*``)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.client.router import COORDINATOR_ERRORS
from broker_runtime.console.server import ConsoleServer
from broker_runtime.errors import KafkaError
from jobs.console.demo import DemoData, open_transaction, write_demo_data
from tests.support.brokers import start_broker
from tests.support.cluster import wait_for
from tests.support.console_forms import csrf_token, get, post

pytestmark = pytest.mark.timeout(120)
#: The compatibility matrix's peer of the Apache Kafka test below.
PEER = "kafka-broker"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, DemoData]]:
    broker = start_broker(tmp_path_factory.mktemp("console"), {"group.initial.rebalance.delay.ms": "0"})
    try:
        with KafkaClient(broker.bootstrap) as client:
            data = write_demo_data(client)
        yield broker.bootstrap, data
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def console(cluster: tuple[str, DemoData]) -> Iterator[str]:
    with ConsoleServer(cluster[0]) as server:
        yield server.url.rstrip("/")


@pytest.fixture(scope="module")
def writes_console(cluster: tuple[str, DemoData]) -> Iterator[str]:
    with ConsoleServer(cluster[0], allow_writes=True) as server:
        yield server.url.rstrip("/")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-screenshots")


def _by(kind: str) -> Any:
    from selenium.webdriver.common.by import By

    return getattr(By, kind)


def _cells(browser: Any, table_id: str) -> list[list[str]]:
    rows = browser.find_elements(_by("CSS_SELECTOR"), f"#{table_id} tbody tr")
    return [[td.text for td in row.find_elements(_by("TAG_NAME"), "td")] for row in rows]


def _no_error(browser: Any) -> None:
    errors = browser.find_elements(_by("ID"), "error")
    assert not errors, errors[0].text


def _until(check: Any, browser: Any, what: str, timeout_s: float = 10.0) -> None:
    """Reload until ``check()`` holds (the cluster changes asynchronously: markers, commits)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not seen within {timeout_s} s"
        time.sleep(0.1)
        browser.refresh()


def test_cluster_page(browser: Any, console: str, shots: Path) -> None:
    browser.get(console + "/")
    _no_error(browser)
    assert browser.find_element(_by("ID"), "controller").text == "0"
    brokers = _cells(browser, "brokers")
    assert len(brokers) == 1 and brokers[0][0] == "0" and brokers[0][4] == "controller"
    assert brokers[0][5].startswith("PLAINTEXT://127.0.0.1:"), brokers  # its listeners (DescribeConfigs)
    apis = {row[0] for row in _cells(browser, "versions")}
    assert {"FETCH", "LIST_OFFSETS", "DESCRIBE_PRODUCERS"} <= apis
    browser.save_screenshot(str(shots / "cluster.png"))


def test_click_topic_partition_record(browser: Any, console: str, shots: Path) -> None:
    browser.get(console + "/topics")
    assert {"orders", "payments"} <= {row[0] for row in _cells(browser, "topics")}
    browser.save_screenshot(str(shots / "topics.png"))
    browser.find_element(_by("LINK_TEXT"), "orders").click()
    partitions = _cells(browser, "partitions")
    # partition, leader, replicas, ISR, log start, high watermark, last stable offset
    assert partitions[0][:7] == ["0", "0", "0", "0", "0", "10", "10"], partitions
    assert partitions[1][5] == "3"
    # size on disk (DescribeLogDirs): ten JSON records with headers in one batch, three odd ones in another
    assert [row[7].split(" ")[1] for row in partitions] == ["B", "B"] and int(
        partitions[0][7].split()[0]
    ) > 300
    configs = {row[0]: row[1] for row in _cells(browser, "configs")}
    assert "cleanup.policy" in configs and "retention.ms" in configs
    browser.save_screenshot(str(shots / "topic.png"))
    browser.find_element(_by("LINK_TEXT"), "0").click()
    records = _cells(browser, "records")
    assert [row[0] for row in records] == [str(i) for i in range(10)]
    offset3 = records[3]
    assert "order-3" in offset3[2] and '"amount": 35' in offset3[3] and "json" in offset3[3]
    assert "source: demo" in offset3[4]
    browser.save_screenshot(str(shots / "records.png"))


def test_seek_by_timestamp(browser: Any, console: str, cluster: tuple[str, DemoData]) -> None:
    data = cluster[1]
    browser.get(console + "/topics/orders/0")
    when = datetime.datetime.fromtimestamp((data.base_ms + 6000) / 1000, datetime.UTC)
    browser.find_element(_by("ID"), "timestamp").send_keys(when.strftime("%Y-%m-%dT%H:%M:%SZ"))
    browser.find_element(_by("ID"), "go").click()
    _no_error(browser)
    assert browser.find_element(_by("ID"), "page-start").text == "6"
    assert [row[0] for row in _cells(browser, "records")] == ["6", "7", "8", "9"]
    assert "-> offset 6" in browser.find_element(_by("ID"), "seek-note").text


def test_filter_by_key_or_value_substring_is_bounded_and_says_where_it_stopped(
    browser: Any, console: str, shots: Path
) -> None:
    browser.get(console + "/topics/orders/0")
    browser.find_element(_by("ID"), "filter").send_keys("order-7")
    browser.find_element(_by("ID"), "go").click()
    _no_error(browser)
    assert [row[0] for row in _cells(browser, "records")] == ["7"]
    note = browser.find_element(_by("ID"), "scan-note")
    assert note.get_attribute("data-reason") == "end" and "scanned offsets 0 to 9" in note.text, note.text
    browser.save_screenshot(str(shots / "filter.png"))
    # The value's bytes match too; the aborted transaction's batch (over 1 KiB) lies past a 1 KiB scan's first
    # Fetch: the scan takes it whole (a Fetch returns at least one batch), then stops short of the ABORT marker.
    browser.get(console + '/topics/payments/0?filter="paid": -&max_bytes=1024&scan_bytes=1024')
    _no_error(browser)
    marks = [(row[0], row[5].split(" pid")[0]) for row in _cells(browser, "records")]
    assert marks == [("4", "aborted"), ("5", "aborted")], marks
    note = browser.find_element(_by("ID"), "scan-note")
    assert note.get_attribute("data-reason") == "bytes", note.text
    assert "STOPPED SHORT" in note.text and "offsets from 6 on are not searched" in note.text, note.text
    browser.find_element(_by("CLASS_NAME"), "next").click()
    assert browser.find_element(_by("ID"), "page-start").text == "6"
    assert (
        _cells(browser, "records") == []
        and "reached the end" in browser.find_element(_by("ID"), "scan-note").text
    )


def test_hostile_record_contents_are_shown_as_text(browser: Any, console: str) -> None:
    browser.get(console + "/topics/orders/1")
    _no_error(browser)
    for planted in ("xss-value", "xss-key", "xss-header"):
        assert browser.find_elements(_by("ID"), planted) == [], (
            f"markup from the log became an element: {planted}"
        )
    assert browser.title != "owned"
    rows = _cells(browser, "records")
    assert "<script>document.title='owned'</script>" in rows[0][3]
    assert '<b id="xss-key">key</b>' in rows[0][2]
    assert '<i id="xss-header">h</i>' in rows[0][4]
    assert "hex" in rows[1][3] and "00 11 22" in rows[1][3]
    assert "null" in rows[2][3]


def test_transaction_markers_and_aborted_records(browser: Any, console: str, shots: Path) -> None:
    browser.get(console + "/topics/payments/0")
    rows = _cells(browser, "records")
    marks = [(row[0], row[5].split(" pid")[0]) for row in rows]
    assert marks == [
        ("0", "committed"),
        ("1", "committed"),
        ("2", "committed"),
        ("3", "COMMIT marker"),
        ("4", "aborted"),
        ("5", "aborted"),
        ("6", "ABORT marker"),
    ], marks
    # A page too small for the ABORT marker: the outcome comes from Fetch's aborted-transactions list.
    browser.get(console + "/topics/payments/0?offset=4&max_bytes=1024")
    marks = [(row[0], row[5].split(" pid")[0]) for row in _cells(browser, "records")]
    assert marks == [("4", "aborted"), ("5", "aborted")], marks
    browser.get(console + "/topics/payments/0?isolation=read_committed")
    shown = [row[0] for row in _cells(browser, "records")]
    assert shown == ["0", "1", "2", "3", "6"], shown  # the aborted records are not read_committed's


def test_group_lag_drops_after_the_consumer_commits(
    browser: Any, console: str, cluster: tuple[str, DemoData], shots: Path
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": cluster[0],
            "group.id": "billing",
            "client.id": "billing-app",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(["orders"])
        deadline = time.monotonic() + 20
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer got no assignment"
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition("orders", 0, 4)], asynchronous=False)
        browser.get(console + "/groups")
        assert ["billing", "consumer", "Stable"] in _cells(browser, "groups")
        browser.find_element(_by("LINK_TEXT"), "billing").click()
        members = _cells(browser, "members")
        assert len(members) == 1 and members[0][1] == "billing-app" and "orders-0" in members[0][3]
        lag = {(row[0], row[1]): row[4] for row in _cells(browser, "offsets")}
        assert lag[("orders", "0")] == "6", lag
        browser.save_screenshot(str(shots / "group.png"))
        consumer.commit(offsets=[TopicPartition("orders", 0, 10)], asynchronous=False)
        browser.refresh()
        lag = {(row[0], row[1]): row[4] for row in _cells(browser, "offsets")}
        assert lag[("orders", "0")] == "0", lag
    finally:
        consumer.close()


def test_open_transaction_flagged_then_gone_after_commit(
    browser: Any, console: str, cluster: tuple[str, DemoData], shots: Path
) -> None:
    with KafkaClient(cluster[0]) as client:
        pid, epoch = open_transaction(client, "console-open", "payments", 0)
        browser.get(console + "/transactions")
        _no_error(browser)
        txns = {row[0]: row for row in _cells(browser, "transactions")}
        assert txns["console-open"][1] == "Ongoing" and txns["console-open"][6] == "payments-0", txns
        opens = [row for row in _cells(browser, "open-transactions") if row[2] == str(pid)]
        assert len(opens) == 1 and opens[0][4] == "console-open" and opens[0][7] == "open", opens
        browser.save_screenshot(str(shots / "transactions.png"))
        client.transactions.end_txn("console-open", pid, epoch, True)

    def gone() -> bool:
        return not [row for row in _cells(browser, "open-transactions") if row[2] == str(pid)]

    _until(gone, browser, "the committed transaction left the open ones")
    txns = {row[0]: row for row in _cells(browser, "transactions")}
    assert txns["console-open"][1] == "CompleteCommit", txns


def test_reset_offsets_of_an_empty_group_after_confirmation(
    browser: Any, writes_console: str, cluster: tuple[str, DemoData], shots: Path
) -> None:
    from selenium.webdriver.support.ui import Select

    with KafkaClient(cluster[0]) as client:
        client.groups.commit_offsets("replay", {("orders", 0): 10, ("orders", 1): 3})
    browser.get(writes_console + "/groups/replay")
    _no_error(browser)
    lag = {(row[0], row[1]): row[4] for row in _cells(browser, "offsets")}
    assert lag == {("orders", "0"): "0", ("orders", "1"): "0"}, lag
    assert browser.find_element(_by("ID"), "reset-topic").get_attribute("value") == "orders"
    Select(browser.find_element(_by("ID"), "reset-to")).select_by_value("earliest")
    browser.find_element(_by("ID"), "reset-preview").click()
    _no_error(browser)
    assert _cells(browser, "plan") == [["orders", "0", "10", "0", ""], ["orders", "1", "3", "0", ""]]
    assert browser.find_element(_by("ID"), "state").text == "Empty"
    browser.save_screenshot(str(shots / "reset-confirm.png"))
    with KafkaClient(cluster[0]) as client:
        assert client.groups.committed_offsets("replay")[("orders", 0)] == 10  # the preview changed nothing
    browser.find_element(_by("ID"), "confirm").click()
    _no_error(browser)
    assert "orders-0 -> 0" in browser.find_element(_by("ID"), "done").text
    browser.find_element(_by("CLASS_NAME"), "back").click()
    lag = {(row[0], row[1]): row[4] for row in _cells(browser, "offsets")}
    assert lag == {("orders", "0"): "10", ("orders", "1"): "3"}, lag


def test_a_group_with_members_is_not_reset(writes_console: str, cluster: tuple[str, DemoData]) -> None:
    """As kafka-consumer-groups --reset-offsets: refused with its message while the group has active members,
    at the preview and at the confirmation alike; nothing is committed."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": cluster[0], "group.id": "busy", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe(["payments"])
        deadline = time.monotonic() + 20
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer got no assignment"
            consumer.poll(0.2)
        url = writes_console + "/groups/busy/reset-offsets"
        token = csrf_token(get(writes_console + "/groups/busy")[1])
        fields: dict[str, object] = {"csrf_token": token, "topic": "payments", "to": "earliest"}
        for extra in ({}, {"plan": "0:0", "confirm": "yes"}):
            status, body = post(url, {**fields, **extra})
            assert status == 409, (status, body[-400:])
            assert (
                "Assignments can only be reset if the group &#x27;busy&#x27; is inactive, but the current "
                "state is Stable." in body
            ), body[-400:]
    finally:
        consumer.close()


@pytest.mark.compat(PEER, "web console")
def test_the_same_pages_on_apache_kafka(browser: Any, apache_kafka: Any, shots: Path) -> None:
    with KafkaClient(apache_kafka.bootstrap) as client:
        client.admin.create_topics({"console-peer": (1, 1)})
        client.partitions_for("console-peer")
        from broker_runtime.protocol.records import RecordBatchBuilder

        batch = RecordBatchBuilder()
        for i in range(3):
            batch.append(1_700_000_000_000 + i, f"k{i}".encode(), f'{{"n": {i}}}'.encode())
        client.produce(
            client.leader_for("console-peer", 0),
            {("console-peer", 0): batch.build()},
            acks=-1,
            timeout_ms=10000,
        )

        def committed() -> bool:  # a new Kafka cluster moves and loads its group coordinator
            try:  # while it creates __consumer_offsets
                client.groups.commit_offsets("console-peer-group", {("console-peer", 0): 1})
            except KafkaError as exc:
                if exc.code not in COORDINATOR_ERRORS:
                    raise
                return False
            return True

        wait_for(committed, 30, "a commit to Apache Kafka's group coordinator")
    with ConsoleServer(apache_kafka.bootstrap, allow_writes=True) as server:
        url = server.url.rstrip("/")
        browser.get(url + "/")
        _no_error(browser)
        brokers = _cells(browser, "brokers")
        assert len(brokers) == 1 and "://" in brokers[0][5], brokers  # listeners from Kafka's DescribeConfigs
        browser.get(url + "/topics")
        browser.find_element(_by("LINK_TEXT"), "console-peer").click()
        _no_error(browser)
        partitions = _cells(browser, "partitions")
        assert partitions[0][4:7] == ["0", "3", "3"] and partitions[0][7].endswith(" B"), partitions
        browser.find_element(_by("LINK_TEXT"), "0").click()
        records = _cells(browser, "records")
        assert [row[0] for row in records] == ["0", "1", "2"] and '"n": 2' in records[2][3]
        browser.save_screenshot(str(shots / "apache-kafka-records.png"))
        browser.get(url + "/groups/console-peer-group")
        _no_error(browser)
        lag = {(row[0], row[1]): row[4] for row in _cells(browser, "offsets")}
        assert lag[("console-peer", "0")] == "2", lag
        browser.get(url + "/transactions")
        _no_error(browser)
        # an action on Apache Kafka: delete the records before offset 1 (DeleteRecords), after the confirmation
        token = csrf_token(get(url + "/topics/console-peer")[1])
        fields = {"csrf_token": token, "partition": 0, "before": 1}
        status, confirm = post(url + "/topics/console-peer/delete-records", fields)
        assert status == 200 and "offsets 0 to 0 (1 offsets)" in confirm, confirm[-400:]
        status, done = post(url + "/topics/console-peer/delete-records", {**fields, "confirm": "yes"})
        assert status == 200 and "is now 1" in done, done[-400:]
        browser.get(url + "/topics/console-peer")
        assert _cells(browser, "partitions")[0][4:6] == ["1", "3"]


def test_topic_page_draws_the_live_chart(browser: Any, cluster: tuple[str, DemoData], shots: Path) -> None:
    """The chart's same-origin script runs under the page's CSP and draws the JSON as SVG polylines."""
    with ConsoleServer(cluster[0], chart_interval_s=0.2) as server:
        browser.get(server.url + "topics/orders")
        _no_error(browser)
        chart = browser.find_element(_by("ID"), "chart")
        deadline = time.monotonic() + 10
        while int(chart.get_attribute("data-samples") or 0) < 1:
            assert time.monotonic() < deadline, "the chart drew no sample within 10 s"
            time.sleep(0.1)
        line = chart.find_element(_by("CSS_SELECTOR"), "svg.records polyline.records-in")
        assert line.get_attribute("points"), line.get_attribute("outerHTML")
        assert "records in" in chart.find_element(_by("CSS_SELECTOR"), ".legend").text
        browser.save_screenshot(str(shots / "topic-chart.png"))
