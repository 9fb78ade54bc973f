"""A slow JWKS endpoint does not stall the broker's other listeners: the first read of an OAUTHBEARER listener's
JWKS (at start, as Kafka reads it before the broker serves) runs off the event loop, so a PLAINTEXT listener bound
before it answers ApiVersions while the endpoint is still holding its answer; once the endpoint answers the broker
finishes starting and a signed token logs in on the OAUTHBEARER listener at once."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.protocol.messages import ApiKey
from broker_runtime.security.oauthbearer import client_first_message
from broker_runtime.server.config import BrokerConfig
from broker_runtime.server.node.broker import Broker
from tests.server.rawclient import RawConnection
from tests.support.oauth import AUDIENCE, ISSUER, IdentityProvider, allowed_urls

pytestmark = pytest.mark.timeout(60)

#: How long the endpoint holds its answer at most (the test releases it as soon as it has seen what it needs).
HOLD_S = 10.0


class SlowJwks:
    """A JWKS endpoint on loopback that answers only once :attr:`release` is set (or after :data:`HOLD_S`)."""

    def __init__(self, jwks: dict[str, Any]) -> None:
        self.release = threading.Event()
        self.asked = threading.Event()
        self.answered = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.asked.set()
                outer.release.wait(HOLD_S)
                data = json.dumps(jwks).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                outer.answered.set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks"
        self._thread = threading.Thread(target=self.server.serve_forever, name="test-slow-jwks", daemon=True)

    def __enter__(self) -> SlowJwks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


@pytest.fixture
def slow_jwks() -> Iterator[tuple[SlowJwks, IdentityProvider]]:
    idp = IdentityProvider()  # its keys and tokens only; the slow server serves its JWKS
    with SlowJwks(idp.jwks) as endpoint, allowed_urls(endpoint.url):
        yield endpoint, idp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _connect(port: int, deadline: float) -> RawConnection:
    """A connection to the broker's PLAINTEXT listener, retried until it is bound (the broker is starting)."""
    while True:
        try:
            return RawConnection(f"127.0.0.1:{port}", timeout_s=3.0)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_a_slow_jwks_endpoint_does_not_delay_the_other_listeners(
    tmp_path: Path, slow_jwks: tuple[SlowJwks, IdentityProvider]
) -> None:
    endpoint, idp = slow_jwks
    port = _free_port()
    config = BrokerConfig.from_properties(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{port},OAUTH://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(tmp_path / "logs"),
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.oauth.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": endpoint.url,
            "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.audience": AUDIENCE,
            "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.issuer": ISSUER,
        }
    )
    broker = Broker(config)
    starting = threading.Thread(target=broker.start, name="test-broker-start", daemon=True)
    starting.start()
    try:
        assert endpoint.asked.wait(20), "the broker never read its JWKS"
        with _connect(port, time.monotonic() + 10) as conn:
            began = time.monotonic()
            answer = conn.call(
                ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"}
            )
            took = time.monotonic() - began
        assert answer["ErrorCode"] == 0
        assert not endpoint.answered.is_set(), "answered while the JWKS endpoint still held its answer"
        assert took < 2.0, took
        endpoint.release.set()
        starting.join(20)
        assert not starting.is_alive(), "the broker did not finish starting once its JWKS was read"
        with RawConnection(broker.listener_bootstrap("OAUTH")) as conn:
            assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "OAUTHBEARER"})["ErrorCode"] == 0
            login = conn.call(
                ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": client_first_message(idp.token("alice"))}
            )
            assert login["ErrorCode"] == 0, login
    finally:
        endpoint.release.set()
        starting.join(20)
        broker.stop()
