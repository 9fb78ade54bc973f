"""SASL/OAUTHBEARER on pylog's broker against an identity provider on loopback (tests/support/oauth.py): a
signed token is accepted and names the principal; expired, wrong-audience, wrong-issuer, unsigned, wrong-key and
HMAC-with-the-public-key tokens are refused as Kafka refuses them (the ``{"status":"invalid_token"}`` challenge,
then SASL_AUTHENTICATION_FAILED with it); the session ends with the token; unknown ``kid`` s cost at most one
JWKS read; the unsecured validator serves a loopback development listener only; and the settings that cannot work
fail the start naming the key."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ConfigError, ErrorCode
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.security.oauthbearer import (
    UNSECURED_VALIDATOR_CLASS,
    InvalidMessage,
    client_first_message,
    parse_client_first,
)
from tests.server.rawclient import RawConnection
from tests.support.oauth import (
    AUDIENCE,
    GENERIC_FAILURE,
    ISSUER,
    REFUSED_TOKEN_EXCHANGES,
    IdentityProvider,
    allowed_urls,
    refused_token_exchanges,
)

pytestmark = pytest.mark.timeout(60)

METADATA = (ApiKey.METADATA, 9, {"Topics": None, "AllowAutoTopicCreation": False})
INVALID = b'{"status":"invalid_token"}'


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(claims: dict[str, Any]) -> str:
    return f"{_b64(json.dumps({'alg': 'none'}).encode())}.{_b64(json.dumps(claims).encode())}."


def oauth_props(data: Path, idp: IdentityProvider) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,OAUTH://127.0.0.1:0,DEV://127.0.0.1:0,DOWN://127.0.0.1:0",
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT,DEV:SASL_PLAINTEXT,DOWN:SASL_PLAINTEXT"
        ),
        "pylog.metrics.listener": "127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data / "logs"),
        "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.oauth.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        ),
        "listener.name.oauth.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
        "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.audience": f"other,{AUDIENCE}",
        "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.issuer": ISSUER,
        "listener.name.dev.sasl.enabled.mechanisms": "OAUTHBEARER",
        # An identity provider whose JWKS endpoint is down.
        "listener.name.down.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.down.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": f"{idp.base_url}/jwks-broken",
        "listener.name.dev.oauthbearer.sasl.server.callback.handler.class": UNSECURED_VALIDATOR_CLASS,
    }


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    with IdentityProvider() as provider:
        yield provider


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, idp: IdentityProvider) -> Iterator[Any]:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    config = BrokerConfig.from_properties(oauth_props(tmp_path_factory.mktemp("oauth"), idp))
    b = Broker(config).start()
    try:
        yield b
    finally:
        b.stop()


def _login(conn: RawConnection, token: str, authzid: str = "") -> dict[str, Any]:
    assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "OAUTHBEARER"})["ErrorCode"] == 0
    return conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": client_first_message(token, authzid)})


def _principals(broker: Any) -> set[str]:
    for _ in range(100):
        try:
            return {c.session.principal for c in tuple(broker._connections)}
        except RuntimeError:
            time.sleep(0.01)
    raise AssertionError("the broker's connections kept changing")


def test_signed_token_logs_in_as_its_subject_for_its_lifetime(broker: Any, idp: IdentityProvider) -> None:
    with RawConnection(broker.listener_bootstrap("OAUTH")) as conn:
        answer = _login(conn, idp.token("alice"))
        assert answer["ErrorCode"] == 0, answer
        assert answer["AuthBytes"] == b""
        # The session lasts as long as the token (Kafka's CREDENTIAL.LIFETIME.MS), connections.max.reauth.ms=0.
        assert idp.lifetime_s * 1000 - 5000 < answer["SessionLifetimeMs"] <= idp.lifetime_s * 1000
        assert conn.call(*METADATA)["Brokers"]
        assert "User:alice" in _principals(broker)


def test_an_authzid_other_than_the_subject_is_refused(broker: Any, idp: IdentityProvider) -> None:
    with RawConnection(broker.listener_bootstrap("OAUTH")) as conn:
        answer = _login(conn, idp.token("alice"), authzid="bob")
        assert answer["ErrorCode"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert (
            "authorization id (bob) that is different from the token's principal name (alice)"
            in (answer["ErrorMessage"])
        )
        assert conn.is_closed_by_peer()


def _hs256_with_public_key(idp: IdentityProvider) -> str:
    """The classic key-confusion forgery: HMAC-SHA256 keyed with the provider's public key."""
    from cryptography.hazmat.primitives import serialization

    public = idp.key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    now = int(time.time())
    head = _b64(json.dumps({"alg": "HS256", "kid": "k1", "typ": "JWT"}).encode())
    body = _b64(
        json.dumps({"sub": "mallory", "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 300}).encode()
    )
    signature = _b64(hmac.new(public, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{signature}"


REFUSED: dict[str, Any] = {
    "expired": lambda idp: idp.token(issued_at=time.time() - 1000, lifetime_s=100),
    "wrong audience": lambda idp: idp.token(aud="someone-else"),
    "audience missing when one is expected": lambda idp: idp.token(aud=None),
    "wrong issuer": lambda idp: idp.token(iss="https://evil.test"),
    "unsigned": lambda idp: unsigned(
        {"sub": "mallory", "aud": AUDIENCE, "iss": ISSUER, "exp": time.time() + 99}
    ),
    "signed by another key": lambda idp: idp.token(key=idp.other_key),
    "HMAC keyed with the public key": _hs256_with_public_key,
    "no iat": lambda idp: idp.token(iat=None),
    "not yet valid": lambda idp: idp.token(nbf=int(time.time()) + 600),
    "EC key for an RSA algorithm": lambda idp: idp.token(key=idp.ec_key, algorithm="ES256", kid="k1"),
    "blank subject": lambda idp: idp.token(sub="  "),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_bad_tokens_are_refused_with_kafkas_answer(broker: Any, idp: IdentityProvider, case: str) -> None:
    token = REFUSED[case](idp)
    if case == "no iat":
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        assert claims.get("iat") is None
    with RawConnection(broker.listener_bootstrap("OAUTH")) as conn:
        first = _login(conn, token)
        # Kafka's OAuthBearerSaslServer: the error JSON as the server's challenge, no error yet ...
        assert first["ErrorCode"] == 0 and first["AuthBytes"] == INVALID, first
        # ... the client answers %x01 and the authentication fails with that JSON.
        final = conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": b"\x01"})
        assert final["ErrorCode"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert final["ErrorMessage"] == INVALID.decode()
        assert conn.is_closed_by_peer()


def test_after_a_refused_token_the_next_message_is_read_as_kafka_reads_it(
    broker: Any, idp: IdentityProvider
) -> None:
    """Byte for byte Kafka's exchanges (``OAuthBearerSaslServer.evaluateResponse``; the same table is checked
    against Apache Kafka in tests/connector/on_apache_kafka/test_cluster_and_security.py): ``^A`` acknowledges the
    error and fails the login with it; another token is a new client first message and may log in; anything
    else fails with the generic text."""
    seen = refused_token_exchanges(
        lambda: RawConnection(broker.listener_bootstrap("OAUTH")),
        idp.token("alice"),
        idp.token(aud="elsewhere"),
    )
    assert seen == REFUSED_TOKEN_EXCHANGES


def test_the_ec_key_verifies_its_own_tokens(broker: Any, idp: IdentityProvider) -> None:
    with RawConnection(broker.listener_bootstrap("OAUTH")) as conn:
        assert _login(conn, idp.token("carol", key=idp.ec_key, algorithm="ES256", kid="e1"))["ErrorCode"] == 0


def test_a_key_rotated_in_is_found_by_the_refresh_an_unknown_kid_asks_for(
    broker: Any, idp: IdentityProvider
) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.support.oauth import _rsa_jwk

    new_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    idp.jwks = {"keys": [*idp.jwks["keys"], _rsa_jwk(new_key, "k2")]}
    token = idp.token("dave", key=new_key, kid="k2")
    # The first refusal asks for a refresh at once (no earlier on-demand refresh in this module: this test runs
    # before the next one).
    deadline = time.monotonic() + 5
    while True:
        with RawConnection(broker.listener_bootstrap("OAUTH")) as conn:
            if _login(conn, token)["AuthBytes"] == b"":
                assert conn.call(*METADATA)["Brokers"]
                break
        assert time.monotonic() < deadline, "the rotated key was never fetched"
        time.sleep(0.2)


def test_unknown_kids_cost_at_most_one_jwks_read(broker: Any, idp: IdentityProvider) -> None:
    before = idp.jwks_requests
    for i in range(6):
        with RawConnection(broker.listener_bootstrap("OAUTH")) as conn:
            assert _login(conn, idp.token(kid=f"rotated-{i}"))["AuthBytes"] == INVALID
    time.sleep(0.3)  # let an asked-for refresh run
    assert idp.jwks_requests - before <= 1


def test_session_ends_with_the_token(broker: Any, idp: IdentityProvider) -> None:
    with RawConnection(broker.listener_bootstrap("OAUTH")) as conn:
        now = time.time()
        answer = _login(conn, idp.token("erin", issued_at=now, lifetime_s=1.0))
        assert answer["ErrorCode"] == 0
        assert answer["SessionLifetimeMs"] <= 1000
        time.sleep(max(0.0, int(now + 1.0) - time.time()) + 0.3)
        conn.send_raw(conn.encode(*METADATA))
        assert conn.is_closed_by_peer(), "a request after the token expired was served"


def test_unsecured_validator_on_a_loopback_development_listener(broker: Any, idp: IdentityProvider) -> None:
    with RawConnection(broker.listener_bootstrap("DEV")) as conn:
        answer = _login(conn, unsigned({"sub": "dev-user", "exp": time.time() + 60}))
        assert answer["ErrorCode"] == 0, answer
        assert conn.call(*METADATA)["Brokers"]
    with RawConnection(broker.listener_bootstrap("DEV")) as conn:
        # It takes unsigned tokens only, and checks their expiry.
        assert _login(conn, unsigned({"sub": "dev-user", "exp": time.time() - 5}))["AuthBytes"] == INVALID
    with RawConnection(broker.listener_bootstrap("DEV")) as conn:
        assert _login(conn, idp.token("alice"))["AuthBytes"] == INVALID


def test_a_jwks_that_cannot_be_read_fails_logins_and_is_counted(broker: Any, idp: IdentityProvider) -> None:
    import urllib.request

    with RawConnection(broker.listener_bootstrap("DOWN")) as conn:
        assert _login(conn, idp.token("alice"))["AuthBytes"] == INVALID
    text = urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=10).read().decode()
    samples = {
        line.split("{", 1)[0] + "{" + line.split("{", 1)[1].split("}", 1)[0] + "}": float(
            line.rsplit(" ", 1)[1]
        )
        for line in text.splitlines()
        if line.startswith("pylog_oauthbearer_jwks_")
    }
    assert samples['pylog_oauthbearer_jwks_refresh_failures_total{listener="DOWN"}'] >= 1
    assert samples['pylog_oauthbearer_jwks_refreshes_total{listener="DOWN"}'] == 0
    assert samples['pylog_oauthbearer_jwks_refresh_failures_total{listener="OAUTH"}'] == 0
    assert samples['pylog_oauthbearer_jwks_refreshes_total{listener="OAUTH"}'] >= 1


def test_malformed_client_first_messages_fail_at_once(broker: Any) -> None:
    for message in (b"n,,\x01auth=Basic abc\x01\x01", b"garbage", b"n,,\x01auth=Bearer \xff\x01\x01"):
        with RawConnection(broker.listener_bootstrap("OAUTH")) as conn:
            assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "OAUTHBEARER"})["ErrorCode"] == 0
            answer = conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": message})
            assert answer["ErrorCode"] == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert answer["ErrorMessage"] == GENERIC_FAILURE, "Kafka's answer, naming nothing of the defect"


def test_client_first_message_format() -> None:
    message = client_first_message("a.b.c", authzid="x,y=z")
    assert message == b"n,a=x=2Cy=3Dz,\x01auth=Bearer a.b.c\x01\x01"
    assert parse_client_first(message) == ("x,y=z", "a.b.c")
    # Extensions (RFC 7628) are accepted, as Kafka's default handler does.
    assert parse_client_first(b"n,,\x01auth=bearer t0k\x01traceId=abc 1\x01\x01") == ("", "t0k")
    with pytest.raises(InvalidMessage, match="'auth' not specified"):
        parse_client_first(b"n,,\x01token=x\x01\x01")


def _config(tmp_path: Path, idp_url: str, **extra: str) -> Any:
    from broker_runtime.server.config import BrokerConfig

    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,OAUTH://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(tmp_path / "logs"),
        "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": idp_url,
    }
    props.update(extra)
    return BrokerConfig.from_properties({k: v for k, v in props.items() if v})


@allowed_urls("http://127.0.0.1:1/jwks")
def test_settings_that_cannot_work_fail_the_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="set sasl.oauthbearer.jwks.endpoint.url"):
        _config(tmp_path, "")
    with pytest.raises(ConfigError, match="protocol must be https, http or file"):
        _config(tmp_path, "ftp://idp/jwks")
    with pytest.raises(ConfigError, match="runs no Java callback handlers"):
        _config(
            tmp_path, "http://127.0.0.1:1/jwks", **{"sasl.server.callback.handler.class": "com.acme.Handler"}
        )
    with pytest.raises(ConfigError, match="no OAUTHBEARER login of its own"):
        _config(
            tmp_path,
            "http://127.0.0.1:1/jwks",
            **{"inter.broker.listener.name": "OAUTH", "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"},
        )
    # The unsecured validator: not on a listener bound beyond loopback, unless that is said explicitly.
    unsecured = {
        "listeners": "PLAINTEXT://127.0.0.1:0,OAUTH://0.0.0.0:0",
        "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": UNSECURED_VALIDATOR_CLASS,
    }
    with pytest.raises(ConfigError, match="lets anyone log in as anyone.*not loopback"):
        _config(tmp_path, "", **unsecured)
    _config(tmp_path, "", **unsecured, **{"pylog.sasl.oauthbearer.unsecured.allow.non.loopback": "true"})


def test_a_jwks_file_is_read_at_start(tmp_path: Path, idp: IdentityProvider) -> None:
    from broker_runtime.server.oauthbearer_listener import oauthbearer_validator

    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(idp.jwks))
    props = {
        "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
        "sasl.oauthbearer.expected.audience": AUDIENCE,
    }
    with allowed_urls(jwks.as_uri()):
        validator, keys = oauthbearer_validator(props, "OAUTH", "127.0.0.1", start=True)
    assert keys is not None
    try:
        assert validator.validate(idp.token("frank")).principal == "frank"
    finally:
        keys.close()
    with (
        allowed_urls((tmp_path / "missing.json").as_uri()),
        pytest.raises(ConfigError, match="cannot read the JWKS file"),
    ):
        oauthbearer_validator(
            {"sasl.oauthbearer.jwks.endpoint.url": (tmp_path / "missing.json").as_uri()},
            "OAUTH",
            "127.0.0.1",
            start=True,
        )


def test_each_layer_refuses_key_confusion_on_its_own(tmp_path: Path, idp: IdentityProvider) -> None:
    """The algorithm allow-list refuses HMAC and ``none`` before any key is looked up; the key set refuses a key
    whose type or ``alg`` does not fit the token's algorithm (PyJWT's own key check is a third layer)."""
    from broker_runtime.security.jwks import JwksKeys
    from broker_runtime.security.oauthbearer import InvalidToken, JwtValidator

    class NoKeys:
        def resolve(self, kid: str | None, algorithm: str) -> Any:
            raise AssertionError(f"a key was looked up for {algorithm}")

    validator = JwtValidator(NoKeys(), audiences=[AUDIENCE])
    for token in (_hs256_with_public_key(idp), unsigned({"sub": "x", "exp": time.time() + 60})):
        with pytest.raises(InvalidToken, match="is not allowed"):
            validator.validate(token)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(idp.jwks))
    with allowed_urls(jwks.as_uri()):
        keys = JwksKeys(jwks.as_uri()).start()
    try:
        with pytest.raises(InvalidToken, match="is an RSA key, ES256 needs EC"):
            keys.resolve("k1", "ES256")
        with pytest.raises(InvalidToken, match="is for RS256, the token says PS256"):
            keys.resolve("k1", "PS256")
        assert keys.resolve("k1", "RS256").key_type == "RSA"
    finally:
        keys.close()


# -- clients: pylog's own and librdkafka -----------------------------------------------------------------------

OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"


def _client_props(idp: IdentityProvider, **extra: str) -> dict[str, str]:
    props = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": OAUTH_JAAS,
        "sasl.login.callback.handler.class": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
        ),
        "sasl.oauthbearer.token.endpoint.url": idp.token_url,
        "sasl.oauthbearer.client.credentials.client.id": "pylog-client",
        "sasl.oauthbearer.client.credentials.client.secret": "client-secret",
    }
    props.update(extra)
    return props


def test_pylog_client_logs_in_with_client_credentials_and_reuses_its_token(
    broker: Any, idp: IdentityProvider
) -> None:
    from broker_runtime.client import KafkaClient
    from broker_runtime.protocol.records import read_batches
    from broker_runtime.security import ClientSecurity
    from broker_runtime.security.oauthbearer_login import token_source
    from tests.server.rawclient import build_batch

    security = ClientSecurity.from_properties(_client_props(idp, **{"sasl.oauthbearer.scope": "kafka.write"}))
    assert "client-secret" not in repr(security)
    asked = idp.token_requests
    topic = "oauth-client"
    with KafkaClient(broker.listener_bootstrap("OAUTH"), security=security) as client:
        meta = client.metadata([topic], allow_auto_create=True)
        leader = meta.topics[topic].partitions[0].leader
        answer = client.produce(leader, {(topic, 0): bytes(build_batch(3))}, acks=-1, timeout_ms=5000)
        assert answer is not None and answer[(topic, 0)].error == 0
        fetched = client.fetch({(topic, 0): 0}, max_wait_ms=10)[(topic, 0)]
        assert fetched.records is not None and [b.next_offset for b in read_batches(fetched.records)] == [3]
        assert "User:svc-pylog" in _principals(broker)  # the token's subject
    assert idp.scopes_asked[-1] == "kafka.write"
    # A second client of the process reuses the token (renewed only past 80-85 % of its lifetime).
    with KafkaClient(broker.listener_bootstrap("OAUTH"), security=security) as client:
        client.metadata([])
    assert idp.token_requests == asked + 1
    assert token_source(security.oauth).obtained == 1  # type: ignore[arg-type]


def test_pylog_client_errors_name_the_cause(broker: Any, idp: IdentityProvider, tmp_path: Path) -> None:
    from broker_runtime.client import KafkaClient
    from broker_runtime.errors import KafkaError
    from broker_runtime.security import ClientSecurity

    wrong = ClientSecurity.from_properties(
        _client_props(idp, **{"sasl.oauthbearer.client.credentials.client.secret": "nope"})
    )
    with (
        pytest.raises(KafkaError, match="HTTP 401.*client id and secret") as info,
        KafkaClient(broker.listener_bootstrap("OAUTH"), security=wrong) as client,
    ):
        client.metadata([])
    assert "nope" not in str(info.value)
    # A token the broker refuses (issued for another audience) fails with Kafka's answer.
    token_file = tmp_path / "token.jwt"
    token_file.write_text(idp.token("alice", aud="elsewhere"))
    with allowed_urls(token_file.as_uri()):
        refused = ClientSecurity.from_properties(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": OAUTH_JAAS,
                "sasl.oauthbearer.token.endpoint.url": token_file.as_uri(),
            }
        )
    with (
        pytest.raises(KafkaError) as refusal,
        KafkaClient(broker.listener_bootstrap("OAUTH"), security=refused) as client,
    ):
        client.metadata([])
    assert refusal.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert '{"status":"invalid_token"}' in str(refusal.value)
    for bad, match in (
        ({"sasl.login.callback.handler.class": "com.acme.Login"}, "runs no Java callback handlers"),
        ({"sasl.oauthbearer.client.credentials.client.id": ""}, "client.credentials.client.id"),
        ({"sasl.oauthbearer.token.endpoint.url": "ldap://idp"}, "must be https, http"),
    ):
        with pytest.raises(ConfigError, match=match):
            ClientSecurity.from_properties(_client_props(idp, **bad))


def test_unsecured_login_against_the_development_listener(broker: Any) -> None:
    from broker_runtime.client import KafkaClient
    from broker_runtime.security import ClientSecurity

    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": OAUTH_JAAS.replace(
                " required;", ' required unsecuredLoginStringClaim_sub="dev";'
            ),
        }
    )
    with KafkaClient(broker.listener_bootstrap("DEV"), security=security) as client:
        assert client.metadata([]).brokers
    with pytest.raises(ConfigError, match="unsecuredLoginStringClaim_sub"):
        ClientSecurity.from_properties(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": OAUTH_JAAS,
            }
        )


def test_librdkafka_oidc_produces_and_consumes(broker: Any, idp: IdentityProvider) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    conf = {
        "bootstrap.servers": broker.listener_bootstrap("OAUTH"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": idp.token_url,
        "sasl.oauthbearer.client.id": "pylog-client",
        "sasl.oauthbearer.client.secret": "client-secret",
    }
    errors: list[Any] = []
    producer = Producer({**conf, "error_cb": errors.append})
    for i in range(5):
        producer.produce("oauth-rdkafka", str(i).encode())
    assert producer.flush(20) == 0
    assert "User:svc-pylog" in _principals(broker)
    consumer = Consumer({**conf, "group.id": "oauth-g", "error_cb": errors.append})
    try:
        consumer.assign([TopicPartition("oauth-rdkafka", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert sorted(got) == [str(i).encode() for i in range(5)]
    finally:
        consumer.close()
    assert not errors, errors
