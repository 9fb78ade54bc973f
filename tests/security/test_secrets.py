"""Secrets are never answered or logged (issue 29, hole 2): a broker process with SASL PLAIN users in
``sasl.jaas.config`` and in listener- and mechanism-prefixed JAAS entries, ``ssl.key.password``,
``ssl.keystore.password``, an inline (encrypted) PEM key and an OAuth client secret pylog does not know.

DescribeConfigs (every version, from pylog's client and from confluent-kafka's AdminClient) answers each with a
null value, ``IsSensitive`` true and null synonym values; ``pylog-broker configs --describe`` prints them as
kafka-configs does (``key=null sensitive=true``); the broker's whole stderr at DEBUG (start, describes, failed
logins, refused config changes) holds none of the secret strings, and neither does any error a client sees; a
malformed JAAS entry fails naming the key, never the password.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.cli import main
from broker_runtime.client import KafkaClient
from broker_runtime.client.connection import BrokerConnection
from broker_runtime.errors import ConfigError, ErrorCode, KafkaError
from broker_runtime.launch.command import parse_listening_line, start_command
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.security import ClientSecurity
from broker_runtime.security.secrets import HIDDEN, base_config_name, is_sensitive, redacted
from broker_runtime.server.config import BrokerConfig, sensitive_broker_config
from tests.security.certs import make_pki
from tests.server.rawclient import create_topic_body

pytestmark = pytest.mark.timeout(120)

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
KEY_PASSWORD = "kp-SECRET-e41d"
KEYSTORE_PASSWORD = "ksp-SECRET-0a9c"
GLOBAL_ADMIN_PW = "adm-GLOBAL-7f3b"
LPM_ADMIN_PW = "adm-LPM-91c2"
LPM_ALICE_PW = "alice-LPM-55d7"
LSSL_ADMIN_PW = "adm-LSSL-2b8e"
OAUTH_SECRET = "oauth-SECRET-c3d1"
MYSTERY_SECRET = "mystery-SECRET-77af"

#: The sensitive broker configs of the fixture's broker (inline key and chain added by the fixture).
SECRET_CONFIGS = {
    "sasl.jaas.config": f'{PLAIN} required user_admin="{GLOBAL_ADMIN_PW}";',
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
        f'{PLAIN} required user_admin="{LPM_ADMIN_PW}" user_alice="{LPM_ALICE_PW}";'
    ),
    "listener.name.sasl_ssl.sasl.jaas.config": f'{PLAIN} required user_admin="{LSSL_ADMIN_PW}";',
    "ssl.key.password": KEY_PASSWORD,
    "ssl.keystore.password": KEYSTORE_PASSWORD,
    "sasl.oauthbearer.client.credentials.client.secret": OAUTH_SECRET,
    # A name pylog does not know: its type cannot be told, so it is sensitive (Kafka's maybeSensitive).
    "mystery.token": MYSTERY_SECRET,
}
INLINE_KEY = "listener.name.sasl_ssl.ssl.keystore.key"
INLINE_CHAIN = "listener.name.sasl_ssl.ssl.keystore.certificate.chain"


@dataclass
class SecretBroker:
    addresses: dict[str, str]  # listener -> host:port
    log_path: Path
    ca: Path
    data_dir: Path
    secrets: list[str]  # every string that must never be answered or logged

    def security(self, listener: str, user: str, password: str) -> ClientSecurity:
        props = {
            "security.protocol": listener,
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": f'{PLAIN} required username="{user}" password="{password}";',
        }
        if listener == "SASL_SSL":
            props["ssl.truststore.location"] = str(self.ca)
        return ClientSecurity.from_properties(props)

    def admin(self, listener: str = "SASL_PLAINTEXT") -> KafkaClient:
        pw = LPM_ADMIN_PW if listener == "SASL_PLAINTEXT" else LSSL_ADMIN_PW
        return KafkaClient(self.addresses[listener], security=self.security(listener, "admin", pw))

    def leaks(self, text: str) -> list[str]:
        return [s for s in self.secrets if s in text]


def _key_body_line(pem: str) -> str:
    """A line of the key's base64 body: what a leaked key would show."""
    return next(line for line in pem.splitlines() if line and not line.startswith("-----"))


@pytest.fixture(scope="module")
def secret_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecretBroker]:
    data_dir = tmp_path_factory.mktemp("secrets")
    pki = make_pki(data_dir / "pki", key_password=KEY_PASSWORD)
    key_pem = pki.server_key.read_text()
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "log.dirs": str(data_dir / "logs"),
        "num.partitions": "1",
        "pylog.metrics.listener": "127.0.0.1:0",
        **SECRET_CONFIGS,
    }
    config_file = data_dir / "broker.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    # The inline PEM key and chain are multi-line: they go as --override (a properties file would need escapes).
    overrides = {INLINE_KEY: key_pem, INLINE_CHAIN: pki.server_cert.read_text()}
    log_path = data_dir / "broker-stderr.log"
    with open(log_path, "w") as err:
        proc = subprocess.Popen(
            start_command(config_file, overrides, log_level="DEBUG"),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert parse_listening_line(first) is not None, (first, log_path.read_text()[-2000:])
        deadline = time.monotonic() + 10
        addresses: dict[str, str] = {}
        while len(addresses) < 2 and time.monotonic() < deadline:
            for name, host, port in re.findall(
                r"listener (\w+) \(\w+\) bound to ([\d.]+):(\d+)", log_path.read_text()
            ):
                addresses[name] = f"{host}:{port}"
            time.sleep(0.05)
        assert set(addresses) == {"SASL_PLAINTEXT", "SASL_SSL"}, log_path.read_text()[-2000:]
        secrets = [
            KEY_PASSWORD,
            KEYSTORE_PASSWORD,
            GLOBAL_ADMIN_PW,
            LPM_ADMIN_PW,
            LPM_ALICE_PW,
            LSSL_ADMIN_PW,
            OAUTH_SECRET,
            MYSTERY_SECRET,
            _key_body_line(key_pem),
        ]
        yield SecretBroker(addresses, log_path, pki.ca, data_dir, secrets)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


SENSITIVE_NAMES = [*SECRET_CONFIGS, INLINE_KEY, INLINE_CHAIN]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_describe_configs_answers_secrets_null_and_sensitive(
    secret_broker: SecretBroker, version: int
) -> None:
    """Every version of DescribeConfigs, on both listeners, from pylog's client: no secret in the answer."""
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        host, _, port = secret_broker.addresses[listener].rpartition(":")
        pw = LPM_ADMIN_PW if listener == "SASL_PLAINTEXT" else LSSL_ADMIN_PW
        conn = BrokerConnection(
            host,
            int(port),
            client_id="secrets-test",
            timeout_s=10,
            min_versions={ApiKey.DESCRIBE_CONFIGS: version},
            max_versions={ApiKey.DESCRIBE_CONFIGS: version},
            security=secret_broker.security(listener, "admin", pw),
        )
        try:
            body: dict[str, Any] = {
                "Resources": [
                    {"ResourceType": 4, "ResourceName": "0", "ConfigurationKeys": None},
                    {"ResourceType": 4, "ResourceName": "", "ConfigurationKeys": None},
                ]
            }
            if version >= 1:
                body["IncludeSynonyms"] = True
            used, answer = conn.request(ApiKey.DESCRIBE_CONFIGS, body)
        finally:
            conn.close()
        assert used == version
        assert not secret_broker.leaks(repr(answer))
        configs = {c["Name"]: c for c in answer["Results"][0]["Configs"]}
        for name in SENSITIVE_NAMES:
            entry = configs[name]
            assert (entry["Value"], entry["IsSensitive"]) == (None, True), name
            if version >= 1:
                assert entry["Synonyms"] and all(s["Value"] is None for s in entry["Synonyms"]), name
            if version >= 3:
                assert entry["ConfigType"] == (0 if name == "mystery.token" else 9), name  # UNKNOWN, PASSWORD
        # What is no secret stays readable.
        assert (configs["num.partitions"]["Value"], configs["num.partitions"]["IsSensitive"]) == ("1", False)
        assert configs["sasl.enabled.mechanisms"]["Value"] == "PLAIN"


def test_confluent_admin_client_sees_no_secret(secret_broker: SecretBroker) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient(
        {
            "bootstrap.servers": secret_broker.addresses["SASL_SSL"],
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(secret_broker.ca),
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": LSSL_ADMIN_PW,
        }
    )
    resource = ConfigResource(ResourceType.BROKER, "0")
    entries = admin.describe_configs([resource], request_timeout=20)[resource].result(30)
    for name in SENSITIVE_NAMES:
        entry = entries[name]
        assert (entry.value, entry.is_sensitive) == (None, True), name
        assert all(s.value is None for s in entry.synonyms.values()), name
    shown = {name: (e.value, [(s.name, s.value) for s in e.synonyms.values()]) for name, e in entries.items()}
    assert not secret_broker.leaks(repr(shown))
    assert entries["num.partitions"].value == "1" and not entries["num.partitions"].is_sensitive


def test_configs_tool_prints_sensitive_configs_as_kafka_configs(
    secret_broker: SecretBroker, tmp_path: Path
) -> None:
    command_config = tmp_path / "admin.properties"
    command_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f'sasl.jaas.config={PLAIN} required username="admin" password="{LPM_ADMIN_PW}";\n'
    )
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(
            [
                "configs",
                "--bootstrap-server",
                secret_broker.addresses["SASL_PLAINTEXT"],
                "--command-config",
                str(command_config),
                "--entity-type",
                "brokers",
                "--entity-name",
                "0",
                "--describe",
                "--all",
            ]
        )
    assert status == 0, err.getvalue()
    lines = out.getvalue().splitlines()
    assert (
        "  sasl.jaas.config=null sensitive=true synonyms={STATIC_BROKER_CONFIG:sasl.jaas.config=null}"
        in lines
    )
    assert f"  {INLINE_KEY}=null sensitive=true synonyms={{STATIC_BROKER_CONFIG:{INLINE_KEY}=null}}" in lines
    assert "  num.partitions=1 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.partitions=1}" in lines
    assert not secret_broker.leaks(out.getvalue() + err.getvalue())


def test_refused_config_changes_and_logins_do_not_echo_secrets(secret_broker: SecretBroker) -> None:
    """A topic config or a dynamic broker config holding a JAAS entry is refused naming the key only; a login
    with another listener's password fails; none of these answers carries the secret."""
    jaas = SECRET_CONFIGS["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    with secret_broker.admin() as client:
        _, created = client.any_connection().request(
            ApiKey.CREATE_TOPICS, create_topic_body("leaky", configs={"sasl.jaas.config": jaas})
        )
        topic = created["Topics"][0]
        assert topic["ErrorCode"] == ErrorCode.INVALID_CONFIG
        assert "sasl.jaas.config" in topic["ErrorMessage"] and not secret_broker.leaks(repr(created))
        with pytest.raises(KafkaError) as refused:
            client.admin.alter_configs(4, "0", {"listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})
        assert "sasl.jaas.config" in str(refused.value) and not secret_broker.leaks(str(refused.value))
    # alice's password of the SASL_PLAINTEXT listener is no password on SASL_SSL (its own user list).
    failed = _failed_login(secret_broker, "SASL_SSL", "alice", LPM_ALICE_PW)
    assert "Invalid username or password" in str(failed) and not secret_broker.leaks(str(failed))


def test_a_jaas_entry_in_a_free_form_topic_config_is_hidden(secret_broker: SecretBroker) -> None:
    """A secret put where no secret belongs (a topic config pylog keeps as text) is hidden by its value: in the
    CreateTopics answer (v5+), in DescribeConfigs of the topic and in the log."""
    jaas = SECRET_CONFIGS["sasl.jaas.config"]
    with secret_broker.admin() as client:
        version, created = client.any_connection().request(
            ApiKey.CREATE_TOPICS,
            create_topic_body("misplaced", configs={"leader.replication.throttled.replicas": jaas}),
        )
        assert version >= 5 and created["Topics"][0]["ErrorCode"] == 0
        entry = next(
            c for c in created["Topics"][0]["Configs"] if c["Name"] == "leader.replication.throttled.replicas"
        )
        assert (entry["Value"], entry["IsSensitive"]) == (None, True)
        assert not secret_broker.leaks(repr(created))
        described = {e.name: e for e in client.admin.describe_config_entries(2, "misplaced")}
        entry = described["leader.replication.throttled.replicas"]
        assert (entry.value, entry.sensitive) == (None, True)
        assert all(v is None for _, v, _ in entry.synonyms)
        assert described["retention.ms"].value is not None and not described["retention.ms"].sensitive


def _failed_login(secret_broker: SecretBroker, listener: str, user: str, password: str) -> KafkaError:
    client = KafkaClient(
        secret_broker.addresses[listener],
        security=secret_broker.security(listener, user, password),
        retries=0,
    )
    try:
        with pytest.raises(KafkaError) as failed:
            client.metadata([])
    finally:
        client.close()
    return failed.value


def test_broker_log_and_metrics_hold_no_secret(secret_broker: SecretBroker) -> None:
    """The broker's whole stderr at DEBUG (the start, the describes, refusals and logins above, a failed login)
    and its Prometheus page."""
    with secret_broker.admin("SASL_SSL") as client:
        client.admin.describe_config_entries(4, "0")
    _failed_login(secret_broker, "SASL_PLAINTEXT", "admin", LSSL_ADMIN_PW)  # another listener's password
    time.sleep(0.3)  # the broker writes its lines for the refused login
    text = secret_broker.log_path.read_text()
    assert not secret_broker.leaks(text)
    assert " DEBUG " in text and "authenticated as User:admin" in text  # the log is the real, verbose one
    assert "authentication failed" in text
    assert "unknown config key 'sasl.oauthbearer.client.credentials.client.secret' is ignored" in text
    assert "unknown config key 'mystery.token' is ignored" in text
    metrics_url = re.search(r"serves metrics on (http://\S+/metrics)", text)
    assert metrics_url is not None
    with urllib.request.urlopen(metrics_url.group(1), timeout=10) as answer:
        page = answer.read().decode()
    assert "kafka_server" in page and not secret_broker.leaks(page)


MALFORMED_JAAS = [
    f'{PLAIN} required username="admin" password="pw-MALFORMED-123"',  # no ';'
    f'{PLAIN} required username="admin" password="pw-MALFORMED-123"; trailing="pw-MALFORMED-123";',
    f'{PLAIN} mandatory username="admin" password="pw-MALFORMED-123";',  # not a control flag
    f'{PLAIN} required username="admin" password="pw-MALFORMED-123 ;',  # unterminated quote
    f'{PLAIN} required username="admin" password=pw-MALFORMED-123"x";',
    'password="pw-MALFORMED-123";',  # no login module
]


@pytest.mark.parametrize("jaas", MALFORMED_JAAS)
def test_malformed_jaas_error_names_the_key_not_the_password(jaas: str, tmp_path: Path) -> None:
    key = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    with pytest.raises(ConfigError) as broker_side:
        BrokerConfig.from_properties(
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "inter.broker.listener.name": "SASL_PLAINTEXT",
                "log.dirs": str(tmp_path),
                key: jaas,
            }
        )
    assert key in str(broker_side.value) and "pw-MALFORMED-123" not in str(broker_side.value)
    with pytest.raises(ConfigError) as client_side:
        ClientSecurity.from_properties(
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas},
            name_prefix="option kafka.",
        )
    assert "sasl.jaas.config" in str(client_side.value) and "pw-MALFORMED-123" not in str(client_side.value)


def test_start_refusing_a_malformed_jaas_prints_no_password(tmp_path: Path) -> None:
    config_file = tmp_path / "broker.properties"
    config_file.write_text(
        "listeners=SASL_PLAINTEXT://127.0.0.1:0\ninter.broker.listener.name=SASL_PLAINTEXT\n"
        f"log.dirs={tmp_path / 'logs'}\n"
        f'sasl.jaas.config={PLAIN} required user_admin="pw-MALFORMED-123"\n'
    )
    done = subprocess.run(
        start_command(config_file, log_level="DEBUG"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "sasl.jaas.config" in done.stderr
    assert "pw-MALFORMED-123" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("name", "base", "sensitive"),
    [
        ("sasl.jaas.config", "sasl.jaas.config", True),
        ("listener.name.client.sasl.jaas.config", "sasl.jaas.config", True),
        ("listener.name.client.scram-sha-256.sasl.jaas.config", "sasl.jaas.config", True),
        ("listener.name.client.ssl.key.password", "ssl.key.password", True),
        ("listener.name.client.ssl.keystore.key", "ssl.keystore.key", True),
        ("ssl.truststore.certificates", "ssl.truststore.certificates", True),
        ("password.encoder.secret", "password.encoder.secret", True),
        ("delegation.token.secret.key", "delegation.token.secret.key", True),
        ("listener.name.client.plain.connections.max.reauth.ms", "connections.max.reauth.ms", False),
        ("listener.name.client.ssl.client.auth", "ssl.client.auth", False),
        ("ssl.keystore.location", "ssl.keystore.location", False),
        ("log.retention.ms", "log.retention.ms", False),
        ("no.such.config", "no.such.config", True),  # unknown: sensitive, as Kafka's maybeSensitive
        ("listener.name.client.no.such.config", "no.such.config", True),
    ],
)
def test_the_sensitivity_rule(name: str, base: str, sensitive: bool) -> None:
    assert base_config_name(name) == base
    assert sensitive_broker_config(name, "x") is sensitive


def test_a_jaas_entry_or_a_key_in_any_config_is_sensitive() -> None:
    assert sensitive_broker_config("cluster.id", f'{PLAIN} required user_a="p";')
    assert sensitive_broker_config("cluster.id", "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n")
    assert not sensitive_broker_config("cluster.id", "pylog-cluster")
    assert is_sensitive("retention.ms", "1", known={"cleanup.policy"})
    assert redacted({"sasl.jaas.config": "x", "num.partitions": "3"}, known={"num.partitions"}) == {
        "sasl.jaas.config": HIDDEN,
        "num.partitions": "3",
    }
