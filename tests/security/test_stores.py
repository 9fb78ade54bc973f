"""JKS and PKCS12 key and trust stores (Kafka's ``ssl.keystore.type`` / ``ssl.truststore.type``) on both sides:
a broker whose listeners read PKCS12 (one per listener: ``listener.name.<l>.ssl.*``) and one reading JKS, pylog's
client and the connector's ``kafka.ssl.*`` options connecting to them, ``ssl.endpoint.identification.algorithm``,
and every refusal (wrong password, wrong type, missing file, a store without the needed entry, no keytool) as one
line naming the setting. Stores are made here: PKCS12 with ``cryptography``, JKS with the JDK's ``keytool``."""

from __future__ import annotations

import ipaddress
import os
import pickle
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ConfigError, KafkaError
from broker_runtime.security import ClientSecurity
from broker_runtime.security import tls as tls_module
from broker_runtime.security.keystores import KEYTOOL_JVM_OPTIONS, keytool
from broker_runtime.server.config import BrokerConfig
from spark_kafka_log.common.kafka_configs import security_options
from tests.security.certs import issue_certificate

pytestmark = pytest.mark.timeout(120)

STORE_PW = "store-secret-1"
KEY_PW = "key-secret-2"
TRUST_PW = "trust-secret-3"
SECRETS = (STORE_PW, KEY_PW, TRUST_PW)


@dataclass(frozen=True)
class Stores:
    dir: Path
    ca_pem: Path
    server_p12: Path  # key + chain, STORE_PW
    client_p12: Path  # key + chain, STORE_PW (CN=alice)
    elsewhere_p12: Path  # a server certificate naming only elsewhere.invalid, STORE_PW
    trust_p12: Path  # the CA, certificates encrypted with TRUST_PW
    trust_clear_p12: Path  # the CA, no encryption, no password
    client_pem: Path  # the client's key + chain as PEM


def _cert(
    cn: str,
    key: Any,
    issuer: x509.Name,
    issuer_key: Any,
    *,
    ca: bool,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    return issue_certificate(subject, key, issuer, issuer_key, ca=ca, sans=sans)


def _p12(path: Path, name: str, key: Any, chain: list[x509.Certificate], password: str | None) -> Path:
    encryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    )
    cas = chain[1:] if key is not None else chain
    path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            name.encode(), key, chain[0] if key is not None else None, cas, encryption
        )
    )
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    d = tmp_path_factory.mktemp("stores")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("stores test CA", ca_key, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stores test CA")]),
               ca_key, ca=True)  # fmt: skip
    keys = {n: ec.generate_private_key(ec.SECP256R1()) for n in ("server", "client", "elsewhere")}
    local = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server = _cert("localhost", keys["server"], ca.subject, ca_key, ca=False, sans=local)
    client = _cert("alice", keys["client"], ca.subject, ca_key, ca=False)
    elsewhere = _cert("elsewhere", keys["elsewhere"], ca.subject, ca_key, ca=False,
                      sans=[x509.DNSName("elsewhere.invalid")])  # fmt: skip
    pem = serialization.Encoding.PEM
    (d / "ca.pem").write_bytes(ca.public_bytes(pem))
    client_pem = d / "client.pem"
    client_pem.write_bytes(
        keys["client"].private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + client.public_bytes(pem)
    )
    return Stores(
        dir=d,
        ca_pem=d / "ca.pem",
        server_p12=_p12(d / "server.p12", "server", keys["server"], [server, ca], STORE_PW),
        client_p12=_p12(d / "client.p12", "client", keys["client"], [client, ca], STORE_PW),
        elsewhere_p12=_p12(d / "elsewhere.p12", "elsewhere", keys["elsewhere"], [elsewhere, ca], STORE_PW),
        trust_p12=_p12(d / "trust.p12", "ca", None, [ca], TRUST_PW),
        trust_clear_p12=_p12(d / "trust-clear.p12", "ca", None, [ca], None),
        client_pem=client_pem,
    )


def _start(props: dict[str, str]) -> Any:
    from broker_runtime.server.node.broker import Broker

    return Broker(BrokerConfig.from_properties(props)).start()


@pytest.fixture(scope="module")
def p12_broker(stores: Stores) -> Iterator[Any]:
    """SSL (client certificate required, PKCS12 key store, password-less PKCS12 trust store) and OTHER (a key
    store of its own, per listener, whose certificate names elsewhere.invalid only)."""
    broker = _start(
        {
            "listeners": "SSL://127.0.0.1:0,OTHER://127.0.0.1:0",
            "listener.security.protocol.map": "SSL:SSL,OTHER:SSL",
            "inter.broker.listener.name": "SSL",
            "log.dirs": str(stores.dir / "p12-logs"),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(stores.server_p12),
            "ssl.keystore.password": STORE_PW,
            "ssl.truststore.location": str(stores.trust_clear_p12),  # no type: the file's format; no password
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.other.ssl.keystore.location": str(stores.elsewhere_p12),
        }
    )
    try:
        yield broker
    finally:
        broker.stop()


def _metadata(address: str, security: ClientSecurity) -> None:
    with KafkaClient(address, security=security) as client:
        meta = client.metadata([])
        assert [f"{b.host}:{b.port}" for b in meta.brokers.values()] == [address]


def _client_p12(stores: Stores, **extra: str) -> dict[str, str]:
    return {
        "security.protocol": "SSL",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(stores.client_p12),
        "ssl.keystore.password": STORE_PW,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(stores.trust_p12),
        "ssl.truststore.password": TRUST_PW,
        **extra,
    }


def test_pkcs12_client_on_pkcs12_listener(stores: Stores, p12_broker: Any) -> None:
    """The listener requires a client certificate: the client's PKCS12 key is what it presents."""
    _metadata(str(p12_broker.listener_bootstrap("SSL")), ClientSecurity.from_properties(_client_p12(stores)))
    without_key = {"security.protocol": "SSL", "ssl.truststore.location": str(stores.trust_clear_p12)}
    with pytest.raises(
        KafkaError, match="TLS handshake failed|connection closed by the broker"
    ):  # TLS 1.3: after
        _metadata(str(p12_broker.listener_bootstrap("SSL")), ClientSecurity.from_properties(without_key))


def test_connector_options_reach_the_executors(stores: Stores, p12_broker: Any) -> None:
    """``kafka.ssl.*`` with PKCS12 stores, parsed on the driver, pickled as Spark ships them, used on the other
    side; a wrong password fails on the driver naming the option."""
    options = {f"kafka.{k}": v for k, v in _client_p12(stores).items()}
    security = pickle.loads(pickle.dumps(security_options(options, embedded=False)))
    _metadata(str(p12_broker.listener_bootstrap("SSL")), security)
    with pytest.raises(ConfigError) as info:
        security_options({**options, "kafka.ssl.keystore.password": "wrong"}, embedded=False)
    assert str(info.value).startswith(f"option kafka.ssl.keystore.location='{stores.client_p12}'")
    assert "cannot open this PKCS12 store with ssl.keystore.password" in str(info.value)


def test_endpoint_identification(stores: Stores, p12_broker: Any) -> None:
    """OTHER's certificate (a valid chain) names elsewhere.invalid: ``https`` (the default) refuses it on
    127.0.0.1, empty accepts it."""
    address = str(p12_broker.listener_bootstrap("OTHER"))
    trust = {"security.protocol": "SSL", "ssl.truststore.location": str(stores.trust_clear_p12)}
    with pytest.raises(KafkaError, match="certificate verification failed"):
        _metadata(address, ClientSecurity.from_properties(trust))
    with pytest.raises(KafkaError, match="certificate verification failed"):
        _metadata(
            address,
            ClientSecurity.from_properties({**trust, "ssl.endpoint.identification.algorithm": "https"}),
        )
    _metadata(address, ClientSecurity.from_properties({**trust, "ssl.endpoint.identification.algorithm": ""}))


def test_key_never_on_disk_in_clear(stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's ssl loads keys from files: the key read from a store reaches it encrypted, in a 0600 file."""
    seen: list[tuple[bytes, int]] = []
    original = tls_module._pem_file

    def spy(text: str | bytes) -> Any:
        manager = original(text)
        path = manager.__enter__()
        seen.append((Path(path).read_bytes(), os.stat(path).st_mode & 0o777))
        manager.__exit__(None, None, None)
        return original(text)

    monkeypatch.setattr(tls_module, "_pem_file", spy)
    tls_module.client_context(_client_p12(stores))
    assert len(seen) == 1
    content, mode = seen[0]
    assert (
        b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in content and b"-----BEGIN PRIVATE KEY-----" not in content
    )
    assert mode == 0o600


def _jks_magic(path: Path, magic: bytes) -> Path:
    path.write_bytes(magic + b"\x00\x00\x00\x02" + bytes(40))
    return path


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ssl.keystore.password": "wrong"}, "cannot open this PKCS12 store with ssl.keystore.password"),
        ({"ssl.keystore.password": ""}, "ssl.keystore.password is not set: the key store"),
        ({"ssl.truststore.password": ""}, "cannot be read without a password (its integrity check or its"),
        (
            {"ssl.keystore.type": "PEM"},
            "client.p12' is a PKCS12 store, not PEM: set ssl.keystore.type=PKCS12",
        ),
        (
            {"ssl.keystore.location": "{dir}/client.pem"},
            "client.pem' is a PEM file, not a PKCS12 store: set ",
        ),
        (
            {"ssl.truststore.location": "{dir}/none.p12"},
            "none.p12': no such file (the trust store: JKS, PKCS12",
        ),
        (
            {"ssl.keystore.location": "{dir}/trust.p12", "ssl.keystore.password": TRUST_PW},
            "holds no private key with its certificate",
        ),
        ({"ssl.truststore.type": "JCEKS"}, "ssl.truststore.type='JCEKS': expected one of JKS, PKCS12, PEM"),
        ({"ssl.truststore.location": "{dir}/store.jceks"}, "store.jceks': a JCEKS store; pylog reads JKS"),
        ({"ssl.truststore.location": "{dir}/garbage"}, "garbage': not a JKS, PKCS12 or PEM file"),
        (
            {"ssl.keystore.key": "-----BEGIN PRIVATE KEY-----"},
            "ssl.keystore.key is inline PEM, but ssl.keystore.type",
        ),
        (
            {"ssl.truststore.location": "{dir}/fake.jks"},
            "is a JKS store, which pylog reads through the Java runtime",
        ),
        (
            {"ssl.truststore.location": "{dir}/client.pem"},
            "ssl.truststore.password is set but the trust store is PEM (ssl.truststore.location), which has no",
        ),
    ],
    ids=[
        "wrong-password",
        "no-keystore-password",
        "encrypted-truststore-no-password",
        "pem-type-pkcs12-file",
        "pkcs12-type-pem-file",
        "missing-file",
        "keystore-without-key",
        "unknown-type",
        "jceks-file",
        "not-a-store",
        "inline-pem-with-pkcs12",
        "jks-without-keytool",
        "pem-truststore-with-password",
    ],
)
def test_store_errors_name_the_setting(
    stores: Stores, monkeypatch: pytest.MonkeyPatch, settings: dict[str, str], message: str
) -> None:
    _jks_magic(stores.dir / "store.jceks", b"\xce\xce\xce\xce")
    _jks_magic(stores.dir / "fake.jks", b"\xfe\xed\xfe\xed")
    (stores.dir / "garbage").write_bytes(b"\x01\x02garbage")
    monkeypatch.setenv("JAVA_HOME", str(stores.dir))
    monkeypatch.setenv("PATH", str(stores.dir))
    props = _client_p12(stores, **{k: v.format(dir=stores.dir) for k, v in settings.items()})
    props = {k: v for k, v in props.items() if v}
    if "ssl.truststore.location" in settings:
        props.pop("ssl.truststore.type")
    with pytest.raises(ConfigError) as info:
        ClientSecurity.from_properties(props)
    text = str(info.value)
    assert message in text and "\n" not in text, text
    assert not any(secret in text for secret in SECRETS), text


def test_listener_store_errors_name_the_listener_setting(stores: Stores) -> None:
    props = {
        "listeners": "SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SSL",
        "log.dirs": str(stores.dir / "unused"),
        "ssl.keystore.location": str(stores.server_p12),
        "listener.name.ssl.ssl.keystore.password": "wrong",
    }
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties(props)
    assert "with listener.name.ssl.ssl.keystore.password (wrong password" in str(info.value)


# JKS: stores made by the JDK's keytool, read through it.


@dataclass(frozen=True)
class JksStores:
    server: Path  # STORE_PW; its key under KEY_PW
    trust: Path  # the CA, TRUST_PW


def _keytool(*args: str) -> None:
    tool = keytool()
    if tool is None:
        pytest.fail("keytool (a JDK) is needed to make the JKS stores of these tests", pytrace=False)
    subprocess.run([tool, *KEYTOOL_JVM_OPTIONS, *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def jks(stores: Stores) -> JksStores:
    server, trust = stores.dir / "server.jks", stores.dir / "trust.jks"
    _keytool(
        "-importkeystore", "-noprompt", "-srckeystore", str(stores.server_p12), "-srcstoretype", "PKCS12",
        "-srcstorepass", STORE_PW, "-srcalias", "server", "-destkeystore", str(server), "-deststoretype", "JKS",
        "-deststorepass", STORE_PW, "-destkeypass", KEY_PW,
    )  # fmt: skip
    _keytool(
        "-importcert", "-noprompt", "-alias", "ca", "-file", str(stores.ca_pem), "-keystore", str(trust),
        "-storetype", "JKS", "-storepass", TRUST_PW,
    )  # fmt: skip
    return JksStores(server, trust)


@pytest.fixture(scope="module")
def jks_broker(stores: Stores, jks: JksStores) -> Iterator[Any]:
    broker = _start(
        {
            "listeners": "SSL://127.0.0.1:0",
            "inter.broker.listener.name": "SSL",
            "log.dirs": str(stores.dir / "jks-logs"),
            "ssl.keystore.type": "JKS",
            "ssl.keystore.location": str(jks.server),
            "ssl.keystore.password": STORE_PW,
            "ssl.key.password": KEY_PW,
            "ssl.truststore.type": "JKS",
            "ssl.truststore.location": str(jks.trust),
            "ssl.truststore.password": TRUST_PW,
            "ssl.client.auth": "required",
        }
    )
    try:
        yield broker
    finally:
        broker.stop()


def test_jks_listener_and_clients(stores: Stores, jks: JksStores, jks_broker: Any) -> None:
    """A listener reading JKS stores (a Kafka broker's), a client with a JKS key store and a password-less JKS
    trust store (Kafka: read without the integrity check), and a PKCS12 client."""
    address = str(jks_broker.listener_bootstrap("SSL"))
    jks_client = {
        "security.protocol": "SSL",
        "ssl.keystore.location": str(jks.server),  # no type: JKS, Kafka's default
        "ssl.keystore.password": STORE_PW,
        "ssl.key.password": KEY_PW,
        "ssl.truststore.type": "JKS",
        "ssl.truststore.location": str(jks.trust),
    }
    _metadata(address, ClientSecurity.from_properties(jks_client))
    _metadata(address, ClientSecurity.from_properties(_client_p12(stores)))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ssl.keystore.password": "wrong-store"}, "ssl.keystore.password does not open this JKS store"),
        (
            {"ssl.key.password": ""},
            "the private key of this JKS store cannot be recovered: set ssl.key.password",
        ),
    ],
    ids=["wrong-store-password", "no-key-password"],
)
def test_jks_errors(jks: JksStores, settings: dict[str, str], message: str) -> None:
    props = {
        "security.protocol": "SSL",
        "ssl.keystore.type": "JKS",
        "ssl.keystore.location": str(jks.server),
        "ssl.keystore.password": STORE_PW,
        "ssl.key.password": KEY_PW,
        **settings,
    }
    with pytest.raises(ConfigError) as info:
        ClientSecurity.from_properties({k: v for k, v in props.items() if v})
    text = str(info.value)
    assert message in text and "\n" not in text, text
    assert not any(secret in text for secret in SECRETS), text


def test_keytool_found_beside_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without JAVA_HOME and keytool on PATH, the keytool beside ``java`` (Spark's executors have java)."""
    real = keytool()
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(os.path.join(os.path.dirname(os.path.realpath(real)), "java"), bin_dir / "java")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert keytool() == os.path.join(os.path.dirname(os.path.realpath(real)), "keytool")
