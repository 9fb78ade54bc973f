"""Two brokers of one cluster whose inter-broker listener is SASL_SSL (SCRAM-SHA-512): the follower logs in to
the leader over TLS and replicates (acks=all is acknowledged only with the follower in the ISR), and Metadata
answers each client listener with that listener's endpoints of every broker."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.security.scram_credentials import CREDENTIALS_FILE, upsert_user
from tests.security.certs import make_pki
from tests.server.rawclient import build_batch
from tests.support.brokers import start_node_brokers

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("reauth_ms", [0, 1500], ids=["no-session-lifetime", "reauth-1500ms"])
def test_replication_over_sasl_ssl_inter_broker_listener(
    tmp_path: Path, reauth_ms: int, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``connections.max.reauth.ms`` on the inter-broker listener the follower's fetcher re-authenticates
    on its connection before each session ends: replication goes on with no failed fetch (KIP-368)."""
    caplog.set_level(logging.INFO, logger="broker_runtime.server.node.dispatcher")
    pki = make_pki(tmp_path / "pki")
    cluster_dir = tmp_path / "cluster"
    cluster_dir.mkdir()
    upsert_user(cluster_dir / CREDENTIALS_FILE, "broker", "SCRAM-SHA-512", "broker-pw", iterations=4096)
    base = {
        "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="broker" password="broker-pw";'
        ),
        "ssl.keystore.location": str(pki.server),
        "ssl.key.password": pki.key_password,
        "ssl.truststore.location": str(pki.ca),
        "pylog.cluster.dir": str(cluster_dir),
        "broker.heartbeat.interval.ms": "200",
        "broker.session.timeout.ms": "3000",
        "replica.fetch.wait.max.ms": "100",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "listener.name.internal.connections.max.reauth.ms": str(reauth_ms),
    }
    brokers = start_node_brokers(tmp_path, base)
    try:
        with KafkaClient(brokers[0].listener_bootstrap("CLIENT")) as client:
            assert client.admin.create_topics({"replicated": (1, 2)})["replicated"] == 0
            deadline = time.monotonic() + 30
            while True:
                meta = client.metadata(["replicated"])
                part = meta.topics["replicated"].partitions.get(0)
                if part is not None and len(part.isr) == 2 and part.leader >= 0:
                    break
                assert time.monotonic() < deadline, f"ISR never reached 2 replicas: {part}"
                time.sleep(0.1)
            # Metadata on the CLIENT listener names every broker's CLIENT endpoint.
            assert {f"{b.host}:{b.port}" for b in meta.brokers.values()} == {
                b.listener_bootstrap("CLIENT") for b in brokers
            }
            answer = client.produce(
                part.leader, {("replicated", 0): bytes(build_batch(5))}, acks=-1, timeout_ms=20000
            )
            assert answer is not None and answer[("replicated", 0)].error == 0
            if reauth_ms:
                time.sleep(2.5 * reauth_ms / 1000)  # two session lifetimes of the follower's connection
                answer = client.produce(
                    part.leader, {("replicated", 0): bytes(build_batch(5))}, acks=-1, timeout_ms=20000
                )
                assert answer is not None and answer[("replicated", 0)].error == 0
        follower = brokers[1 - part.leader]
        expected_end = 10 if reauth_ms else 5
        deadline = time.monotonic() + 20
        assert follower.ctx is not None
        while (p := follower.ctx.replicas.partition("replicated", 0)) is None or (
            p.log.log_end_offset != expected_end
        ):
            assert time.monotonic() < deadline, "the follower did not replicate over SASL_SSL"
            time.sleep(0.05)
        expired = [r.getMessage() for r in caplog.records if "without re-authenticating" in r.getMessage()]
        assert expired == [], expired
    finally:
        for b in brokers:
            b.stop()
