"""A default broker (``pylog-broker start`` with only ``listeners`` and ``log.dirs``) creates a topic and
acknowledges an acks=all produce without importing what such a broker does not use: pyarrow (the log cleaner,
the Arrow decoders), PyJWT and cryptography (OAUTHBEARER, key stores), scramp (SCRAM), prometheus-client (the
metrics endpoint), http.client, nor pylog's own client. Each of them is paid at every start in CPU and in
resident memory (pyarrow alone about 0.1 s and 30 MB), which is how far a default broker's start to first ack
and idle RSS stand from Apache Kafka's (``bench anchors``).

One real broker process whose main is wrapped: a thread waits for a line on its stdin, then prints the imported
modules and how many objects its start froze out of the garbage collector's sight (``gc.freeze``: a full
collection over them stalled the event loop for about 20 ms); the test creates the topic and produces through
librdkafka in between.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker_runtime.launch import create_topic
from broker_runtime.launch.command import parse_listening_line

pytestmark = pytest.mark.timeout(120)

#: Modules (and packages: their submodules too) a default broker must not have imported after its first ack.
NOT_AT_START = (
    "pyarrow",
    "jwt",
    "cryptography",
    "scramp",
    "prometheus_client",
    "http.client",
    "broker_runtime.client",
    "broker_runtime.storage.cleaner",
    "broker_runtime.protocol.record_codec.pywalk",
)

_CHILD = """
import json, sys, threading

def report():
    sys.stdin.readline()
    print("MODULES " + json.dumps(sorted(sys.modules)), flush=True)
    print("FROZEN " + str(__import__("gc").get_freeze_count()), flush=True)

threading.Thread(target=report, daemon=True).start()
from broker_runtime.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _produce_one(bootstrap: str, topic: str) -> list[object]:
    """The delivery reports of one acks=all produce (the producer is gone when this returns)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    acked: list[object] = []
    producer.produce(topic, b"value", key=b"key", on_delivery=lambda err, msg: acked.append(err))
    producer.flush(30)
    return acked


def test_a_default_broker_answers_its_first_produce_without_the_modules_it_does_not_use(
    tmp_path: Path,
) -> None:
    config = tmp_path / "broker.properties"
    config.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path / 'logs'}\n")
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, "start", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        bootstrap = parse_listening_line(child.stdout.readline())
        assert bootstrap is not None, child.stderr.read() if child.stderr else ""
        create_topic(bootstrap, "first", 1)
        assert _produce_one(bootstrap, "first") == [None]
        child.stdin.write("\n")
        child.stdin.flush()
        line = child.stdout.readline()
        assert line.startswith("MODULES "), line
        loaded = json.loads(line[len("MODULES ") :])
        frozen = child.stdout.readline()
    finally:
        child.terminate()
        child.communicate(timeout=30)
    found = sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in NOT_AT_START))
    assert not found, f"a default broker imported {found} before its first ack"
    assert "numpy" in loaded  # the produce path's record checks use it: the produce went through them
    # The start's heap is out of the collector's sight (cli.freeze_start_heap): a full collection of it stalled
    # the event loop for about 20 ms. Tens of thousands of objects; the new ones since are a few hundred.
    assert frozen.startswith("FROZEN ") and int(frozen.split()[1]) > 10_000, frozen
