"""A leader SIGKILL of a 3-node Apache Kafka cluster during an acks=all write; SASL_SSL with SCRAM-SHA-512 and ACLs
on Apache Kafka, trusted through JKS and PKCS12 stores; the first transactional id of a new cluster."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.client import KafkaClient
from broker_runtime.launch import create_topic
from tests.connector import (
    test_failover_spark,
)
from tests.connector.on_apache_kafka.support import PEER
from tests.support.apache_kafka import KafkaCluster, run_tool
from tests.support.cluster import metadata, partition_state, wait_for
from tests.support.oauth import allowed_urls

pytestmark = pytest.mark.timeout(300)


# --------------------------------------------------------------------------------------------- failover


@pytest.mark.slow
@pytest.mark.compat(
    PEER, "batch write through a SIGKILL of the partition leader of a 3-node cluster (acks=all)"
)
def test_writer_rides_through_a_kafka_leader_sigkill_with_every_row_once(
    spark: Any, apache_kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """RF=3, min.insync.replicas=2: partition 0's leader is SIGKILLed inside the connector's acks=all write
    (test_failover_spark's gate: the tasks wait with a third of their rows still to write until it is dead);
    every row is then in the topic exactly once, read from the new leaders."""
    cluster, n, topic = apache_kafka_cluster, 30_000, f"failover-{uuid.uuid4().hex[:6]}"
    create_topic(
        cluster.bootstrap, topic, 3, {"min.insync.replicas": "2"}, replication_factor=3, timeout_s=60
    )
    nodes = {node.node_id: node for node in cluster.nodes}

    def leader(bootstrap: str) -> int:
        """Partition 0's leader as the node at ``bootstrap`` knows it; -1 before it knows the topic."""
        partitions = metadata(bootstrap, [topic])["Topics"][0]["Partitions"]
        return int(partitions[0]["LeaderId"]) if partitions else -1

    wait_for(
        lambda: all(leader(node.bootstrap) > 0 for node in cluster.nodes),
        what=f"every node to know the leader of {topic}",
    )
    victim = leader(cluster.nodes[0].bootstrap)
    survivor = next(node.bootstrap for node in cluster.nodes if node.node_id != victim)
    test_failover_spark.write_through_a_leader_kill(
        spark, cluster.bootstrap, nodes[victim].bootstrap, topic, n, nodes[victim].kill, tmp_path / "gate"
    )
    new = partition_state(survivor, topic, 0)
    assert new["LeaderId"] not in (victim, -1), new
    # The dead node is first in the bootstrap list when it was node 1.
    test_failover_spark._assert_exactly_once(
        test_failover_spark._read(spark, cluster.bootstrap, topic, **{"pylog.transport": "fetch"}), n
    )


# --------------------------------------------------------------------------------------------- security


def _admin_security(cluster: KafkaCluster) -> Any:
    from broker_runtime.security.client_security import ClientSecurity

    assert cluster.secured is not None
    return ClientSecurity.from_properties(cluster.secured.client_properties(cluster.secured.admin))


@pytest.mark.compat(PEER, "transactions: the first InitProducerId of a new cluster waits for its coordinator")
def test_the_first_transactional_id_of_a_new_cluster_waits_for_its_coordinator(
    apache_kafka_secured: KafkaCluster,
) -> None:
    """Kafka creates ``__transaction_state`` on the first FindCoordinator for a transactional id and answers
    COORDINATOR_NOT_AVAILABLE meanwhile; its producer looks again until max.block.ms. The connector's client
    does too, within its retry budget (the task's kafka.delivery.timeout.ms). The secured node is this
    module's own and nothing else here uses transactions on it: the call is the cluster's first."""
    cluster = apache_kafka_secured
    with KafkaClient(cluster.bootstrap, security=_admin_security(cluster), retry_timeout_ms=60000) as client:
        assert "__transaction_state" not in client.metadata().topics, "not the cluster's first transaction"
        producer_id, epoch = client.transactions.init_producer_id("pylog-first-transaction", 60000)
    assert producer_id >= 0 and epoch == 0


@pytest.mark.compat(PEER, "SASL_SSL with the trust store in JKS or PKCS12 (Spark users' stores)")
def test_jks_and_pkcs12_trust_stores_on_kafka(apache_kafka_secured: KafkaCluster, tmp_path: Path) -> None:
    """pylog's client (the connector's, as its kafka.ssl.* options build it) trusts Kafka's broker through the
    stores a Java client of that cluster would name: a JKS store made by keytool, a PKCS12 store."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    from broker_runtime.security.client_security import ClientSecurity
    from broker_runtime.security.keystores import KEYTOOL_JVM_OPTIONS, keytool

    cluster = apache_kafka_secured
    assert cluster.secured is not None
    tool = keytool()
    assert tool is not None, "keytool: the JDK that runs Apache Kafka has one"
    jks, p12 = tmp_path / "trust.jks", tmp_path / "trust.p12"
    subprocess.run(
        [tool, *KEYTOOL_JVM_OPTIONS, "-importcert", "-noprompt", "-alias", "ca", "-file",
         str(cluster.secured.truststore), "-keystore", str(jks), "-storetype", "JKS", "-storepass", "trust-pw"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    ca = x509.load_pem_x509_certificate(cluster.secured.truststore.read_bytes())
    encryption = serialization.BestAvailableEncryption(b"trust-pw")
    p12.write_bytes(pkcs12.serialize_key_and_certificates(b"ca", None, None, [ca], encryption))
    for store_type, location in (("JKS", jks), ("PKCS12", p12)):
        props = {
            **cluster.secured.client_properties(cluster.secured.admin),
            "ssl.truststore.type": store_type,
            "ssl.truststore.location": str(location),
            "ssl.truststore.password": "trust-pw",
        }
        with KafkaClient(cluster.bootstrap, security=ClientSecurity.from_properties(props)) as client:
            assert client.metadata().brokers, store_type


def _secured_options(cluster: KafkaCluster, user: str, password: str | None = None) -> dict[str, str]:
    assert cluster.secured is not None
    props = cluster.secured.client_properties(user)
    if password is not None:
        props["sasl.jaas.config"] = props["sasl.jaas.config"].replace(cluster.secured.users[user], password)
    return {f"kafka.{k}": v for k, v in props.items()}


def _kafka_acls(cluster: KafkaCluster, tmp_path: Path, *args: str) -> str:
    """kafka-acls as the super user over the SASL_SSL listener; its stdout."""
    assert cluster.secured is not None
    config = tmp_path / "admin.properties"
    props = cluster.secured.client_properties(cluster.secured.admin)
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return run_tool(
        "kafka-acls", "--bootstrap-server", cluster.bootstrap, "--command-config", str(config), *args
    ).stdout


@pytest.mark.compat(PEER, "SASL_SSL with SCRAM-SHA-512: batch write and read")
@pytest.mark.compat(
    PEER, "ACLs (StandardAuthorizer): allowed topics written and read, others refused by name"
)
def test_sasl_ssl_scram_sha_512_and_acls(
    spark: Any, apache_kafka_secured: KafkaCluster, tmp_path: Path
) -> None:
    """User ``spark`` may write and read topics prefixed ``granted-``; ``mallory`` has no ACL. The connector logs
    in with SCRAM-SHA-512 over TLS (Kafka's PEM key store), writes and reads back a granted topic, and is refused
    a topic it has no ACL for (Kafka's TOPIC_AUTHORIZATION_FAILED named with the topic), and a wrong password
    (SASL authentication failed), without the password in the message."""
    cluster = apache_kafka_secured
    assert cluster.secured is not None
    granted, refused = f"granted-{uuid.uuid4().hex[:6]}", f"refused-{uuid.uuid4().hex[:6]}"
    with KafkaClient(cluster.bootstrap, security=_admin_security(cluster)) as client:
        codes = client.admin.create_topics({granted: (3, 1), refused: (3, 1)})
        assert set(codes.values()) == {0}, codes
    listed = _kafka_acls(
        cluster,
        tmp_path,
        "--add",
        "--allow-principal",
        "User:spark",
        "--operation",
        "Write",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        "granted-",
        "--resource-pattern-type",
        "prefixed",
    )
    assert "User:spark" in listed and "granted-" in listed, listed

    rows = [(f"k{i}", f"v{i}") for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value string")

    def write(topic: str, user: str, password: str | None = None) -> None:
        writer = df.write.format("pylog").option("kafka.bootstrap.servers", cluster.bootstrap)
        writer = writer.option("topic", topic)
        for k, v in _secured_options(cluster, user, password).items():
            writer = writer.option(k, v)
        writer.mode("append").save()

    def read(topic: str, user: str) -> list[tuple[str, str]]:
        reader = spark.read.format("pylog").option("kafka.bootstrap.servers", cluster.bootstrap)
        reader = reader.option("subscribe", topic)
        for k, v in _secured_options(cluster, user).items():
            reader = reader.option(k, v)
        got = reader.load().selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v").collect()
        return sorted((r.k, r.v) for r in got)

    write(granted, "spark")
    assert read(granted, "spark") == sorted(rows)

    with pytest.raises(Exception) as denied:
        write(refused, "spark")
    text = str(denied.value)
    assert "TOPIC_AUTHORIZATION_FAILED" in text and refused in text, text[-3000:]
    assert "auto-creation" not in text, "a refused topic must not be reported as a missing one"
    with pytest.raises(Exception) as denied_read:
        read(granted, "mallory")
    text = str(denied_read.value)
    assert "TOPIC_AUTHORIZATION_FAILED" in text and granted in text, text[-3000:]
    with pytest.raises(Exception) as bad_login:
        write(granted, "spark", "not-the-password")
    text = str(bad_login.value)
    assert "not-the-password" not in text and "spark-secret" not in text
    assert re.search(r"(?i)authentication failed", text), text[-3000:]
    assert read(granted, "spark") == sorted(rows), "the refused writes wrote nothing"


@pytest.mark.compat(
    PEER, "SASL/OAUTHBEARER: pylog's client logs in with a signed token; a refused token is answered alike"
)
def test_pylog_client_oauthbearer_on_kafka(apache_kafka_secured: KafkaCluster, tmp_path: Path) -> None:
    """Kafka's ``OAuthBearerValidatorCallbackHandler`` takes the token pylog's client sends (from a token file,
    ``sasl.oauthbearer.token.endpoint.url=file:``), and refuses one for another audience with the same answer
    pylog's broker gives (``{"status":"invalid_token"}``, tests/security/test_oauthbearer.py); the messages after
    a refused token are answered as pylog's broker answers them (:data:`~tests.support.oauth.REFUSED_TOKEN_EXCHANGES`)."""
    from broker_runtime.errors import ErrorCode, KafkaError
    from broker_runtime.security.client_security import ClientSecurity
    from tests.support.apache_kafka import OAUTH_SUBJECT

    cluster = apache_kafka_secured
    assert cluster.secured is not None and cluster.secured.oauth is not None
    idp = cluster.secured.oauth

    def security(token: str, name: str) -> Any:
        path = tmp_path / name
        path.write_text(token)
        with allowed_urls(path.as_uri()):
            return ClientSecurity.from_properties(
                {
                    **cluster.secured.client_properties(cluster.secured.admin),  # type: ignore[union-attr]
                    "sasl.mechanism": "OAUTHBEARER",
                    "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
                    "sasl.oauthbearer.token.endpoint.url": path.as_uri(),
                }
            )

    with KafkaClient(cluster.bootstrap, security=security(idp.token(OAUTH_SUBJECT), "good.jwt")) as client:
        assert client.metadata().brokers
    refused = security(idp.token(OAUTH_SUBJECT, aud="elsewhere"), "bad.jwt")
    with pytest.raises(KafkaError) as info, KafkaClient(cluster.bootstrap, security=refused) as client:
        client.metadata()
    assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert '{"status":"invalid_token"}' in str(info.value)
    # The exchange after a refused token, byte for byte as pylog's broker answers it (the same table is checked
    # against pylog in tests/security/test_oauthbearer.py).
    import ssl

    from tests.server.rawclient import RawConnection
    from tests.support.oauth import REFUSED_TOKEN_EXCHANGES, refused_token_exchanges

    tls = ssl.create_default_context(cafile=str(cluster.secured.truststore))
    seen = refused_token_exchanges(
        lambda: RawConnection(cluster.bootstrap.split(",")[0], tls=tls),
        idp.token(OAUTH_SUBJECT),
        idp.token(OAUTH_SUBJECT, aud="elsewhere"),
    )
    assert seen == REFUSED_TOKEN_EXCHANGES
