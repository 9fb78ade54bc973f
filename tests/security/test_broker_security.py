"""The broker's side of security, seen from raw sockets and pylog's own client: nothing but ApiVersions and the
SASL exchange is served before a login, SaslHandshake v0's raw tokens work, Metadata answers with the endpoints
of the listener asked, pylog's client speaks every protocol, SCRAM credentials are stored salted, and bad TLS
or SASL settings are one clear configuration error."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
import scramp

from broker_runtime.cli import main
from broker_runtime.client import KafkaClient
from broker_runtime.errors import ConfigError, ErrorCode, KafkaError
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.protocol.records import read_batches
from broker_runtime.security import ClientSecurity
from broker_runtime.security.scram_credentials import CREDENTIALS_FILE
from broker_runtime.server.config import BrokerConfig
from tests.server.rawclient import RawConnection, build_batch, fetch_body, produce_body
from tests.support.secured import SecuredBroker, secured_props

pytestmark = pytest.mark.timeout(120)

PLAIN_CLIENT = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="{u}" password="{p}";'
)
SCRAM_CLIENT = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="{u}" password="{p}";'
)


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (ApiKey.METADATA, 9, {"Topics": None, "AllowAutoTopicCreation": True}),
        (ApiKey.PRODUCE, 8, produce_body("raw-unauth", 0, bytes(build_batch(1)))),
        (ApiKey.FETCH, 11, fetch_body("raw-unauth", 0, 0)),
    ],
    ids=["metadata", "produce", "fetch"],
)
def test_sasl_listener_serves_nothing_before_login(
    secured: SecuredBroker, api_key: int, version: int, body: dict
) -> None:
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        versions = conn.call(
            ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "raw", "ClientSoftwareVersion": "1"}
        )
        assert versions["ErrorCode"] == 0
        conn.send_raw(conn.encode(api_key, version, body))
        assert conn.is_closed_by_peer()
    # Also after a handshake, before the token: only SaslAuthenticate is accepted.
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        answer = conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})
        assert answer == {"ErrorCode": 0, "Mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]}
        conn.send_raw(conn.encode(api_key, version, body))
        assert conn.is_closed_by_peer()
    assert "raw-unauth" not in secured.broker.ctx.cluster.view.topics


def test_refused_login_is_answered_then_closed(secured: SecuredBroker) -> None:
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "GSSAPI"})["ErrorCode"] == (
            ErrorCode.UNSUPPORTED_SASL_MECHANISM
        )
        assert conn.is_closed_by_peer()
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})
        answer = conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": b"\0alice\0nope"})
        assert answer["ErrorCode"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer["ErrorMessage"] == "Authentication failed: Invalid username or password"
        assert conn.is_closed_by_peer()


def test_handshake_v0_raw_tokens_scram(secured: SecuredBroker) -> None:
    client = scramp.ScramClient(["SCRAM-SHA-256"], "scram256", "pw-256")
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        assert conn.call(ApiKey.SASL_HANDSHAKE, 0, {"Mechanism": "SCRAM-SHA-256"})["ErrorCode"] == 0
        first = client.get_client_first().encode()
        conn.send_raw(struct.pack(">i", len(first)) + first)
        client.set_server_first(conn.read_frame().decode())
        final = client.get_client_final().encode()
        conn.send_raw(struct.pack(">i", len(final)) + final)
        client.set_server_final(conn.read_frame().decode())  # raises unless the broker proved the key
        answer = conn.call(ApiKey.METADATA, 9, {"Topics": [], "AllowAutoTopicCreation": False})
        assert [b["Port"] for b in answer["Brokers"]] == [
            int(secured.address("SASL_PLAINTEXT").rsplit(":")[1])
        ]


def _security(
    secured: SecuredBroker, listener: str, mechanism: str = "", user: str = "", pw: str = ""
) -> ClientSecurity:
    props = {"security.protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        props["ssl.truststore.location"] = str(secured.pki.ca)
    if listener == "SSL":
        props["ssl.keystore.location"] = str(secured.pki.client)
    if listener.startswith("SASL_"):
        props["sasl.mechanism"] = mechanism
        props["sasl.jaas.config"] = (PLAIN_CLIENT if mechanism == "PLAIN" else SCRAM_CLIENT).format(
            u=user, p=pw
        )
    return ClientSecurity.from_properties(props)


@pytest.mark.parametrize(
    ("listener", "mechanism", "user", "pw"),
    [
        ("PLAINTEXT", "", "", ""),
        ("SSL", "", "", ""),
        ("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", "scram256", "pw-256"),
        ("SASL_SSL", "SCRAM-SHA-512", "scram512", "pw-512"),
    ],
)
def test_pylog_client_every_protocol(
    secured: SecuredBroker, listener: str, mechanism: str, user: str, pw: str
) -> None:
    address = secured.address(listener)
    topic = f"own-{listener}-{mechanism}".lower()
    with KafkaClient(address, security=_security(secured, listener, mechanism, user, pw)) as client:
        meta = client.metadata([topic], allow_auto_create=True)
        assert [f"{b.host}:{b.port}" for b in meta.brokers.values()] == [address]  # this listener's endpoint
        leader = meta.topics[topic].partitions[0].leader
        answer = client.produce(leader, {(topic, 0): bytes(build_batch(3))}, acks=-1, timeout_ms=5000)
        assert answer is not None and answer[(topic, 0)].error == 0
        fetched = client.fetch({(topic, 0): 0}, max_wait_ms=10)[(topic, 0)]
        assert fetched.error == 0 and fetched.records is not None
        assert [b.next_offset for b in read_batches(fetched.records)] == [3]


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_tls_frames_larger_than_one_decrypt_buffer(secured: SecuredBroker, listener: str) -> None:
    """A produce of ~700 KiB spans many TLS records and several decrypt buffers of the TLS connection (asyncio's
    reads are at most 256 KiB): it must arrive byte-exact, as the broker's CRC check of the batch proves."""
    mechanism, user, pw = ("SCRAM-SHA-512", "scram512", "pw-512") if listener == "SASL_SSL" else ("", "", "")
    topic = f"big-{listener}".lower()
    with KafkaClient(
        secured.address(listener), security=_security(secured, listener, mechanism, user, pw)
    ) as client:
        meta = client.metadata([topic], allow_auto_create=True)
        leader = meta.topics[topic].partitions[0].leader
        for count in (700, 3, 650):
            batch = bytes(build_batch(count, value_size=1000))
            answer = client.produce(leader, {(topic, 0): batch}, acks=1, timeout_ms=10000)
            assert answer is not None and answer[(topic, 0)].error == 0, answer
        fetched = client.fetch({(topic, 0): 0}, max_wait_ms=10, partition_max_bytes=4 << 20)[(topic, 0)]
        assert fetched.error == 0 and fetched.records is not None
        assert [b.next_offset for b in read_batches(fetched.records)][-1] == 1353


def test_pylog_client_wrong_password_and_wrong_ca(secured: SecuredBroker, tmp_path: Path) -> None:
    wrong = _security(secured, "SASL_SSL", "PLAIN", "alice", "x")
    with pytest.raises(KafkaError) as info, KafkaClient(secured.address("SASL_SSL"), security=wrong) as c:
        c.metadata([])
    assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Invalid username or password" in str(info.value)
    from tests.security.certs import make_pki

    other = make_pki(tmp_path / "other")
    security = ClientSecurity.from_properties(
        {"security.protocol": "SSL", "ssl.truststore.location": str(other.ca)}
    )
    expected = "TLS handshake failed: certificate verification failed"
    with (
        pytest.raises(KafkaError, match=expected),
        KafkaClient(secured.address("SSL"), security=security) as c,
    ):
        c.metadata([])


def test_credentials_file_holds_no_clear_password(secured: SecuredBroker) -> None:
    path = secured.data_dir / "logs" / CREDENTIALS_FILE
    text = path.read_text()
    assert "pw-256" not in text and "pw-512" not in text
    users = json.loads(text)["users"]
    assert set(users["scram256"]["SCRAM-SHA-256"]) == {"salt", "stored_key", "server_key", "iterations"}
    assert path.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {"ssl.keystore.type": "JKS"},
            "server.pem' is a PEM file, not a JKS store: set ssl.keystore.type=PEM",
        ),
        (
            {"listener.name.ssl.ssl.truststore.type": "PKCS12"},
            "ca.pem' is a PEM file, not a PKCS12 store: set listener.name.ssl.ssl.truststore.type=PEM",
        ),
        (
            {"ssl.keystore.location": "/nonexistent/server.pem"},
            "ssl.keystore.location='/nonexistent/server.pem': no such file",
        ),
        (
            {"ssl.truststore.location": "/nonexistent/ca.pem"},
            "ssl.truststore.location='/nonexistent/ca.pem': no such file",
        ),
        ({"ssl.key.password": "wrong"}, "wrong ssl.key.password?"),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms='GSSAPI': GSSAPI is not supported"),
        ({"listeners": "CLIENT://127.0.0.1:0"}, "listener CLIENT has no security protocol"),
        ({"inter.broker.listener.name": "NOPE"}, "inter.broker.listener.name=NOPE: not one of the listeners"),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"},
            "inter.broker.listener.name is not set and no listener is named PLAINTEXT (listeners: SASL_PLAINTEXT, "
            "SASL_SSL)",
        ),
        ({"connections.max.reauth.ms": "-1"}, "connections.max.reauth.ms=-1: must be >= 0"),
        (
            {"listener.name.sasl_ssl.plain.connections.max.reauth.ms": "1h"},
            "listener.name.sasl_ssl.plain.connections.max.reauth.ms='1h': expected an integer",
        ),
    ],
    ids=[
        "jks",
        "pkcs12-listener",
        "keystore-missing",
        "truststore-missing",
        "key-password",
        "gssapi",
        "unmapped",
        "inter-broker",
        "inter-broker-unnamed",
        "reauth-negative",
        "reauth-listener-mechanism",
    ],
)
def test_config_errors_name_the_key(
    secured: SecuredBroker, tmp_path: Path, override: dict[str, str], message: str
) -> None:
    props = {**secured_props(tmp_path, secured.pki), **override}
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties(props)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_cli_config_error_is_one_line(
    secured: SecuredBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    props = {**secured_props(tmp_path, secured.pki), "ssl.truststore.type": "JKS"}
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    assert main(["start", "--config", str(config)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "not a JKS store: set ssl.truststore.type=PEM" in lines[0], lines


def test_custom_listener_names_and_advertised(tmp_path: Path, secured: SecuredBroker) -> None:
    from broker_runtime.server.node.broker import Broker

    props = {
        **secured_props(tmp_path, secured.pki),
        "listeners": "CLIENT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
        "advertised.listeners": "CLIENT://localhost:0",
        "listener.security.protocol.map": "CLIENT:SASL_SSL,REPLICATION:PLAINTEXT",
        "inter.broker.listener.name": "REPLICATION",
        "listener.name.client.plain.sasl.jaas.config": secured_props(tmp_path, secured.pki)[
            "listener.name.sasl_ssl.plain.sasl.jaas.config"
        ],
    }
    broker = Broker(BrokerConfig.from_properties(props)).start()
    try:
        client_port = int(broker.listener_bootstrap("CLIENT").rsplit(":")[1])
        security = _security(secured, "SASL_SSL", "PLAIN", "alice", "alice-secret")
        with KafkaClient(f"localhost:{client_port}", security=security) as client:
            brokers = client.metadata([]).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("localhost", client_port)]
        with KafkaClient(broker.listener_bootstrap("REPLICATION")) as client:
            brokers = client.metadata([]).brokers
        assert [f"{b.host}:{b.port}" for b in brokers.values()] == [broker.listener_bootstrap("REPLICATION")]
        assert broker.bootstrap == broker.listener_bootstrap("CLIENT")  # the first listener is announced
    finally:
        broker.stop()


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["users", *args])
    return code, capsys.readouterr().out


def test_users_cli_takes_effect_without_restart(
    secured: SecuredBroker, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = str(secured.data_dir / "logs")
    monkeypatch.setattr("sys.stdin", io.StringIO("c-pw\n"))  # the password, read from stdin
    code, out = _cli(capsys, "add", "carol", "-m", "SCRAM-SHA-512", "--iterations", "4096", "--dir", logs)
    assert code == 0 and out.startswith("added SCRAM-SHA-512 credential for carol"), out
    assert "carol SCRAM-SHA-512 iterations=4096" in _cli(capsys, "list", "--dir", logs)[1]
    security = _security(secured, "SASL_PLAINTEXT", "SCRAM-SHA-512", "carol", "c-pw")
    with KafkaClient(secured.address("SASL_PLAINTEXT"), security=security) as client:
        client.metadata([])
    assert _cli(capsys, "delete", "carol", "--dir", logs)[0] == 0
    with (
        pytest.raises(KafkaError) as info,
        KafkaClient(secured.address("SASL_PLAINTEXT"), security=security) as c,
    ):
        c.metadata([])
    assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "c-pw" not in (secured.data_dir / "logs" / CREDENTIALS_FILE).read_text()
