"""pytest fixtures of the Apache Kafka peer (registered by the root conftest through ``pytest_plugins``).

* ``apache_kafka`` (session): ONE Apache Kafka node (broker and controller) shared by the whole test run;
  topics it auto-creates get 3 partitions (as the connector tests' pylog brokers), and its retention is off
  (tests write records with old timestamps). Tests use unique topic names and must not change the node.
* ``apache_kafka_cluster`` (module): three such nodes, every one a KRaft voter, started once per test module
  that asks for it.
* ``apache_kafka_tools`` (session): no node, only the release's jars and a Java to run them, for tests that run
  Kafka's tools or Java clients (:func:`~tests.support.apache_kafka.run_tool`) against another broker.
* ``apache_kafka_tool_runner`` (session): a :class:`~tests.support.apache_kafka.tool_runner.ToolRunner`, one
  JVM that runs many tools in turn (one JVM start per test process instead of one per tool run).
* ``apache_kafka_secured`` (module): one secured node (:class:`~tests.support.apache_kafka.SaslSsl`: a SASL_SSL
  listener with SCRAM-SHA-512, ``StandardAuthorizer``), TLS material made by ``make_pki`` under the node's
  directory, SCRAM users :data:`SECURED_USERS` (``admin`` is the super user); ``.secured`` tells a client how
  to log in; the listener also takes OAUTHBEARER tokens of ``.secured.oauth`` (a test identity provider, no
  server: its JWKS is a file) whose subject ``OAUTH_SUBJECT`` is a super user. No ACL is set: the test sets those
  it needs.

The node fixtures yield a started :class:`~tests.support.apache_kafka.KafkaCluster` (``.bootstrap``, ``.nodes``).
When Java 17+, Maven or the fetch of the release is missing, each fixture FAILS with one line saying what and how
to fix it (see :class:`~tests.support.apache_kafka.PeerUnavailable`); it never skips.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.certs import Pki, make_pki
from tests.support.apache_kafka import KafkaCluster, PeerUnavailable, SaslSsl, ensure_fetched, find_java
from tests.support.apache_kafka.tool_runner import ToolRunner
from tests.support.oauth import IdentityProvider

#: Broker configs of the shared single node (Kafka's names). Retention is off, except for a topic that sets
#: its own retention.ms; the check for it runs every 200 ms (Kafka's default: 5 minutes).
SINGLE_NODE_PROPS = {
    "num.partitions": "3",
    "log.retention.ms": "-1",
    "log.retention.check.interval.ms": "200",
}
#: SCRAM-SHA-512 users of the secured node: user -> password.
SECURED_USERS = {"admin": "admin-secret", "spark": "spark-secret", "mallory": "mallory-secret"}


def _started(base: Path, size: int, props: dict[str, str], secured: SaslSsl | None = None) -> KafkaCluster:
    try:
        return KafkaCluster(base, size, props, secured).start()
    except PeerUnavailable as e:
        problem = str(e)
    pytest.fail(problem, pytrace=False)  # outside the except: the one line, without the exception chain


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = _started(tmp_path_factory.mktemp("apache-kafka"), 1, SINGLE_NODE_PROPS)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def apache_kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = _started(tmp_path_factory.mktemp("apache-kafka-cluster"), 3, {"num.partitions": "3"})
    try:
        yield cluster
    finally:
        cluster.stop()


def _java_keystore(pki: Pki, directory: Path) -> Path:
    """The server's PEM key store for Kafka: its key unencrypted (PKCS#8), then its certificate chain.
    ``make_pki`` encrypts the key with PBES2, which Java 17's ``EncryptedPrivateKeyInfo`` (what Kafka's PEM key
    store decrypts with) lacks: ``PBES2 SecretKeyFactory not available``. The file is the node's own, under the
    test's temporary directory."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), pki.key_password.encode())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path = directory / "server-java.pem"
    path.write_bytes(pem + pki.server_cert.read_bytes() + pki.ca.read_bytes())
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def apache_kafka_secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    base = tmp_path_factory.mktemp("apache-kafka-secured")
    pki = make_pki(base / "pki")
    # Also OAUTHBEARER, with tokens of a test identity provider (no server: its JWKS is read from a file).
    idp = IdentityProvider()
    jwks = base / "pki" / "jwks.json"
    jwks.write_text(json.dumps(idp.jwks))
    secured = SaslSsl(
        _java_keystore(pki, base / "pki"), None, pki.ca, SECURED_USERS, oauth=idp, oauth_jwks=jwks
    )
    cluster = _started(base, 1, {"num.partitions": "3", "auto.create.topics.enable": "false"}, secured)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def apache_kafka_tools() -> Path:
    try:
        find_java()
        return ensure_fetched()
    except PeerUnavailable as e:
        problem = str(e)
    pytest.fail(problem, pytrace=False)


@pytest.fixture(scope="session")
def apache_kafka_tool_runner() -> Iterator[ToolRunner]:
    try:
        runner = ToolRunner()
    except PeerUnavailable as e:
        problem = str(e)
    else:
        try:
            yield runner
        finally:
            runner.close()
        return
    pytest.fail(problem, pytrace=False)
