"""Secured listeners against real third-party clients: confluent-kafka (librdkafka) and kafka-python.

TLS with a CA and a required client certificate, SASL PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512 over plaintext and
over TLS: records produced come back exactly; a wrong password is refused with the client's authentication
error."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.support.secured import SecuredBroker

pytestmark = pytest.mark.timeout(120)

#: mechanism -> (listener, user, password) on the module's secured broker.
LOGINS = {
    "PLAIN": ("SASL_SSL", "alice", "alice-secret"),
    "SCRAM-SHA-256": ("SASL_PLAINTEXT", "scram256", "pw-256"),
    "SCRAM-SHA-512": ("SASL_SSL", "scram512", "pw-512"),
}
N = 20


def _confluent_conf(
    secured: SecuredBroker, listener: str, user: str = "", password: str = "", mechanism: str = ""
) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": secured.address(listener), "security.protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        conf["ssl.ca.location"] = str(secured.pki.ca)
    if listener == "SSL":
        conf["ssl.certificate.location"] = str(secured.pki.client_cert)
        conf["ssl.key.location"] = str(secured.pki.client_key)
    if listener.startswith("SASL_"):
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return conf


def _principals(broker: Any) -> set[str]:
    """The principals of the broker's open connections (the set belongs to the broker's loop thread: a copy
    taken while it changes is simply retried)."""
    for _ in range(100):
        try:
            return {c.session.principal for c in tuple(broker._connections)}
        except RuntimeError:
            time.sleep(0.01)
    raise AssertionError("the broker's connections kept changing")


def _confluent_round_trip(conf: dict[str, Any], topic: str, broker: Any = None) -> set[str]:
    """Produce and consume N records; the principals of the broker's connections while the consumer is open."""
    producer = Producer({**conf, "linger.ms": 1})
    for i in range(N):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": "sec", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                got.append(msg.value())
        principals = _principals(broker) if broker is not None else set()
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(N)]
    return principals


def test_confluent_ssl_with_client_certificate(secured: SecuredBroker) -> None:
    principals = _confluent_round_trip(_confluent_conf(secured, "SSL"), "ssl-confluent", secured.broker)
    assert "User:CN=alice,O=pylog" in principals


@pytest.mark.parametrize("mechanism", sorted(LOGINS))
def test_confluent_sasl(secured: SecuredBroker, mechanism: str) -> None:
    listener, user, password = LOGINS[mechanism]
    principals = _confluent_round_trip(
        _confluent_conf(secured, listener, user, password, mechanism), f"sasl-c-{mechanism}", secured.broker
    )
    assert f"User:{user}" in principals


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_confluent_wrong_password_refused(secured: SecuredBroker, mechanism: str) -> None:
    listener, user, _ = LOGINS[mechanism]
    errors: list[Any] = []
    conf = _confluent_conf(secured, listener, user, "wrong", mechanism)
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Authentication failed" in errors[0].str()


def _kafka_python_kwargs(
    secured: SecuredBroker, listener: str, user: str = "", password: str = "", mechanism: str = ""
) -> dict[str, Any]:
    kw: dict[str, Any] = {"bootstrap_servers": secured.address(listener), "security_protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        kw["ssl_cafile"] = str(secured.pki.ca)
    if listener == "SSL":
        kw["ssl_certfile"] = str(secured.pki.client_cert)
        kw["ssl_keyfile"] = str(secured.pki.client_key)
    if listener.startswith("SASL_"):
        kw.update({"sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password})
    return kw


def _kafka_python_round_trip(kw: dict[str, Any], topic: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    producer = KafkaProducer(**kw, linger_ms=1)
    try:
        for i in range(N):
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
        producer.flush(30)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(**kw, enable_auto_commit=False, consumer_timeout_ms=10_000)
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        for msg in consumer:
            got.append(msg.value)
            if len(got) == N:
                break
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(N)]


def test_kafka_python_ssl_with_client_certificate(secured: SecuredBroker) -> None:
    _kafka_python_round_trip(_kafka_python_kwargs(secured, "SSL"), "ssl-kafka-python")


@pytest.mark.parametrize("mechanism", sorted(LOGINS))
def test_kafka_python_sasl(secured: SecuredBroker, mechanism: str) -> None:
    listener, user, password = LOGINS[mechanism]
    _kafka_python_round_trip(
        _kafka_python_kwargs(secured, listener, user, password, mechanism), f"sasl-k-{mechanism}"
    )


def test_kafka_python_wrong_password_refused(
    secured: SecuredBroker, caplog: pytest.LogCaptureFixture
) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError as KError

    listener, user, _ = LOGINS["SCRAM-SHA-512"]
    kw = _kafka_python_kwargs(secured, listener, user, "wrong", "SCRAM-SHA-512")
    with pytest.raises(KError):  # kafka-python retries its bootstrap, then gives up
        KafkaConsumer(**kw, bootstrap_timeout_ms=2500)
    assert "SaslAuthenticationFailedError" in caplog.text
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in caplog.text
