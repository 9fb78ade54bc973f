"""Known data for the web console, written with pylog's client (Produce, transactions, a group's commits), and the
headless browser that looks at it: shared by the console's end-to-end tests (tests/console/) and the README's
screenshots (``bash jobs/dev.sh console-screenshots``, :mod:`jobs.console.screenshots`).

The data (:func:`write_demo_data`), on any Kafka-protocol cluster:

- ``orders``, 2 partitions: partition 0 holds 10 records, offset ``i`` with key ``order-i``, a JSON value
  ``{"order": i, "amount": ...}``, a header ``source: demo`` and the timestamp ``base_ms + i * 1000``; partition 1
  holds hostile records (a value ``<script>...`` and markup in a key and a header name), a binary value and a
  null value.
- ``payments``, 1 partition: a committed transaction (3 records, offsets 0-2, its COMMIT marker at 3), then an
  aborted one (2 records, offsets 4-5, its batch over 1 KiB, its ABORT marker at 6).

The browser (:func:`chromium_driver`): Debian's ``chromium`` driven through its ``chromium-driver`` by selenium,
headless, a fixed window; the caller quits it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.records import RecordBatchBuilder

__all__ = [
    "HOSTILE_VALUE",
    "DemoData",
    "chromium_driver",
    "open_transaction",
    "write_demo_data",
]

#: A record value a console must show as text: markup that would run or add elements if written unescaped.
HOSTILE_VALUE = b'<script>document.title=\'owned\'</script><img id="xss-value" src="x">'
HOSTILE_KEY = b'<b id="xss-key">key</b>'
HOSTILE_HEADER = '<i id="xss-header">h</i>'


@dataclass(frozen=True)
class DemoData:
    base_ms: int
    orders: str = "orders"
    payments: str = "payments"


def _produce(
    client: KafkaClient, topic: str, partition: int, batch: bytes, txn_id: str | None = None
) -> None:
    node = client.leader_for(topic, partition)
    answer = client.produce(
        node, {(topic, partition): batch}, acks=-1, timeout_ms=10000, transactional_id=txn_id
    )
    assert answer is not None
    result = answer[(topic, partition)]
    if result.error != ErrorCode.NONE:
        raise RuntimeError(f"produce to {topic}-{partition}: error {result.error} {result.error_message}")


def _create(client: KafkaClient, topics: dict[str, int]) -> None:
    codes = client.admin.create_topics({name: (n, -1) for name, n in topics.items()})
    for name, code in codes.items():
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise RuntimeError(f"create topic {name}: error {code}")
    for name in topics:
        client.partitions_for(name)


def _txn_batch(pid: int, epoch: int, seq: int, values: list[bytes], ts: int) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )
    for i, v in enumerate(values):
        builder.append(ts + i, None, v)
    return builder.build()


def open_transaction(client: KafkaClient, txn_id: str, topic: str, partition: int) -> tuple[int, int]:
    """Begin a transaction of ``txn_id`` holding one record on ``topic``/``partition``; its ``(pid, epoch)``
    (end it with ``client.transactions.end_txn``)."""
    pid, epoch = client.transactions.init_producer_id(txn_id, 60000)
    client.transactions.add_partitions_to_txn(txn_id, pid, epoch, [(topic, partition)])
    _produce(
        client, topic, partition, _txn_batch(pid, epoch, 0, [b"pending"], int(time.time() * 1000)), txn_id
    )
    return pid, epoch


def write_demo_data(client: KafkaClient) -> DemoData:
    """Write the data of the module docstring; returns its time base."""
    base_ms = (int(time.time()) - 3600) * 1000
    data = DemoData(base_ms)
    _create(client, {data.orders: 2, data.payments: 1})
    orders = RecordBatchBuilder()
    for i in range(10):
        value = json.dumps({"order": i, "amount": 10 * i + 5, "currency": "EUR"}).encode()
        orders.append(base_ms + i * 1000, f"order-{i}".encode(), value, [("source", b"demo")])
    _produce(client, data.orders, 0, orders.build())
    odd = RecordBatchBuilder()
    odd.append(base_ms, HOSTILE_KEY, HOSTILE_VALUE, [(HOSTILE_HEADER, b"<u>header value</u>")])
    odd.append(base_ms + 1, b"binary", bytes(range(0, 256, 17)))
    odd.append(base_ms + 2, b"tombstone", None)
    _produce(client, data.orders, 1, odd.build())
    for txn_id, values, commit in (
        ("demo-payments-ok", [b'{"paid": 1}', b'{"paid": 2}', b'{"paid": 3}'], True),
        # The aborted transaction's batch is over 1 KiB, so a 1 KiB page from offset 4 holds its batch
        # but not its ABORT marker (the page then learns the outcome from Fetch's aborted transactions).
        ("demo-payments-bad", [b'{"paid": -1, "note": "%s"}' % (b"x" * 1200), b'{"paid": -2}'], False),
    ):
        pid, epoch = client.transactions.init_producer_id(txn_id, 60000)
        client.transactions.add_partitions_to_txn(txn_id, pid, epoch, [(data.payments, 0)])
        _produce(client, data.payments, 0, _txn_batch(pid, epoch, 0, values, base_ms), txn_id)
        client.transactions.end_txn(txn_id, pid, epoch, commit)
    return data


def chromium_driver(browser: str, driver: str, width: int = 1280, height: int = 900) -> Any:
    """A headless chromium (``browser``) driven through ``driver`` (its chromedriver) by selenium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in CI and containers
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--no-first-run",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)
