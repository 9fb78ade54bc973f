"""A cluster of broker processes whose every listener is secured: clients on a SASL_SSL listener (SCRAM-SHA-256),
the brokers among themselves on another SASL_SSL listener (PLAIN, the listener-prefixed JAAS entry). A
confluent-kafka producer (acks=all, idempotent) rides through a leader SIGKILL, followers replicate over the
secured inter-broker listener, and a confluent-kafka group consumer reads every acknowledged record back; the
same configuration through ``pylog-broker cluster``."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.launch import BrokerCluster, cluster_process
from broker_runtime.launch.layout import CLUSTER_DIR
from broker_runtime.security.scram_credentials import CREDENTIALS_FILE, upsert_user
from tests.security.certs import Pki, make_pki
from tests.support.cluster import FAST, wait_for
from tests.support.launch import pylog_broker

pytestmark = pytest.mark.timeout(120)

TOPIC = "secured"
INTERNAL_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-pw" user_broker="broker-pw";'
)


def secured_cluster_props(pki: Pki) -> dict[str, str]:
    return {
        **FAST,
        "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": INTERNAL_JAAS,
        "ssl.keystore.location": str(pki.server),
        "ssl.key.password": pki.key_password,
        "ssl.truststore.location": str(pki.ca),
        "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "2",
        "transaction.state.log.num.partitions": "1",
    }


def client_conf(cluster: BrokerCluster, pki: Pki) -> dict[str, Any]:
    return client_conf_for(cluster.bootstrap, pki)


def client_conf_for(bootstrap: str, pki: Pki) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
    }


def _partition(admin: Any, partition: int = 0) -> Any:
    return admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[partition]


def test_sasl_ssl_cluster_replicates_and_fails_over(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    pki = make_pki(tmp_path / "pki")
    cluster_dir = tmp_path / "data" / CLUSTER_DIR
    cluster_dir.mkdir(parents=True)
    upsert_user(cluster_dir / CREDENTIALS_FILE, "alice", "SCRAM-SHA-256", "alice-pw", iterations=4096)
    with cluster_process(tmp_path / "data", nodes=3, overrides=secured_cluster_props(pki)) as cluster:
        conf = client_conf(cluster, pki)
        admin = AdminClient(conf)
        futures = admin.create_topics(
            [NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})], operation_timeout=20
        )
        futures[TOPIC].result(30)
        wait_for(lambda: len(_partition(admin).isrs) == 3, timeout_s=20, what="3 in-sync replicas")
        leader = _partition(admin).leader
        producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
        acked: list[int] = []
        failed: list[Any] = []

        def on_delivery(err: Any, msg: Any) -> None:
            (failed.append(err) if err is not None else acked.append(int(msg.value())))

        total = 4000
        for n in range(total):
            producer.produce(TOPIC, str(n).encode(), on_delivery=on_delivery)
            producer.poll(0)
            if n == total // 2:
                producer.flush(30)
                # Replicated over the secured inter-broker listener: every follower is in the ISR.
                assert len(_partition(admin).isrs) == 3
                os.kill(cluster.nodes[leader].proc.pid, signal.SIGKILL)
                cluster.nodes[leader].proc.wait(10)
        assert producer.flush(60) == 0
        assert failed == [], failed[:3]
        assert sorted(acked) == list(range(total))
        new_leader = _partition(admin).leader
        assert new_leader not in (leader, -1)
        consumer = Consumer(
            {
                **conf,
                "group.id": "secured-readers",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe([TOPIC])
            seen: list[int] = []
            deadline = time.monotonic() + 30
            while len(seen) < total and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                seen.append(int(msg.value()))
            assert seen == list(range(total)), f"read {len(seen)} of {total}"
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()


def test_cluster_command_with_secured_listeners(tmp_path: Path) -> None:
    """``pylog-broker cluster`` keeps the config's listeners: its bootstrap line names the SASL_SSL client
    listener of each node, and acks=all writes replicate over the SASL_SSL inter-broker listener."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    pki = make_pki(tmp_path / "pki")
    logs = tmp_path / "logs"
    logs.mkdir()
    upsert_user(logs / CREDENTIALS_FILE, "alice", "SCRAM-SHA-256", "alice-pw", iterations=4096)
    config = tmp_path / "secured.properties"
    props = {**secured_cluster_props(pki), "log.dirs": str(logs)}
    config.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
    err_path = tmp_path / "cluster.err"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            pylog_broker("cluster", "--nodes", "2", "--config", str(config)),
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        assert lines[2].startswith("bootstrap servers: "), (lines, err_path.read_text())
        bootstrap = lines[2].removeprefix("bootstrap servers: ")
        conf = {**client_conf_for(bootstrap, pki)}
        admin = AdminClient(conf)
        admin.create_topics([NewTopic(TOPIC, 1, 2)], operation_timeout=20)[TOPIC].result(30)
        brokers = admin.list_topics(timeout=10).brokers
        assert sorted(f"{b.host}:{b.port}" for b in brokers.values()) == sorted(bootstrap.split(","))
        producer = Producer({**conf, "acks": "all"})
        failed: list[Any] = []
        for n in range(100):
            producer.produce(TOPIC, str(n).encode(), on_delivery=lambda err, msg: err and failed.append(err))
        assert producer.flush(30) == 0 and failed == [], failed
        wait_for(lambda: len(_partition(admin).isrs) == 2, timeout_s=20, what="2 in-sync replicas")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, err_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
