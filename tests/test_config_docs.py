"""Broker and topic configs are declared once: the README's tables are those declarations, and the declarations
agree with the other places that name configs (the TLS keys, Kafka's PASSWORD configs, the dynamic set).

The README check fails when a declaration and its README row differ (fix: ``python -m tests.support.config_docs``).
"""

from __future__ import annotations

import dataclasses

from broker_runtime.configdef import CONFIG, ConfigType
from broker_runtime.security.secrets import PASSWORD_CONFIGS
from broker_runtime.security.tls import SSL_KEYS
from broker_runtime.server.config import BROKER_CONFIGS, BrokerConfig
from broker_runtime.server.dynamic_config import DYNAMIC_BROKER_CONFIGS
from broker_runtime.storage.config import (
    ACCEPTED_TOPIC_CONFIGS,
    BROKER_LOG_SYNONYMS,
    TOPIC_CONFIG_NAMES,
    TOPIC_CONFIGS,
    LogConfig,
)
from tests.support import config_docs


def test_readme_tables_are_the_declarations() -> None:
    text = config_docs.README.read_text()
    assert config_docs.generated(text) == text, f"README.md's config tables are stale: {config_docs.FIX}"


def test_each_config_is_declared_once_and_its_default_parses() -> None:
    for keys in (BROKER_CONFIGS, (*TOPIC_CONFIGS, *ACCEPTED_TOPIC_CONFIGS)):
        names = [key.name for key in keys]
        assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
        for key in keys:
            key.default_value()  # raises naming the key when the declared default is not a valid value
            assert key.doc, key.name
    assert {key.name for key in (*TOPIC_CONFIGS, *ACCEPTED_TOPIC_CONFIGS)} == TOPIC_CONFIG_NAMES


def test_every_typed_field_is_a_declared_key() -> None:
    """BrokerConfig's and LogConfig's typed access is the declarations, but for the few computed fields."""
    computed = {"BrokerConfig": {"log", "props", "warnings"}, "LogConfig": {"log_dirs", "topic_overrides"}}
    for cls in (BrokerConfig, LogConfig):
        undeclared = {f.name for f in dataclasses.fields(cls) if CONFIG not in f.metadata}
        assert undeclared == computed[cls.__name__]


def test_declarations_agree_with_the_tls_keys_kafkas_passwords_and_the_dynamic_set() -> None:
    declared = {key.name: key for key in BROKER_CONFIGS}
    assert {name for name in declared if name.startswith("ssl.")} == set(SSL_KEYS)
    passwords = {name for name, key in declared.items() if key.type == ConfigType.PASSWORD}
    assert passwords == set(declared) & PASSWORD_CONFIGS  # sensitive exactly where Kafka's type is PASSWORD
    assert all(key.sensitive == (key.type == ConfigType.PASSWORD) for key in BROKER_CONFIGS)
    assert {s.key.name for s in BROKER_LOG_SYNONYMS} <= DYNAMIC_BROKER_CONFIGS
    assert all(key.dynamic for key in (*TOPIC_CONFIGS, *ACCEPTED_TOPIC_CONFIGS))


#: The broker configs Kafka 4.x updates at runtime (``DynamicBrokerConfig.AllDynamicConfigs``: the listeners' TLS
#: stores, ``LogCleaner``, ``DynamicLogConfig`` -- the storage's broker log keys, checked above --,
#: ``DynamicThreadPool``, ``DynamicListenerConfig``, ``SocketServer``, the producer state's), by the names pylog
#: may declare.
KAFKA_DYNAMIC = frozenset(
    {
        *(f"ssl.{k}" for k in ("keystore.type", "keystore.location", "keystore.password", "key.password")),
        *(f"ssl.{k}" for k in ("truststore.type", "truststore.location", "truststore.password")),
        *(f"ssl.{k}" for k in ("keystore.certificate.chain", "keystore.key", "truststore.certificates")),
        *("log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor"),
        *("log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms"),
        *(
            "num.io.threads",
            "num.replica.fetchers",
            "num.recovery.threads.per.data.dir",
            "background.threads",
        ),
        *("metric.reporters", "listeners", "listener.security.protocol.map", "principal.builder.class"),
        *("ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols"),
        *("ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm"),
        *("ssl.secure.random.implementation", "ssl.client.auth", "ssl.engine.factory.class"),
        *("sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms"),
        *(f"sasl.kerberos.{k}" for k in ("service.name", "kinit.cmd", "ticket.renew.window.factor")),
        *(f"sasl.kerberos.{k}" for k in ("ticket.renew.jitter", "min.time.before.relogin")),
        "sasl.kerberos.principal.to.local.rules",
        *(f"sasl.login.refresh.{k}" for k in ("window.factor", "window.jitter", "min.period.seconds")),
        "sasl.login.refresh.buffer.seconds",
        *("max.connections", "max.connection.creation.rate", "num.network.threads"),
        *("max.connections.per.ip", "max.connections.per.ip.overrides"),
        *("producer.id.expiration.ms", "transaction.partition.verification.enable", "config.providers"),
        *(s.key.name for s in BROKER_LOG_SYNONYMS),
    }
)


def test_the_dynamic_keys_are_kafkas_and_each_refused_one_says_why() -> None:
    """Every key pylog changes at runtime is one Kafka changes at runtime; a key Kafka changes at runtime that
    pylog declares but cannot apply carries the reason AlterConfigs gives (``restart_reason``), and no other key
    has one."""
    for key in BROKER_CONFIGS:
        if key.dynamic:
            assert key.name in KAFKA_DYNAMIC, key.name
        assert bool(key.restart_reason) == (key.name in KAFKA_DYNAMIC and not key.dynamic), key.name
