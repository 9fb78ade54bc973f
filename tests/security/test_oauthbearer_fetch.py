"""What the OAUTHBEARER code fetches and how (broker_runtime/security/oauth_http.py): a token endpoint or JWKS URL
not in ``PYLOG_SASL_OAUTHBEARER_ALLOWED_URLS`` is refused at configuration (Kafka's
``org.apache.kafka.sasl.oauthbearer.allowed.urls``, ``file:`` URLs too); a redirect is never followed (the
client's Basic credentials do not travel, no key set is taken from elsewhere); a JWKS endpoint answering garbage
is a WARNING, counted, and the refresher goes on; the PyJWT floor has the fixes the validator relies on."""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.errors import ConfigError, KafkaError
from broker_runtime.security import ClientSecurity
from broker_runtime.security.jwks import JwksKeys
from broker_runtime.security.oauth_http import ALLOWED_URLS_ENV
from broker_runtime.security.oauthbearer_login import token_source
from tests.support.oauth import IdentityProvider, allowed_urls

pytestmark = pytest.mark.timeout(30)

JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"


def _client(url: str) -> ClientSecurity:
    return ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": JAAS,
            "sasl.oauthbearer.token.endpoint.url": url,
            "sasl.oauthbearer.client.credentials.client.id": "pylog-client",
            "sasl.oauthbearer.client.credentials.client.secret": "client-secret",
            "sasl.login.retry.backoff.max.ms": "0",
        }
    )


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    with IdentityProvider() as idp:
        yield idp


def test_urls_outside_the_allow_list_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOWED_URLS_ENV, raising=False)
    token_file = (tmp_path / "token.jwt").as_uri()
    for url in ("http://169.254.169.254/latest/meta-data/", token_file):
        with pytest.raises(ConfigError, match=rf"token.endpoint.url='{re.escape(url)}'.*{ALLOWED_URLS_ENV}"):
            _client(url)
        with pytest.raises(ConfigError, match=rf"jwks.endpoint.url='{re.escape(url)}'.*{ALLOWED_URLS_ENV}"):
            JwksKeys(url)
    # Entries are trimmed and compared exactly, as Kafka compares them: no prefix, no pattern.
    monkeypatch.setenv(ALLOWED_URLS_ENV, f" http://127.0.0.1:9/token , {token_file}")
    _client("http://127.0.0.1:9/token")
    _client(token_file)
    for near in ("http://127.0.0.1:9/token2", "http://127.0.0.1:9/"):
        with pytest.raises(ConfigError, match=ALLOWED_URLS_ENV):
            _client(near)


def test_redirects_are_not_followed(idp: IdentityProvider, caplog: pytest.LogCaptureFixture) -> None:
    security = _client(f"{idp.base_url}/token-moved")
    assert security.oauth is not None
    with pytest.raises(KafkaError, match=f"answered HTTP 302 redirecting to '{re.escape(idp.moved_to)}'"):
        token_source(security.oauth).token()
    keys = JwksKeys(f"{idp.base_url}/jwks-moved")
    with caplog.at_level(logging.WARNING, logger="broker_runtime.security.jwks"):
        keys.start()
    keys.close()
    assert keys.refresh_failures == 1 and keys.refreshes == 0
    assert idp.moved_to in caplog.text
    assert idp.stolen == []  # neither the client's credentials nor a key set request went there


@pytest.fixture
def garbage_url() -> Iterator[str]:
    """An endpoint answering ``garbage`` instead of a status line (http.client.BadStatusLine)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"garbage\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/jwks"
    with allowed_urls(url):
        yield url
    stop.set()
    thread.join(5)
    server.close()


def test_a_garbage_answer_is_a_warning_and_the_refresher_goes_on(garbage_url: str) -> None:
    keys = JwksKeys(garbage_url, retry_backoff_ms=10, retry_backoff_max_ms=20).start()  # no exception
    try:
        deadline = time.monotonic() + 10
        while keys.refresh_failures < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert keys.refresh_failures >= 3  # the start's read and at least two of the refresher's
        assert keys._thread is not None and keys._thread.is_alive()
    finally:
        keys.close()


def test_the_pyjwt_floor_has_the_fixes_the_validator_relies_on() -> None:
    """2.13.0: the token's ``alg`` bound to the PyJWK's algorithm (GHSA-jq35-7prp-9v3f) and the ``b64=false``
    DoS (GHSA-w7vc-732c-9m39); the validator passes PyJWK keys to ``jwt.decode``."""
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    (spec,) = [d for d in pyproject["project"]["dependencies"] if d.lower().startswith("pyjwt")]
    floor = re.search(r">=\s*([0-9.]+)", spec)
    assert floor is not None, spec
    assert tuple(int(p) for p in floor.group(1).split(".")) >= (2, 13), spec
