"""An OAuth/OIDC identity provider for tests, on loopback: a JWKS endpoint and a client-credentials token endpoint
(RFC 6749 section 4.4), signing with keys made by ``cryptography``.

    with IdentityProvider() as idp:
        idp.jwks_url                     # http://127.0.0.1:<port>/jwks
        idp.token_url                    # http://127.0.0.1:<port>/token (Basic auth: client id and secret)
        idp.token(sub="alice")           # a signed JWT (RS256, kid "k1", aud AUDIENCE, iss ISSUER, 5 minutes)

Used without ``with``, nothing is served (its keys and :meth:`token` still work; write ``jwks`` to a file for a
``file:`` JWKS URL). ``clients`` maps client id -> (secret, subject); the token endpoint answers ``{"access_token", "token_type",
"expires_in"}`` for a known client and 401 otherwise, and counts its calls (``token_requests``) and the JWKS'
(``jwks_requests``); ``/jwks-broken`` always answers 500; ``/token-moved`` and ``/jwks-moved`` answer 302 to
``moved_to`` (and count the requests that reach ``/stolen``, with the Authorization header they carried, in
``stolen``). ``lifetime_s`` sets the tokens' lifetime. The server runs in one daemon thread; everything
it reads is set before it starts or replaced by one assignment.

Allow-list: inside its ``with`` block the provider's URLs are in ``PYLOG_SASL_OAUTHBEARER_ALLOWED_URLS`` of this
process (:func:`allowed_urls`); ``port`` fixes its port, for the Spark session's Python workers, which inherit the
environment the session's JVM started with (``spark_idp_port``, allowed by the ``spark`` fixture).

:func:`refused_token_exchanges` plays the SASL/OAUTHBEARER exchanges after a refused token over raw connections;
:data:`REFUSED_TOKEN_EXCHANGES` is what Apache Kafka and pylog both answer to them.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from broker_runtime.security.oauth_http import ALLOWED_URLS_ENV

AUDIENCE = "pylog-test"
ISSUER = "https://idp.pylog.test"


def _rsa_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": kid, "use": "sig", "alg": "RS256"})
    return jwk


@contextlib.contextmanager
def allowed_urls(*urls: str) -> Iterator[None]:
    """Add ``urls`` to this process's OAuth allow-list for the block; the previous value comes back after it."""
    before = os.environ.get(ALLOWED_URLS_ENV)
    os.environ[ALLOWED_URLS_ENV] = ",".join([*([before] if before else []), *urls])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ALLOWED_URLS_ENV, None)
        else:
            os.environ[ALLOWED_URLS_ENV] = before


@functools.cache
def spark_idp_port() -> int:
    """A loopback port chosen once per process for the identity provider the Spark tests use."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_idp_urls() -> list[str]:
    base = f"http://127.0.0.1:{spark_idp_port()}"
    return [f"{base}/token", f"{base}/jwks"]


class IdentityProvider:
    def __init__(self, *, lifetime_s: int = 300, port: int = 0) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        #: A key the JWKS does not hold (tokens signed with it carry kid "k1" too: a forged token).
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec_key = ec.generate_private_key(ec.SECP256R1())
        ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.ec_key.public_key()))
        ec_jwk.update({"kid": "e1", "use": "sig"})
        self.jwks: dict[str, Any] = {"keys": [_rsa_jwk(self.key, "k1"), ec_jwk]}
        self.lifetime_s = lifetime_s
        self.clients: dict[str, tuple[str, str]] = {"pylog-client": ("client-secret", "svc-pylog")}
        self.token_requests = 0
        self.jwks_requests = 0
        self.scopes_asked: list[str | None] = []
        self.port = port
        self.moved_to = ""
        self.stolen: list[str] = []
        self._allowed: contextlib.ExitStack | None = None
        #: The HTTP server, from ``__enter__`` on (without it the keys and ``token`` still work).
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the identity provider serves only inside its with block"
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    @property
    def jwks_url(self) -> str:
        return f"{self.base_url}/jwks"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/token"

    def token(
        self,
        sub: str = "alice",
        *,
        key: Any = None,
        algorithm: str = "RS256",
        kid: str | None = "k1",
        aud: str | None = AUDIENCE,
        iss: str | None = ISSUER,
        lifetime_s: float | None = None,
        issued_at: float | None = None,
        **claims: Any,
    ) -> str:
        now = time.time() if issued_at is None else issued_at
        payload: dict[str, Any] = {
            "sub": sub,
            "iat": int(now),
            "exp": int(now + (lifetime_s or self.lifetime_s)),
        }
        if aud is not None:
            payload["aud"] = aud
        if iss is not None:
            payload["iss"] = iss
        payload.update(claims)
        headers = {"kid": kid} if kid is not None else {}
        return jwt.encode(payload, key if key is not None else self.key, algorithm=algorithm, headers=headers)

    def __enter__(self) -> IdentityProvider:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self.moved_to = f"{self.base_url}/stolen"
        self._allowed = contextlib.ExitStack()
        self._allowed.enter_context(
            allowed_urls(
                self.token_url,
                self.jwks_url,
                f"{self.base_url}/jwks-broken",
                f"{self.base_url}/token-moved",
                f"{self.base_url}/jwks-moved",
            )
        )
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="test-idp", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None and self._allowed is not None
        self._allowed.close()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _moved(self) -> None:
                self.send_response(302)
                self.send_header("Location", idp.moved_to)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _stolen(self) -> None:
                idp.stolen.append(self.headers.get("Authorization", ""))
                self._answer(200, {"access_token": "x", "keys": []})

            def do_GET(self) -> None:
                if self.path == "/jwks-moved":
                    return self._moved()
                if self.path == "/stolen":
                    return self._stolen()
                if self.path == "/jwks-broken":
                    return self._answer(500, {"error": "down"})
                if self.path != "/jwks":
                    return self._answer(404, {"error": "not found"})
                idp.jwks_requests += 1
                self._answer(200, idp.jwks)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                if self.path == "/token-moved":
                    return self._moved()
                if self.path == "/stolen":
                    return self._stolen()
                if self.path != "/token":
                    return self._answer(404, {"error": "not found"})
                idp.token_requests += 1
                auth = self.headers.get("Authorization", "")
                client_id = secret = ""
                if auth.startswith("Basic "):
                    client_id, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
                known = idp.clients.get(client_id)
                if form.get("grant_type") != ["client_credentials"] or known is None or known[0] != secret:
                    return self._answer(401, {"error": "invalid_client"})
                scope = form.get("scope", [None])[0]
                idp.scopes_asked.append(scope)
                token = idp.token(known[1], scope=scope) if scope else idp.token(known[1])
                self._answer(
                    200, {"access_token": token, "token_type": "Bearer", "expires_in": idp.lifetime_s}
                )

        return Handler


#: Kafka's answer to an OAUTHBEARER client message that is not a client first message (a ``SaslException`` of
#: ``OAuthBearerSaslServer``, which ``SaslServerAuthenticator`` answers naming only the phase and the mechanism).
GENERIC_FAILURE = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"
)
INVALID_TOKEN = '{"status":"invalid_token"}'

#: What :func:`refused_token_exchanges` reads from Apache Kafka 4.4 (checked against it by
#: tests/connector/on_apache_kafka/test_cluster_and_security.py) and from pylog (tests/security/test_oauthbearer.py):
#: per exchange, each SaslAuthenticate answer as (ErrorCode, ErrorMessage, AuthBytes; ``(-1, "closed", b"")`` when the
#: connection closed without one), then whether the broker closed the connection.
REFUSED_TOKEN_EXCHANGES: dict[str, tuple[list[tuple[int, str | None, bytes]], bool]] = {
    # The Java client's and librdkafka's way: ^A acknowledges the error; the login fails with the JSON.
    "acknowledged": ([(0, "", INVALID_TOKEN.encode()), (58, INVALID_TOKEN, b"")], True),
    # Anything else after the error is a new client first message: another token may log in ...
    "another token": ([(0, "", INVALID_TOKEN.encode()), (0, "", b"")], False),
    # ... and a message that is not one fails with the generic text.
    "garbage after the error": ([(0, "", INVALID_TOKEN.encode()), (58, GENERIC_FAILURE, b"")], True),
    "malformed first message": ([(58, GENERIC_FAILURE, b"")], True),
}


def refused_token_exchanges(
    connect: Any, good_token: str, refused_token: str
) -> dict[str, tuple[list[tuple[int, str | None, bytes]], bool]]:
    """The exchanges of :data:`REFUSED_TOKEN_EXCHANGES` over fresh connections (``connect()``: a
    :class:`~tests.server.rawclient.RawConnection` to an OAUTHBEARER listener)."""
    from broker_runtime.protocol.messages import ApiKey
    from broker_runtime.security.oauthbearer import client_first_message

    messages = {
        "acknowledged": [client_first_message(refused_token), b"\x01"],
        "another token": [client_first_message(refused_token), client_first_message(good_token)],
        "garbage after the error": [client_first_message(refused_token), b"garbage"],
        # Not "auth=Basic ...": Kafka 4.4 closes the connection without an answer on another scheme (formatting
        # its message it asks its pattern for a group the pattern lacks); pylog answers the generic text.
        "malformed first message": [b"n,,\x01garbage\x01\x01"],
    }
    seen: dict[str, tuple[list[tuple[int, str | None, bytes]], bool]] = {}
    for name, sent in messages.items():
        with connect() as conn:
            assert conn.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "OAUTHBEARER"})["ErrorCode"] == 0
            answers: list[tuple[int, str | None, bytes]] = []
            for message in sent:
                try:
                    answer = conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": message})
                except ConnectionError:  # closed without an answer
                    answers.append((-1, "closed", b""))
                    break
                answers.append((answer["ErrorCode"], answer["ErrorMessage"], bytes(answer["AuthBytes"])))
            seen[name] = (answers, conn.is_closed_by_peer(timeout_s=1.0 if answers[-1][0] else 0.2))
    return seen
