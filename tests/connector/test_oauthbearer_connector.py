"""The connector with ``kafka.sasl.mechanism=OAUTHBEARER``: Kafka's client-credentials options
(``kafka.sasl.oauthbearer.token.endpoint.url``, ``...client.credentials.client.id`` / ``.client.secret``,
``kafka.sasl.oauthbearer.scope``) carry a batch write and a batch read through real Spark against pylog's broker
validating the identity provider's tokens (tests/support/oauth.py); the options are used (not in the "unused"
warning) and the client secret is in no repr."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from broker_runtime.errors import ConfigError
from broker_runtime.security.oauth_http import ALLOWED_URLS_ENV
from spark_kafka_log.common.reader_options import parse_reader_options
from tests.support.oauth import AUDIENCE, ISSUER, IdentityProvider, allowed_urls, spark_idp_port

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, IdentityProvider]]:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    # The port the spark fixture allowed (its Python workers cannot see a later change of the environment).
    with IdentityProvider(port=spark_idp_port()) as idp:
        config = BrokerConfig.from_properties(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,OAUTH://127.0.0.1:0",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
                "log.dirs": str(tmp_path_factory.mktemp("oauth-connector") / "logs"),
                "num.partitions": "2",
                "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
                "sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
                "sasl.oauthbearer.expected.audience": AUDIENCE,
                "sasl.oauthbearer.expected.issuer": ISSUER,
            }
        )
        broker = Broker(config).start()
        try:
            yield broker.listener_bootstrap("OAUTH"), idp
        finally:
            broker.stop()


def _options(token_url: str) -> dict[str, str]:
    return {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "kafka.sasl.oauthbearer.token.endpoint.url": token_url,
        "kafka.sasl.oauthbearer.client.credentials.client.id": "pylog-client",
        "kafka.sasl.oauthbearer.client.credentials.client.secret": "client-secret",
        "kafka.sasl.oauthbearer.scope": "kafka",
    }


def test_oauth_options_are_used_and_the_secret_is_not_shown(caplog: pytest.LogCaptureFixture) -> None:
    options = {
        "kafka.bootstrap.servers": "127.0.0.1:9",
        "subscribe": "t",
        **_options("https://idp.test/token"),
    }
    with pytest.raises(
        ConfigError, match=f"option kafka.sasl.oauthbearer.token.endpoint.url=.*{ALLOWED_URLS_ENV}"
    ):
        parse_reader_options(options)  # options cannot make the driver or the executors fetch any URL
    with allowed_urls("https://idp.test/token"), caplog.at_level(logging.WARNING, logger="spark_kafka_log"):
        parsed = parse_reader_options(options)
    assert parsed.security.oauth is not None and parsed.security.oauth.scope == "kafka"
    assert "client-secret" not in repr(parsed)
    assert not [r for r in caplog.records if "not used by pylog" in r.getMessage()]


def test_spark_writes_and_reads_with_oauthbearer(
    spark: Any, oauth_broker: tuple[str, IdentityProvider]
) -> None:
    bootstrap, idp = oauth_broker
    rows = [(f"k{i}", f"v{i}") for i in range(100)]
    writer = (
        spark.createDataFrame(rows, "key string, value string")
        .write.format("pylog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "oauth")
    )
    for k, v in _options(idp.token_url).items():
        writer = writer.option(k, v)
    writer.mode("append").save()
    reader = (
        spark.read.format("pylog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "oauth")
    )
    for k, v in _options(idp.token_url).items():
        reader = reader.option(k, v)
    got = reader.load().selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v").collect()
    assert sorted((r.k, r.v) for r in got) == sorted(rows)
    assert idp.token_requests >= 1 and idp.scopes_asked[-1] == "kafka"
