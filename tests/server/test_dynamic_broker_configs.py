"""Dynamic broker configs as Kafka's ``DynamicBrokerConfig`` updates them: what is applied live (a listener's key
store for its new connections, the connection limits), what is accepted without effect (librdkafka's own admin
test sets ``sasl.kerberos.min.time.before.relogin`` on a broker), what is refused and why, and the precedence and
synonyms DescribeConfigs answers. One broker (PLAINTEXT for the admin client, SSL for the key store) for all."""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.server.dynamic_config import (
    broker_config_synonyms,
    effective_props,
    refused_dynamic,
)
from tests.security.certs import Pki, make_pki, renew_server
from tests.server.rawclient import RawConnection
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(120)

KEYSTORE = "listener.name.ssl.ssl.keystore.location"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("dyn-pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Any]:
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server),
        "ssl.key.password": pki.key_password,
    }
    started = start_broker(tmp_path_factory.mktemp("dyn-broker"), props)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def admin(broker: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.listener_bootstrap("PLAINTEXT")})


def _set_names(admin: AdminClient, resource: str, configs: dict[str, str]) -> None:
    """librdkafka's IncrementalAlterConfigs SET on broker ``resource`` (a node id: librdkafka refuses ``""``)."""
    entries = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in configs.items()]
    res = ConfigResource("broker", resource, incremental_configs=entries)
    admin.incremental_alter_configs([res])[res].result(10)


def _alter(broker: Any, resource: str, configs: dict[str, str], *delete: str) -> None:
    """pylog's client: IncrementalAlterConfigs SET / DELETE on broker ``resource`` (``""`` too)."""
    with KafkaClient(broker.listener_bootstrap("PLAINTEXT")) as client:
        client.admin.alter_configs(4, resource, configs, delete)


def _described(admin: AdminClient, resource: str) -> dict[str, Any]:
    res = ConfigResource("broker", resource)
    return dict(admin.describe_configs([res])[res].result(10))


def _refusal(broker: Any, resource: str, configs: dict[str, str]) -> str:
    """The broker's INVALID_REQUEST message for setting ``configs`` on broker ``resource``."""
    with pytest.raises(KafkaError) as caught:
        _alter(broker, resource, configs)
    assert caught.value.code == ErrorCode.INVALID_REQUEST, caught.value
    return str(caught.value)


def _tls_call(broker: Any, pki: Pki) -> tuple[ssl.SSLSocket, int]:
    """A new TLS connection to the SSL listener (checked against the test CA) and its server certificate's
    serial number; ApiVersions answered on it."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    host, _, port = broker.listener_bootstrap("SSL").rpartition(":")
    tls = context.wrap_socket(
        socket.create_connection((host, int(port)), timeout=10), server_hostname="localhost"
    )
    serial = int(tls.getpeercert()["serialNumber"], 16)
    assert _api_versions(tls) == 0
    return tls, serial


def _api_versions(sock: ssl.SSLSocket) -> int:
    conn = RawConnection.__new__(RawConnection)
    conn.sock, conn.correlation_id = sock, 0
    answer = conn.call(ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
    return int(answer["ErrorCode"])


def _serial(path: Path) -> int:
    from cryptography import x509

    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def test_a_renewed_key_store_serves_new_connections_while_open_ones_keep_working(
    broker: Any, admin: AdminClient, pki: Pki, tmp_path: Path
) -> None:
    """A listener's key store set per broker and per listener (Kafka's only way) is read at once: a new
    connection gets the new certificate, one opened before keeps working on the old; naming the same file again
    re-reads it (a certificate rotated in place); a file that does not load is refused and changes nothing."""
    old, old_serial = _tls_call(broker, pki)
    assert old_serial == _serial(pki.server)
    renewed = tmp_path / "renewed.pem"
    serial = renew_server(pki, renewed, pki.key_password)
    try:
        _set_names(admin, "0", {KEYSTORE: str(renewed)})
        fresh, fresh_serial = _tls_call(broker, pki)
        assert fresh_serial == serial
        assert _api_versions(old) == 0  # the connection of before the reload still works
        fresh.close()
        rotated = renew_server(pki, renewed, pki.key_password)  # written over the same file
        _set_names(admin, "0", {KEYSTORE: str(renewed)})
        again, again_serial = _tls_call(broker, pki)
        assert again_serial == rotated
        again.close()
        missing = _refusal(broker, "0", {KEYSTORE: str(tmp_path / "missing.pem")})
        assert KEYSTORE in missing or "missing.pem" in missing
        assert _described(admin, "0")[KEYSTORE].value == str(renewed)
    finally:
        old.close()
        _alter(broker, "0", {}, KEYSTORE)
    back, back_serial = _tls_call(broker, pki)
    back.close()
    assert back_serial == _serial(pki.server)  # the static key store again


def test_kerberos_relogin_is_accepted_per_broker_described_and_warned(
    broker: Any, admin: AdminClient, caplog: pytest.LogCaptureFixture
) -> None:
    """librdkafka's admin test sets ``sasl.kerberos.min.time.before.relogin`` on a broker: accepted as Kafka
    accepts it, stored, described as DYNAMIC_BROKER_CONFIG, with a WARNING that it has no effect; on the
    cluster-wide default it is refused as Kafka refuses a per-broker key there."""
    name = "sasl.kerberos.min.time.before.relogin"
    with caplog.at_level(logging.WARNING, logger="broker_runtime.server.reconfigure"):
        _set_names(admin, "0", {name: "58000"})
    try:
        assert any(name in r.getMessage() and "no effect" in r.getMessage() for r in caplog.records)
        entry = _described(admin, "0")[name]
        assert (entry.value, entry.source, entry.is_read_only) == (
            "58000",
            ConfigSource.DYNAMIC_BROKER_CONFIG.value,
            False,
        )
        refused = _refusal(broker, "", {name: "58000"})
        assert "broker id must be specified" in refused and name in refused
    finally:
        _alter(broker, "0", {}, name)


def _connect_from(source_ip: str, bootstrap: str) -> RawConnection:
    host, _, port = bootstrap.rpartition(":")
    conn = RawConnection.__new__(RawConnection)
    conn.sock = socket.create_connection((host, int(port)), timeout=10, source_address=(source_ip, 0))
    conn.correlation_id = 0
    return conn


def test_connection_limits_change_at_runtime(broker: Any) -> None:
    """``max.connections.per.ip.overrides`` set on the cluster-wide default (clients of 127.0.0.2, away from the
    admin clients): the connections open stay, a new one over the limit is refused at once; deleted, the limit
    is gone again."""
    bootstrap = broker.listener_bootstrap("PLAINTEXT")
    quotas = broker.quotas
    held = [_connect_from("127.0.0.2", bootstrap) for _ in range(2)]
    try:
        assert all(_ok(c) for c in held)
        _alter(broker, "", {"max.connections.per.ip.overrides": "127.0.0.2:2"})
        refused_before = quotas.refused["max.connections.per.ip"]
        with _connect_from("127.0.0.2", bootstrap) as extra:
            assert extra.is_closed_by_peer()
        assert quotas.refused["max.connections.per.ip"] == refused_before + 1
        assert all(_ok(c) for c in held)
    finally:
        for conn in held:
            conn.close()
        _alter(broker, "", {}, "max.connections.per.ip.overrides")
    with _connect_from("127.0.0.2", bootstrap) as again:
        assert _ok(again)


def test_refusals_name_the_key_and_why(broker: Any) -> None:
    """Kafka's refusals, in Kafka's words, with pylog's reason where Kafka would have applied the key."""
    assert "only per-listener using the listener prefix" in _refusal(
        broker, "0", {"ssl.keystore.location": "/x"}
    )
    assert "broker id must be specified" in _refusal(broker, "", {KEYSTORE: "/x"})
    listeners = _refusal(broker, "0", {"listeners": "PLAINTEXT://127.0.0.1:0"})
    assert "Cannot update these configs dynamically: listeners" in listeners and "binds" in listeners
    jaas = "listener.name.ssl.plain.sasl.jaas.config"
    assert "existing listener SSL" in _refusal(broker, "0", {jaas: "x"})
    assert "no listener SASL_SSL" in _refusal(
        broker, "0", {"listener.name.sasl_ssl.ssl.keystore.location": "/x"}
    )
    assert "not a broker config pylog knows" in _refusal(broker, "0", {"no.such.key": "1"})
    steps = _refusal(broker, "", {"num.io.threads": "17"})
    assert "should not be greater than double the current value 8" in steps


def _ok(conn: RawConnection) -> bool:
    answer = conn.call(ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
    return answer["ErrorCode"] == 0


def test_precedence_and_synonyms_are_kafkas() -> None:
    """Per-broker dynamic > cluster-wide dynamic > static, a higher layer hiding its synonyms below (Kafka's
    ``overrideProps``); ``brokerConfigSynonyms``; the refusal order of ``DynamicBrokerConfig.validateConfigs``."""
    static = {"log.retention.ms": "1000", "message.max.bytes": "100"}
    dynamic = {
        "": {"log.retention.hours": "2", "message.max.bytes": "200"},
        "0": {"message.max.bytes": "300"},
    }
    props = effective_props(static, dynamic, 0)
    assert "log.retention.ms" not in props and props["log.retention.hours"] == "2"
    assert props["message.max.bytes"] == "300"
    assert effective_props(static, dynamic, 1)["message.max.bytes"] == "200"
    assert broker_config_synonyms("log.retention.minutes") == [
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    ]
    assert broker_config_synonyms(KEYSTORE) == [KEYSTORE, "ssl.keystore.location"]
    assert broker_config_synonyms(KEYSTORE, match_listener=False) == [KEYSTORE]
    assert broker_config_synonyms("listener.name.x.plain.sasl.jaas.config")[1] == "sasl.jaas.config"
    # Non-dynamic first, then the missing listener prefix, then per-broker keys on the default.
    both = refused_dynamic(["num.partitions", "ssl.keystore.location"], "", ["SSL"])
    assert both is not None and both.startswith("Cannot update these configs dynamically: num.partitions")
    assert refused_dynamic([KEYSTORE, "message.max.bytes"], "0", ["SSL"]) is None
    assert refused_dynamic(["message.max.bytes", "max.connections"], "", ["SSL"]) is None
