"""Apache Kafka's Java client logs in to pylog's broker with SASL/OAUTHBEARER the way a managed cluster's users do
(KIP-768): ``OAuthBearerLoginCallbackHandler`` gets a token from the test identity provider's token endpoint with
client credentials (Kafka 4.x's ``sasl.oauthbearer.client.credentials.*`` names), and pylog's broker verifies it
against the provider's JWKS. The client is ``kafka-topics`` (AdminClient) in a JVM of its own: Kafka 4.x needs
the token endpoint in the JVM property ``org.apache.kafka.sasl.oauthbearer.allowed.urls``, which the shared
tool-runner JVM cannot take per run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.apache_kafka import run_tool
from tests.support.oauth import AUDIENCE, ISSUER, IdentityProvider

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("apache_kafka_tools")]


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, IdentityProvider]]:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    with IdentityProvider() as idp:
        config = BrokerConfig.from_properties(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,OAUTH://127.0.0.1:0",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
                "log.dirs": str(tmp_path_factory.mktemp("oauth-java") / "logs"),
                "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.oauth.oauthbearer.sasl.jaas.config": (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
                ),
                "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
                ),
                "listener.name.oauth.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
                "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.audience": AUDIENCE,
                "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.issuer": ISSUER,
            }
        )
        broker = Broker(config).start()
        try:
            yield broker, idp
        finally:
            broker.stop()


@pytest.mark.compat(
    "kafka-java", "SASL/OAUTHBEARER: client-credentials login (KIP-768) verified against a JWKS"
)
def test_java_client_logs_in_with_client_credentials(
    oauth_broker: tuple[Any, IdentityProvider], tmp_path: Path
) -> None:
    from broker_runtime.client import KafkaClient

    broker, idp = oauth_broker
    config = tmp_path / "oauth.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=OAUTHBEARER\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;\n"
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer."
        "OAuthBearerLoginCallbackHandler\n"
        f"sasl.oauthbearer.token.endpoint.url={idp.token_url}\n"
        "sasl.oauthbearer.client.credentials.client.id=pylog-client\n"
        "sasl.oauthbearer.client.credentials.client.secret=client-secret\n"
        "sasl.oauthbearer.scope=kafka\n"
    )
    asked = idp.token_requests
    run_tool(
        "kafka-topics",
        "--bootstrap-server",
        broker.listener_bootstrap("OAUTH"),
        "--command-config",
        str(config),
        "--create",
        "--topic",
        "made-by-java-oauth",
        "--partitions",
        "2",
        env={"JAVA_TOOL_OPTIONS": f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={idp.token_url}"},
    )
    assert idp.token_requests > asked and idp.scopes_asked[-1] == "kafka"
    with KafkaClient(broker.listener_bootstrap("PLAINTEXT")) as client:
        assert len(client.metadata(["made-by-java-oauth"]).topics["made-by-java-oauth"].partitions) == 2
