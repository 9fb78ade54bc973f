"""The README's screenshots of the web console: ``bash jobs/dev.sh console-screenshots``
(``python -m jobs.console.screenshots [--out DIR]``).

Starts a pylog broker in this process under a temporary directory, writes the demo data of
:mod:`jobs.console.demo`, gives the group ``billing`` committed offsets and leaves one transaction open, serves
the console on a free loopback port and saves one PNG per main page (cluster, topics, topic, records, a
filtered scan stopped short, broker configs, group, transactions, and the confirmation page of a reset of the
group ``replay``'s offsets, from a second console started with ``allow_writes``) from a headless chromium into
``jobs/console/screenshots/`` (quantized to 64 colours to stay small).
Needs chromium and chromedriver (Debian: ``apt-get install chromium chromium-driver``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from broker_runtime.client import KafkaClient
from broker_runtime.console.server import ConsoleServer
from broker_runtime.server.config import BrokerConfig
from broker_runtime.server.node.broker import Broker
from jobs.console.demo import chromium_driver, open_transaction, write_demo_data

OUT = Path(__file__).resolve().parent / "screenshots"
PAGES = (
    ("cluster", "/"),
    ("topics", "/topics"),
    ("topic", "/topics/orders"),
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
            with (
                ConsoleServer(broker.bootstrap) as server,
                ConsoleServer(broker.bootstrap, allow_writes=True) as writes,
            ):
                browser = chromium_driver(browser_path, driver_path, 1100, 680)
                try:
                    for name, path in PAGES:
                        browser.get(server.url.rstrip("/") + path)
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
