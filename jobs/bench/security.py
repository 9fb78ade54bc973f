"""Benchmark section "security": produce throughput over TLS against PLAINTEXT, same run.

Two broker child processes, one with a PLAINTEXT listener and one with an SSL listener (a test CA and server
certificate made for the run), each with a 4-partition topic. A confluent-kafka producer (100 B values, acks=1,
linger.ms=5, batch.size=1 MiB) sends N messages to each in turn, interleaved 5 times after a warm-up round;
the figures are the median rates with their spread, and the ratio of the medians (target SSL >= 0.7x
PLAINTEXT). N is 300,000 (quick mode: 5,000, one round).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from jobs.bench.common import Figure, Result, timed_interleaved
from jobs.bench.kafka_load import throughput

__all__ = ["run"]

SECTION = "security"
PARTITIONS = 4


def run(quick: bool) -> list[Result]:
    from broker_runtime.client import KafkaClient
    from broker_runtime.launch import broker_process, create_topic
    from broker_runtime.security import ClientSecurity
    from tests.security.certs import make_pki

    n = 5_000 if quick else 300_000
    repeat = 1 if quick else 5
    with tempfile.TemporaryDirectory(prefix="pylog-bench-") as tmp:
        pki = make_pki(Path(tmp) / "pki")
        ssl_overrides = {
            "listeners": "SSL://127.0.0.1:0",
            "inter.broker.listener.name": "SSL",
            "ssl.keystore.location": str(pki.server),
            "ssl.key.password": pki.key_password,
        }
        with (
            broker_process(Path(tmp) / "plain") as plain,
            broker_process(Path(tmp) / "ssl", overrides=ssl_overrides) as secured,
        ):
            create_topic(plain, "bench", PARTITIONS)
            security = ClientSecurity.from_properties(
                {"security.protocol": "SSL", "ssl.truststore.location": str(pki.ca)}
            )
            with KafkaClient(secured, security=security) as client:
                client.admin.create_topics({"bench": (PARTITIONS, 1)})
            ca = str(pki.ca)
            plain_t, ssl_t = timed_interleaved(
                [
                    lambda: throughput(SECTION, plain, "bench", "1", n),
                    lambda: throughput(
                        SECTION, secured, "bench", "1", n, security_protocol="SSL", ssl_ca_location=ca
                    ),
                ],
                repeat=repeat,
                warmup=1,
            )
    plain_rate, ssl_rate = plain_t.rate(n), ssl_t.rate(n)
    ratio = ssl_rate.value / plain_rate.value
    return [
        Result.measured(SECTION, f"produce 100 B, acks=1, PLAINTEXT ({n:,} msgs)", plain_rate, "msg/s"),
        Result.measured(SECTION, f"produce 100 B, acks=1, SSL ({n:,} msgs)", ssl_rate, "msg/s"),
        Result.measured(
            SECTION,
            "SSL / PLAINTEXT throughput (ratio of medians)",
            Figure(ratio, ssl_rate.low / plain_rate.high, ssl_rate.high / plain_rate.low),
            "x",
            ">= 0.7x",
            ratio >= 0.7,
        ),
    ]
