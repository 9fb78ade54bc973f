"""A slow JWKS endpoint does not stall the broker's other listeners: the first read of an OAUTHBEARER listener's
JWKS (at start, as Kafka reads it before the broker serves) runs off the event loop, so a PLAINTEXT listener bound
before it answers ApiVersions while the endpoint is still holding its answer; once the endpoint answers the broker
finishes starting and a signed token logs in on the OAUTHBEARER listener at once."""

from __future__ import annotations

import json
import threading
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

#: How long the endpoint holds its answer at most: the test releases it once it has its ApiVersions answer, so only a
#: broker whose loop waits for the JWKS sees the endpoint answer first (after this long), and fails the test. Below
#: the broker's JWKS read timeout (10 s), so such a broker still reads it and then answers.
HOLD_S = 8.0


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
                outer.answered.set()  # before a byte goes out: the broker cannot have the keys before it is set
                data = json.dumps(jwks).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

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


def test_a_slow_jwks_endpoint_does_not_delay_the_other_listeners(
    tmp_path: Path, slow_jwks: tuple[SlowJwks, IdentityProvider]
) -> None:
    endpoint, idp = slow_jwks
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,OAUTH://127.0.0.1:0",
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
        # The PLAINTEXT listener is bound (and its bound port recorded) before the OAUTH one reads its JWKS.
        with RawConnection(broker.listener_bootstrap("PLAINTEXT"), timeout_s=HOLD_S + 10) as conn:
            answer = conn.call(
                ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"}
            )
        assert answer["ErrorCode"] == 0
        # The endpoint answers only once released (below) or after HOLD_S: answered before it means the broker
        # answered ApiVersions only once the JWKS read was over.
        assert not endpoint.answered.is_set(), "answered only once the JWKS endpoint gave its answer"
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
