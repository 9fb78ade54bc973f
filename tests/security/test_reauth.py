"""KIP-368 on a SASL listener with ``connections.max.reauth.ms``: SaslAuthenticate tells the session lifetime, a
connection that sends a request after it without re-authenticating is closed unanswered (and counted), a
re-authentication on the same connection renews the session (same mechanism and user only), and
confluent-kafka's producer re-authenticates by itself across several lifetimes without an error."""

from __future__ import annotations

import contextlib
import logging
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection

pytestmark = pytest.mark.timeout(60)

LIFETIME_MS = 1500
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-pw" user_bob="bob-pw";'
)
METADATA = (ApiKey.METADATA, 9, {"Topics": None, "AllowAutoTopicCreation": False})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    data = tmp_path_factory.mktemp("reauth")
    config = BrokerConfig.from_properties(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "log.dirs": str(Path(data) / "logs"),
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": str(LIFETIME_MS),
            "pylog.metrics.listener": "127.0.0.1:0",
        }
    )
    b = Broker(config).start()
    try:
        yield b
    finally:
        b.stop()


def _killed(broker: Any) -> int:
    text = urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("kafka_server_socket_server_metrics_expired_connections_killed_count{"):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def _login(conn: RawConnection, user: str = "alice", password: str = "alice-pw") -> dict[str, Any]:
    assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == 0
    return conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": f"\0{user}\0{password}".encode()})


def test_expired_session_is_closed_on_its_next_request(broker: Any) -> None:
    killed_before = _killed(broker)
    with RawConnection(broker.bootstrap) as conn:
        answer = _login(conn)
        assert answer["ErrorCode"] == 0
        assert answer["SessionLifetimeMs"] == LIFETIME_MS
        assert conn.call(*METADATA)["Brokers"]
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        conn.send_raw(conn.encode(*METADATA))
        assert conn.is_closed_by_peer(), "a request after the session lifetime was served"
    assert _killed(broker) == killed_before + 1


def test_reauthentication_renews_the_session_on_the_same_connection(broker: Any) -> None:
    killed_before = _killed(broker)
    with RawConnection(broker.bootstrap) as conn:
        assert _login(conn)["ErrorCode"] == 0
        time.sleep(1.0)
        again = _login(conn)
        assert again["ErrorCode"] == 0 and again["SessionLifetimeMs"] == LIFETIME_MS
        # A second re-authentication within a second is refused as on any authenticated connection (Kafka).
        assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == (
            ErrorCode.ILLEGAL_SASL_STATE
        )
        time.sleep(0.8)  # past the first session's end, inside the renewed one
        assert conn.call(*METADATA)["Brokers"]
    assert _killed(broker) == killed_before


def test_reauthentication_cannot_change_the_principal(broker: Any) -> None:
    with RawConnection(broker.bootstrap) as conn:
        assert _login(conn)["ErrorCode"] == 0
        answer = _login(conn, "bob", "bob-pw")
        assert answer["ErrorCode"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert (
            "Cannot change principals during re-authentication from User:alice: User:bob"
            in (answer["ErrorMessage"])
        )
        assert conn.is_closed_by_peer()


def test_confluent_producer_reauthenticates_across_lifetimes(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from confluent_kafka import Producer

    killed_before = _killed(broker)
    errors: list[Any] = []
    delivered: list[int] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-pw",
            "acks": "all",
            "error_cb": errors.append,
        }
    )

    def on_delivery(err: Any, msg: Any) -> None:
        (errors.append(err) if err is not None else delivered.append(int(msg.value())))

    with caplog.at_level(logging.DEBUG, logger="broker_runtime.server.node.dispatcher"):
        deadline = time.monotonic() + 3.5 * LIFETIME_MS / 1000
        n = 0
        while time.monotonic() < deadline:
            producer.produce("reauth", str(n).encode(), on_delivery=on_delivery)
            n += 1
            producer.poll(0.05)
        assert producer.flush(20) == 0
    assert errors == []
    assert delivered == list(range(n))
    reauths = [r for r in caplog.records if "re-authenticates" in r.getMessage()]
    assert len(reauths) >= 2, f"{len(reauths)} re-authentication(s) in {3.5 * LIFETIME_MS} ms"
    assert _killed(broker) == killed_before


def test_pylog_client_reauthenticates_with_requests_in_flight(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """pylog's KafkaClient (the connector's) renews its session on the same socket; requests pipelined before the
    renewal keep their answers."""
    from broker_runtime.client import KafkaClient
    from broker_runtime.client.connection import BrokerConnection
    from broker_runtime.security import ClientSecurity
    from tests.server.rawclient import build_batch

    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="alice" password="alice-pw";',
        }
    )
    killed_before = _killed(broker)
    with KafkaClient(broker.bootstrap, security=security) as client:
        assert client.metadata(["reauth-own"], allow_auto_create=True).topics["reauth-own"].partitions
    host, _, port = broker.bootstrap.rpartition(":")
    conn = BrokerConnection(host, int(port), client_id="reauth-test", timeout_s=10, security=security)
    with caplog.at_level(logging.DEBUG, logger="broker_runtime.server.node.dispatcher"):
        conn.connect()
        generation = conn.generation
        deadline = time.monotonic() + 3.5 * LIFETIME_MS / 1000
        rounds = 0
        while time.monotonic() < deadline:
            batch = bytes(build_batch(2))
            pending = [conn.send(ApiKey.PRODUCE, _produce("reauth-own", batch)) for _ in range(3)]
            for corr, _version in pending:
                answer = conn.receive(corr)
                assert answer["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == 0, answer
            rounds += 1
            time.sleep(0.05)
        assert conn.generation == generation, "the connection was closed and opened again"
        conn.close()
    reauths = [r for r in caplog.records if "re-authenticates" in r.getMessage()]
    assert len(reauths) >= 2, f"{len(reauths)} re-authentication(s) in {rounds} rounds"
    assert _killed(broker) == killed_before


def _produce(topic: str, batch: bytes) -> dict[str, Any]:
    from tests.server.rawclient import produce_body

    return produce_body(topic, 0, batch, acks=1)


def test_reauthentication_tokens_are_bounded_by_sasl_server_max_receive_size(broker: Any) -> None:
    """While a connection re-authenticates it is not logged in: a token above ``sasl.server.max.receive.size``
    (Kafka's 512 KiB default) closes it unanswered, as before the first login; a frame that size is served
    while the session is valid."""
    big = b"\0alice\0" + b"x" * (2 * 1024 * 1024)
    with RawConnection(broker.bootstrap) as conn:
        assert _login(conn)["ErrorCode"] == 0
        assert (
            conn.call(
                ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "x" * 600_000, "ClientSoftwareVersion": "1"}
            )["ErrorCode"]
            == 0
        )
        assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == 0
        frame = conn.encode(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": big})
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed after the size prefix
            conn.send_raw(frame)
        assert conn.is_closed_by_peer()
        with contextlib.suppress(ConnectionResetError):
            assert conn.sock.recv(1) == b""  # nothing was answered
