"""The connector on a secured broker: ``kafka.security.protocol=SASL_SSL`` with SCRAM and a PEM trust store for
a batch write and a batch read through real Spark; and the option rules: Kafka client settings pylog does not
use are accepted with one warning, typos and unsupported security settings fail with one clear line."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ConfigError
from spark_kafka_log.common.reader_options import parse_reader_options
from spark_kafka_log.common.writer_options import parse_writer_options
from tests.security.certs import Pki, make_pki

pytestmark = pytest.mark.timeout(300)

SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="spark" password="spark-pw";'
)


@pytest.fixture(scope="module")
def sasl_ssl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Pki]]:
    from broker_runtime.security.scram_credentials import credentials_path, upsert_user
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    data_dir = tmp_path_factory.mktemp("sasl-ssl")
    pki = make_pki(data_dir / "pki")
    config = BrokerConfig.from_properties(
        {
            "listeners": "SASL_SSL://127.0.0.1:0",
            "inter.broker.listener.name": "SASL_SSL",
            "log.dirs": str(data_dir / "logs"),
            "num.partitions": "2",
            "ssl.keystore.location": str(pki.server),
            "ssl.key.password": pki.key_password,
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        }
    )
    upsert_user(
        credentials_path(config.log_dirs, None), "spark", "SCRAM-SHA-256", "spark-pw", iterations=4096
    )
    broker = Broker(config).start()
    try:
        yield broker.bootstrap, pki
    finally:
        broker.stop()


def _secured(pki: Pki) -> dict[str, str]:
    return {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": SCRAM_JAAS,
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(pki.ca),
    }


def test_spark_writes_and_reads_through_sasl_ssl(spark: Any, sasl_ssl: tuple[str, Pki]) -> None:
    bootstrap, pki = sasl_ssl
    rows = [(f"k{i}", f"v{i}") for i in range(200)]
    df = spark.createDataFrame(rows, "key string, value string")
    writer = df.write.format("pylog").option("kafka.bootstrap.servers", bootstrap).option("topic", "secured")
    for k, v in {**_secured(pki), "kafka.reconnect.backoff.ms": "50"}.items():
        writer = writer.option(k, v)
    writer.mode("append").save()
    reader = (
        spark.read.format("pylog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "secured")
    )
    for k, v in _secured(pki).items():
        reader = reader.option(k, v)
    got = reader.load().selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v").collect()
    assert sorted((r.k, r.v) for r in got) == sorted(rows)


def test_unused_kafka_settings_warn_once_and_typos_fail(caplog: pytest.LogCaptureFixture) -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t"}
    with caplog.at_level(logging.WARNING, logger="spark_kafka_log"):
        parse_writer_options(
            {
                **base,
                "kafka.reconnect.backoff.ms": "5",
                "kafka.sasl.login.class": "x",
                "kafka.metadata.max.age.ms": "y",
            }
        )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "pylog writer: these Kafka client settings are accepted but not used by pylog: kafka.metadata.max.age.ms, "
        "kafka.reconnect.backoff.ms, kafka.sasl.login.class"
    ]
    with pytest.raises(
        ConfigError, match=r"kafka\.reconect\.backoff\.ms not supported by the pylog writer and not"
    ):
        parse_writer_options({**base, "kafka.reconect.backoff.ms": "5"})
    with pytest.raises(ConfigError, match=r"kafka\.no\.such\.thing not supported by the pylog reader"):
        parse_reader_options(
            {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", "kafka.no.such.thing": "1"}
        )


@pytest.mark.parametrize(
    ("role", "parse", "own"),
    [
        ("writer", parse_writer_options, {"topic": "t", "kafka.linger.ms": "1"}),
        ("reader", parse_reader_options, {"subscribe": "t", "kafka.request.timeout.ms": "1000"}),
    ],
)
def test_settings_pylog_uses_are_not_in_the_unused_warning(
    caplog: pytest.LogCaptureFixture, role: str, parse: Any, own: dict[str, str]
) -> None:
    """The security settings and the role's own Kafka settings are used, so only the rest is listed as unused."""
    options = {
        "kafka.bootstrap.servers": "127.0.0.1:9",
        "kafka.security.protocol": "PLAINTEXT",
        "kafka.reconnect.backoff.ms": "5",
        **own,
    }
    with caplog.at_level(logging.WARNING, logger="spark_kafka_log"):
        parse(options)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"pylog {role}: these Kafka client settings are accepted but not used by pylog: kafka.reconnect.backoff.ms"
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"},
            "kafka.sasl.mechanism=GSSAPI",
        ),
        (
            {"kafka.security.protocol": "SASL_PLAINTEXT"},
            "kafka.sasl.mechanism=GSSAPI (Kafka's default, Kerberos)",
        ),
        (
            {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"},
            "option kafka.sasl.jaas.config is required",
        ),
        (
            {
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": SCRAM_JAAS,
            },
            "does not match option kafka.sasl.mechanism=PLAIN",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JCEKS"},
            "option kafka.ssl.truststore.type='JCEKS': expected one of JKS, PKCS12, PEM",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/nonexistent.pem"},
            "no such file",
        ),
        (
            {"kafka.security.protocol": "TLS"},
            "option kafka.security.protocol='TLS': expected one of PLAINTEXT",
        ),
    ],
    ids=["gssapi", "default-gssapi", "no-jaas", "module-mismatch", "jceks", "missing-file", "protocol"],
)
def test_security_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_reader_options({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", **options})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_secured_protocol_needs_bootstrap_servers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="embedded broker .* listens on PLAINTEXT only"):
        parse_writer_options({"topic": "t", "pylog.dataDir": str(tmp_path), "kafka.security.protocol": "SSL"})


def test_password_not_in_repr(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    parsed = parse_reader_options(
        {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", **_secured(pki)}
    )
    assert parsed.security.sasl_username == "spark"
    assert "spark-pw" not in repr(parsed)


def test_spark_shows_no_secret_in_plans_errors_or_logs(
    spark: Any, sasl_ssl: tuple[str, Pki], caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever Spark or the connector shows of a secured query -- the plans of a batch and a streaming read, the
    error of a refused login or of a malformed JAAS entry, the parsed options, the driver's log -- holds no
    password."""
    bootstrap, pki = sasl_ssl
    secrets = ("spark-pw", "wrong-SPARK-pw", "ks-SPARK-SECRET")
    options = {
        **_secured(pki),
        "kafka.bootstrap.servers": bootstrap,
        "kafka.ssl.keystore.password": secrets[2],
    }
    seen: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="spark_kafka_log"):
        for load in (spark.read, spark.readStream):
            df = load.format("pylog").options(**options, subscribe="secured").load()
            plans = io.StringIO()
            with contextlib.redirect_stdout(plans):
                df.explain(True)
            seen.append(plans.getvalue())
        assert "pylog" in seen[0]
        df = spark.createDataFrame([("k", "v")], "key string, value string")
        wrong = {**options, "kafka.sasl.jaas.config": SCRAM_JAAS.replace("spark-pw", secrets[1])}
        malformed = {**options, "kafka.sasl.jaas.config": SCRAM_JAAS.rstrip(";")}
        for bad, why in ((wrong, "Authentication failed"), (malformed, "must end with ';'")):
            with pytest.raises(Exception) as failed:  # noqa: PT011 -- Spark wraps the connector's error
                df.write.format("pylog").options(**bad, topic="secured").mode("append").save()
            assert why in str(failed.value)
            seen.append(str(failed.value))
        seen.append(repr(parse_writer_options({**options, "topic": "secured"})))
        seen.append(repr(parse_reader_options({**options, "subscribe": "secured"})))
    seen += [r.getMessage() for r in caplog.records]
    leaked = [s for s in secrets if any(s in text for text in seen)]
    assert not leaked, leaked


@pytest.fixture(scope="module")
def sasl_ssl_acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Pki]]:
    """A SASL_SSL broker with the standard authorizer: ``admin`` is a super user, ``spark`` may do exactly what
    the connector's transactional write and batch read of one topic need (set up by the admin with
    confluent-kafka's AdminClient)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourceType,
    )
    from confluent_kafka.admin import ResourcePatternType as Pattern

    from broker_runtime.security.scram_credentials import credentials_path, upsert_user
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    data_dir = tmp_path_factory.mktemp("sasl-ssl-acl")
    pki = make_pki(data_dir / "pki")
    config = BrokerConfig.from_properties(
        {
            "listeners": "SASL_SSL://127.0.0.1:0",
            "inter.broker.listener.name": "SASL_SSL",
            "log.dirs": str(data_dir / "logs"),
            "num.partitions": "2",
            "ssl.keystore.location": str(pki.server),
            "ssl.key.password": pki.key_password,
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        }
    )
    for user in ("spark", "admin"):
        upsert_user(
            credentials_path(config.log_dirs, None), user, "SCRAM-SHA-256", f"{user}-pw", iterations=4096
        )
    broker = Broker(config).start()
    try:
        admin = AdminClient(
            {
                "bootstrap.servers": broker.bootstrap,
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "admin",
                "sasl.password": "admin-pw",
                "ssl.ca.location": str(pki.ca),
            }
        )
        for fut in admin.create_topics([NewTopic("acl-orders", 2, 1)]).values():
            fut.result()

        def allow(rt: Any, name: str, op: Any, pattern: Any = Pattern.LITERAL) -> Any:
            return AclBinding(rt, name, pattern, "User:spark", "*", op, AclPermissionType.ALLOW)

        bindings = [
            allow(ResourceType.TOPIC, "acl-orders", AclOperation.WRITE),
            allow(ResourceType.TOPIC, "acl-orders", AclOperation.READ),
            allow(ResourceType.TRANSACTIONAL_ID, "acl-etl-", AclOperation.WRITE, Pattern.PREFIXED),
        ]
        for fut in admin.create_acls(bindings, request_timeout=15).values():
            fut.result()
        yield broker.bootstrap, pki
    finally:
        broker.stop()


def test_spark_through_sasl_ssl_with_exactly_the_acls_it_needs(
    spark: Any, sasl_ssl_acl: tuple[str, Pki]
) -> None:
    bootstrap, pki = sasl_ssl_acl
    secured = _secured(pki)
    rows = [(f"k{i}", f"v{i}") for i in range(100)]
    df = spark.createDataFrame(rows, "key string, value string")
    writer = (
        df.write.format("pylog").option("kafka.bootstrap.servers", bootstrap).option("topic", "acl-orders")
    )
    for k, v in {**secured, "kafka.transactional.id": "acl-etl", "kafka.reconnect.backoff.ms": "50"}.items():
        writer = writer.option(k, v)
    writer.mode("append").save()

    reader = (
        spark.read.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "acl-orders")
    )
    for k, v in secured.items():
        reader = reader.option(k, v)
    got = reader.load().selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v").collect()
    assert sorted((r.k, r.v) for r in got) == sorted(rows)
    # a topic without bindings is refused at planning: tests/security/test_acl.py (no Spark job needed)
