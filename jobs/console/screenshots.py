"""The README's screenshots of the web console: ``bash jobs/dev.sh console-screenshots``
(``python -m jobs.console.screenshots [--out DIR]``).

Starts a pylog broker in this process under a temporary directory, writes the demo data of
:mod:`jobs.console.demo`, gives the group ``billing`` committed offsets and leaves one transaction open, serves
the console on a free loopback port, records a Spark write of ``orders`` as the connector's driver would (its
provenance record, :mod:`broker_runtime.protocol.spark_writes`), produces to ``orders`` for a few seconds while its
page is open (the live chart), and saves one PNG per main page (cluster, topics, topic, records, a filtered scan
stopped short, broker configs, group, transactions, and the confirmation page of a reset of the group ``replay``'s
offsets, from a second console started with ``allow_writes``) from a headless chromium into
``jobs/console/screenshots/`` (quantized to 64 colours to stay small).
Needs chromium and chromedriver (Debian: ``apt-get install chromium chromium-driver``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from broker_runtime.client import KafkaClient
from broker_runtime.console.server import ConsoleServer
from broker_runtime.protocol.records import RecordBatchBuilder
from broker_runtime.protocol.spark_writes import TOPIC as SPARK_WRITES
from broker_runtime.protocol.spark_writes import SparkWrite
from broker_runtime.server.config import BrokerConfig
from broker_runtime.server.node.broker import Broker
from jobs.console.demo import chromium_driver, open_transaction, write_demo_data


def _record_spark_write(client: KafkaClient) -> None:
    """A provenance record of a (pretend) Spark batch write of the demo's ``orders`` partitions."""
    client.admin.create_topics({SPARK_WRITES: (1, -1)})
    client.partitions_for(SPARK_WRITES)
    write = SparkWrite(
        "write-3f9c2a71d04b4e0f9a1c6b2d8e5f7a90",
        "batch",
        None,
        None,
        "idempotent",
        2,
        13,
        2048,
        int(time.time() * 1000) - 60000,
        (("orders", 0, 0, 9, 10), ("orders", 1, 0, 2, 3)),
    )
    batch = RecordBatchBuilder()
    batch.append(write.committed_ms, write.write_id.encode(), write.to_value())
    client.produce(
        client.leader_for(SPARK_WRITES, 0), {(SPARK_WRITES, 0): batch.build()}, acks=-1, timeout_ms=10000
    )


def _traffic(client: KafkaClient, seconds: float) -> None:
    """Records into ``orders`` for ``seconds`` (the chart's data), and the group ``billing`` reading them."""
    deadline, n = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        n += 1
        batch = RecordBatchBuilder()
        for i in range(20 * (1 + n % 4)):
            batch.append(int(time.time() * 1000), b"live-%d" % i, b'{"live": %d}' % i)
        client.produce(
            client.leader_for("orders", 0), {("orders", 0): batch.build()}, acks=-1, timeout_ms=10000
        )
        end = client.list_offsets({("orders", 0): -1})[("orders", 0)][0]
        client.groups.commit_offsets("billing", {("orders", 0): max(4, end - 30), ("orders", 1): 3})
        time.sleep(0.25)


OUT = Path(__file__).resolve().parent / "screenshots"
PAGES = (
    ("cluster", "/"),
    ("topics", "/topics"),
    ("topic", "/topics/orders"),  # with the chart and the Spark write (see _topic_with_traffic)
    ("records", "/topics/orders/0"),
    ("filter", "/topics/payments/0?filter=paid&max_bytes=1024&scan_bytes=1024"),
    ("broker", "/brokers/0"),
    ("group", "/groups/billing"),
    ("transactions", "/transactions"),
)
#: The confirmation page of an action: the group "replay" (no members) reset to its earliest offsets.
RESET_CONFIRM = "reset-confirm"


def _small_png(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=64).save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.console.screenshots", description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the PNGs go; default {OUT}")
    args = parser.parse_args(argv)
    browser_path, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if browser_path is None or driver_path is None:
        print(
            "console-screenshots: needs chromium and chromedriver (apt-get install chromium chromium-driver)"
        )
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(
            BrokerConfig.from_properties(
                {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(Path(tmp) / "logs")}
            )
        ).start()
        try:
            with KafkaClient(broker.bootstrap) as client:
                write_demo_data(client)
                client.groups.commit_offsets("billing", {("orders", 0): 4, ("orders", 1): 3})
                client.groups.commit_offsets("replay", {("orders", 0): 10, ("orders", 1): 3})
                open_transaction(client, "checkout-42", "payments", 0)
                _record_spark_write(client)
            with (
                ConsoleServer(broker.bootstrap, chart_interval_s=0.5) as server,
                ConsoleServer(broker.bootstrap, allow_writes=True) as writes,
                KafkaClient(broker.bootstrap) as client,
            ):
                browser = chromium_driver(browser_path, driver_path, 1100, 680)
                try:
                    for name, path in PAGES:
                        browser.get(server.url.rstrip("/") + path)
                        if name == "topic":  # the chart's samples are kept by the console: reload, draw
                            _traffic(client, 8.0)
                            browser.refresh()
                            time.sleep(1.5)
                        target = args.out / f"{name}.png"
                        browser.save_screenshot(str(target))
                        _small_png(target)
                        print(f"{target} ({target.stat().st_size} bytes)")
                    browser.get(writes.url.rstrip("/") + "/groups/replay")
                    browser.find_element("id", "reset-preview").click()  # the form's default: earliest
                    target = args.out / f"{RESET_CONFIRM}.png"
                    browser.save_screenshot(str(target))
                    _small_png(target)
                    print(f"{target} ({target.stat().st_size} bytes)")
                finally:
                    browser.quit()
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
