"""What an unauthenticated client can cost the broker, tried for real (README, security: "Before login").

* ``sasl.server.max.receive.size``: on a SASL listener, a frame announced above it before the login completed
  (a SaslAuthenticate, a SCRAM client-first message, a raw token after SaslHandshake v0, a frame before any
  handshake, a token of a re-authentication) closes the connection at once, unanswered; after the login a frame
  above it is served (``socket.request.max.bytes`` applies). Another client's Metadata round trip stays short
  while an attacker keeps sending such frames, and while it sends SCRAM client-first messages just under the
  bound (their parsing is linear C-level work, no per-character SASLprep).
* Memory: 20 connections of a broker child process each claim a 100 MiB frame before login and send 4 MiB of
  it; the broker's RSS grows by less than 50 MiB and every one of them is closed.
* TLS: a socket is counted by ``max.connections`` when it is accepted, before any TLS handshake: raw sockets
  that never send a ClientHello fill the limit, a further TLS client is refused while they hang and served once
  they are gone; a failed handshake, ``connections.max.idle.ms`` and the handshake timeout give the count back.
* SCRAM: an authorization id equal to the user name logs in, another one is refused with Kafka's message; a
  corrupt credentials file fails the login (SASL_AUTHENTICATION_FAILED, a WARNING naming the file and the
  defect), never the connection as an internal error.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.processes import broker_pid
from tests.security.certs import make_pki
from tests.security.conftest import PLAIN_JAAS, SCRAM_USERS, SecuredBroker, secured_props
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, produce_body

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024
#: Kafka's default ``sasl.server.max.receive.size``.
SASL_MAX = 524288
#: Longest Metadata round trip of a bystander accepted while an attack runs (a bound, not a benchmark).
BYSTANDER_BOUND_S = 2.0
METADATA = (ApiKey.METADATA, 9, {"Topics": None, "AllowAutoTopicCreation": False})
KAFKA_AUTHZID_MESSAGE = (
    "Authentication failed: Client requested an authorization id that is different from username"
)


def _closed_unanswered(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    """True when the broker closed ``sock`` within ``timeout_s`` without sending a byte."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _send_ignoring_close(sock: socket.socket, data: bytes) -> None:
    """Send ``data``; the broker may close the socket after the size prefix (that is the point)."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(data)


def _oversized(conn: RawConnection, case: str, size: int, *, whole: bool) -> None:
    """Bring ``conn`` to the pre-login stage ``case`` names, then send a frame of more than ``size`` bytes: all
    of it, or (``whole`` False) its size prefix and 64 KiB, so only a decision from the prefix closes it."""
    if case == "plain-authenticate":
        assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == 0
        framed = conn.encode(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": b"\0alice\0" + b"x" * size})
    elif case == "scram-client-first":
        assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "SCRAM-SHA-256"})["ErrorCode"] == 0
        token = b"n,,n=" + b"u" * size + b",r=nonce"
        framed = conn.encode(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": token})
    elif case == "raw-v0-token":
        assert conn.call(ApiKey.SASL_HANDSHAKE, 0, {"Mechanism": "PLAIN"})["ErrorCode"] == 0
        token = b"\0alice\0" + b"x" * size
        framed = struct.pack(">i", len(token)) + token
    else:  # before any handshake
        assert case == "before-handshake"
        body = {"ClientSoftwareName": "x" * size, "ClientSoftwareVersion": "1"}
        framed = conn.encode(ApiKey.API_VERSIONS, 3, body)
    _send_ignoring_close(conn.sock, framed if whole else framed[: 4 + 64 * 1024])


class _Bystander:
    """Metadata round trips on an authenticated connection of another listener, in a thread; the longest one."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.longest = 0.0
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with RawConnection(self.address, timeout_s=60) as conn:
            while not self._stop.is_set():
                t0 = time.monotonic()
                assert conn.call(*METADATA)["Brokers"]
                self.longest = max(self.longest, time.monotonic() - t0)
                self.count += 1
                time.sleep(0.02)

    def __enter__(self) -> _Bystander:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


@pytest.mark.parametrize(
    "case", ["plain-authenticate", "scram-client-first", "raw-v0-token", "before-handshake"]
)
def test_prelogin_frame_above_the_bound_closes_at_once_unanswered(secured: SecuredBroker, case: str) -> None:
    with _Bystander(secured.address("PLAINTEXT")) as bystander:
        deadline = time.monotonic() + 1.0
        attacks = 0
        while time.monotonic() < deadline or attacks < 4:
            with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
                t0 = time.monotonic()
                _oversized(conn, case, 2 * MIB, whole=attacks % 2 == 0)
                refused = _closed_unanswered(conn.sock)
                assert refused, (
                    f"{case}: a 2 MiB frame before login was not refused (whole: {attacks % 2 == 0})"
                )
                assert time.monotonic() - t0 < BYSTANDER_BOUND_S
            attacks += 1
    assert bystander.count > 0
    assert bystander.longest < BYSTANDER_BOUND_S, f"Metadata took {bystander.longest:.2f} s during the attack"


def test_frame_just_under_the_bound_is_judged_and_one_above_it_after_login_is_served(
    secured: SecuredBroker,
) -> None:
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == 0
        token = b"\0alice\0" + b"x" * (SASL_MAX - 200)  # the whole frame stays under the bound
        answer = conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": token})
        assert answer["ErrorCode"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == 0
        login = conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": b"\0admin\0admin-secret"})
        assert login["ErrorCode"] == 0
        created = conn.call(ApiKey.CREATE_TOPICS, 5, create_topic_body("after-login"))
        assert created["Topics"][0]["ErrorCode"] in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)
        batch = build_batch(1, value_size=SASL_MAX + 100 * 1024)  # one frame well above the pre-login bound
        produced = conn.call(ApiKey.PRODUCE, 9, produce_body("after-login", 0, bytes(batch)))
        assert produced["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == ErrorCode.NONE


def test_scram_client_first_messages_under_the_bound_cost_little(secured: SecuredBroker) -> None:
    """Usernames of ~500 KiB (just under the bound): each answered at once, the broker stays responsive (SASLprep
    in pure Python cost ~1.5 s per MiB on the event loop)."""
    with _Bystander(secured.address("PLAINTEXT")) as bystander:
        t0 = time.monotonic()
        for _ in range(6):
            with RawConnection(secured.address("SASL_PLAINTEXT"), timeout_s=60) as conn:
                assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "SCRAM-SHA-256"})["ErrorCode"] == 0
                token = b"n,,n=" + b"u" * (SASL_MAX - 1024) + b",r=nonce"
                answer = conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": token})
                assert answer["ErrorCode"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        took = time.monotonic() - t0
    assert took < 3 * BYSTANDER_BOUND_S, f"6 SCRAM client-first messages of 0.5 MiB took {took:.1f} s"
    assert bystander.longest < BYSTANDER_BOUND_S, f"Metadata took {bystander.longest:.2f} s during the attack"


# -- memory: 20 claims of 100 MiB on a broker child process ------------------------------------------------------

CLAIMS = 20
CLAIMED = 100 * MIB
SENT_PER_CLAIM = 4 * MIB
RSS_BOUND = 50 * MIB


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


@pytest.mark.parametrize(
    "broker_overrides",
    [
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        }
    ],
)
def test_prelogin_claims_of_100mib_cost_no_memory(tmp_path: Path, child_broker: str) -> None:
    pid = broker_pid(tmp_path / "child")
    host, _, port = child_broker.rpartition(":")
    with RawConnection(child_broker) as probe:  # the broker serves before and after
        assert probe.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == 0
    before = _rss(pid)
    claims: list[socket.socket] = []
    chunk = b"\0" * SENT_PER_CLAIM
    try:
        for index in range(CLAIMS):
            sock = socket.create_connection((host, int(port)), timeout=10)
            claims.append(sock)
            if index % 2:  # half of them after a SaslHandshake, half before any request
                conn = RawConnection.__new__(RawConnection)
                conn.sock, conn.correlation_id = sock, 0
                assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == 0
            _send_ignoring_close(sock, struct.pack(">i", CLAIMED) + chunk)
        time.sleep(0.5)
        grown = _rss(pid) - before
        closed = [_closed_unanswered(sock) for sock in claims]
    finally:
        for sock in claims:
            sock.close()
    assert grown < RSS_BOUND, f"the broker's RSS grew by {grown / MIB:.0f} MiB for {CLAIMS} pre-login claims"
    assert all(closed), f"{closed.count(False)} of {CLAIMS} claiming connections were left open"
    with RawConnection(child_broker) as probe:
        assert probe.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == 0


# -- TLS: counted at accept -----------------------------------------------------------------------------------------

MAX_CONNECTIONS = 3
IDLE_MS = 1500


@pytest.fixture
def tls_limited(tmp_path: Path) -> Iterator[SecuredBroker]:
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    pki = make_pki(tmp_path / "pki")
    props = secured_props(tmp_path, pki)
    props.update({"max.connections": str(MAX_CONNECTIONS), "connections.max.idle.ms": str(IDLE_MS)})
    broker = Broker(BrokerConfig.from_properties(props)).start()
    try:
        yield SecuredBroker(broker, pki, tmp_path)
    finally:
        broker.stop()


def _wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def _tls_api_versions(secured: SecuredBroker) -> dict[str, Any]:
    """ApiVersions over a new TLS connection to the SASL_SSL listener (raises when the broker refuses it)."""
    context = ssl.create_default_context(cafile=str(secured.pki.ca))
    context.check_hostname = False
    host, _, port = secured.address("SASL_SSL").rpartition(":")
    raw = socket.create_connection((host, int(port)), timeout=10)
    with context.wrap_socket(raw) as tls:
        conn = RawConnection.__new__(RawConnection)
        conn.sock, conn.correlation_id = tls, 0
        return conn.call(ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})


def test_tls_sockets_are_counted_at_accept_before_any_handshake(tls_limited: SecuredBroker) -> None:
    quotas = tls_limited.broker.quotas
    host, _, port = tls_limited.address("SASL_SSL").rpartition(":")
    assert _tls_api_versions(tls_limited)["ErrorCode"] == 0
    _wait_for(lambda: quotas.open_connections == 0)
    silent = [socket.create_connection((host, int(port)), timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        _wait_for(lambda: quotas.open_connections == MAX_CONNECTIONS)  # no ClientHello sent, yet counted
        with pytest.raises((ssl.SSLError, OSError)):  # refused before its handshake
            _tls_api_versions(tls_limited)
        assert quotas.refused["max.connections"] >= 1
    finally:
        for sock in silent:
            sock.close()
    _wait_for(lambda: quotas.open_connections == 0)
    assert _tls_api_versions(tls_limited)["ErrorCode"] == 0


def test_tls_handshakes_that_fail_or_never_start_give_their_count_back(tls_limited: SecuredBroker) -> None:
    quotas = tls_limited.broker.quotas
    host, _, port = tls_limited.address("SASL_SSL").rpartition(":")
    garbage = socket.create_connection((host, int(port)), timeout=10)
    garbage.sendall(b"\x16\x03\x01\x00\x05not a client hello at all" * 4)
    assert _closed_unanswered(garbage) or True  # the broker may send a TLS alert before it closes
    garbage.close()
    _wait_for(lambda: quotas.open_connections == 0)
    silent = [socket.create_connection((host, int(port)), timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        _wait_for(lambda: quotas.open_connections == MAX_CONNECTIONS)
        # connections.max.idle.ms closes sockets whose handshake never started, and counts them out
        assert all(_closed_unanswered(sock, timeout_s=IDLE_MS / 1000 + 5) for sock in silent)
        _wait_for(lambda: quotas.open_connections == 0)
        assert quotas.idle_closed >= MAX_CONNECTIONS
    finally:
        for sock in silent:
            sock.close()
    assert _tls_api_versions(tls_limited)["ErrorCode"] == 0


def test_tls_handshake_timeout_gives_the_count_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``connections.max.idle.ms`` at its default (10 minutes), the handshake timeout is what ends a socket
    that never sends a ClientHello (asyncio's 60 s, shortened here): it is closed and counted out."""
    from broker_runtime.server import network
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    monkeypatch.setattr(network, "TLS_HANDSHAKE_TIMEOUT_S", 1.0)
    pki = make_pki(tmp_path / "pki")
    props = secured_props(tmp_path, pki)
    props["max.connections"] = str(MAX_CONNECTIONS)
    broker = Broker(BrokerConfig.from_properties(props)).start()
    try:
        quotas = broker.quotas
        assert quotas is not None
        host, port = broker.bound["SSL"]
        silent = [socket.create_connection((host, port), timeout=10) for _ in range(MAX_CONNECTIONS)]
        try:
            _wait_for(lambda: quotas.open_connections == MAX_CONNECTIONS)
            assert all(_closed_unanswered(sock, timeout_s=10) for sock in silent)
            _wait_for(lambda: quotas.open_connections == 0)
            assert quotas.idle_closed == 0
        finally:
            for sock in silent:
                sock.close()
    finally:
        broker.stop()


# -- SCRAM: authorization id, credential store failure -----------------------------------------------------------


def _scram_login(
    conn: RawConnection, user: str, password: str, authzid: str = "", mechanism: str = "SCRAM-SHA-256"
) -> dict[str, Any]:
    """A SCRAM login computed here (RFC 5802), with an optional authzid; the last SaslAuthenticate answer."""
    digest = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
    assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": mechanism})["ErrorCode"] == 0
    gs2 = f"n,{'a=' + authzid if authzid else ''},".encode()
    bare = f"n={user},r=clientnonce123".encode()
    first = conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": gs2 + bare})
    if first["ErrorCode"] != 0:
        return first
    server_first = bytes(first["AuthBytes"])
    attrs = dict(part.split(b"=", 1) for part in server_first.split(b","))
    salted = hashlib.pbkdf2_hmac(
        digest().name, password.encode(), base64.b64decode(attrs[b"s"]), int(attrs[b"i"])
    )
    client_key = hmac.digest(salted, b"Client Key", digest)
    without_proof = b"c=" + base64.b64encode(gs2) + b",r=" + attrs[b"r"]
    auth_message = bare + b"," + server_first + b"," + without_proof
    signature = hmac.digest(digest(client_key).digest(), auth_message, digest)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return conn.call(
        ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": without_proof + b",p=" + base64.b64encode(proof)}
    )


def test_scram_authzid_equal_to_the_user_is_accepted_another_is_refused(secured: SecuredBroker) -> None:
    password = SCRAM_USERS["scram256"][1]
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        assert _scram_login(conn, "scram256", password)["ErrorCode"] == 0
        assert conn.call(*METADATA)["Brokers"]
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        assert _scram_login(conn, "scram256", password, authzid="scram256")["ErrorCode"] == 0
        assert conn.call(*METADATA)["Brokers"]
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        refused = _scram_login(conn, "scram256", password, authzid="admin")
        assert refused["ErrorCode"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert refused["ErrorMessage"] == KAFKA_AUTHZID_MESSAGE
        assert conn.is_closed_by_peer()
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        wrong = _scram_login(conn, "scram256", "not-the-password")
        assert wrong["ErrorCode"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert conn.is_closed_by_peer()


@pytest.mark.parametrize(
    ("content", "defect"),
    [
        (b"{not json", "unreadable"),
        (b'{"version": 1, "users": {"scram256": {"SCRAM-SHA-256": 7}}}', "malformed"),
    ],
    ids=["not-json", "bad-entry"],
)
def test_corrupt_scram_credentials_fail_the_login_with_a_logged_reason(
    secured: SecuredBroker, caplog: pytest.LogCaptureFixture, content: bytes, defect: str
) -> None:
    path = secured.data_dir / "logs" / "scram-credentials.json"
    good = path.read_bytes()
    try:
        path.write_bytes(content)
        with caplog.at_level(logging.WARNING), RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
            answer = _scram_login(conn, "scram256", SCRAM_USERS["scram256"][1])
            assert answer["ErrorCode"] == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert answer["ErrorMessage"] == (
                "Authentication failed during authentication due to invalid credentials with SASL mechanism "
                "SCRAM-SHA-256"
            )
            assert conn.is_closed_by_peer()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(str(path) in m and defect in m for m in warnings), warnings
        assert not any("internal error" in r.getMessage() for r in caplog.records)
    finally:
        path.write_bytes(good)
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        assert _scram_login(conn, "scram256", SCRAM_USERS["scram256"][1])["ErrorCode"] == 0


def test_scram_user_names_are_escaped_as_kafka_and_must_be_ascii(secured: SecuredBroker) -> None:
    """``,`` and ``=`` travel as ``=2C`` / ``=3D`` (RFC 5802, Kafka's ScramFormatter); a name outside US-ASCII is
    refused when it is added, since Kafka's SCRAM grammar (and so the broker) could never log it in."""
    from broker_runtime.errors import ConfigError
    from broker_runtime.security.scram_credentials import upsert_user

    path = secured.data_dir / "logs" / "scram-credentials.json"
    upsert_user(path, "team,a=b", "SCRAM-SHA-512", "pw-team", iterations=4096)
    with RawConnection(secured.address("SASL_PLAINTEXT")) as conn:
        answer = _scram_login(conn, "team=2Ca=3Db", "pw-team", mechanism="SCRAM-SHA-512")
        assert answer["ErrorCode"] == 0
        assert conn.call(*METADATA)["Brokers"]
    with pytest.raises(ConfigError, match="US-ASCII"):
        upsert_user(path, "\u00e5lice", "SCRAM-SHA-256", "pw", iterations=4096)
