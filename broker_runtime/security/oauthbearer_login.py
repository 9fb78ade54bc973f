"""The client's side of SASL/OAUTHBEARER: where its token comes from, when it is renewed, and the two-message
exchange (Kafka's ``OAuthBearerLoginCallbackHandler`` with KIP-768's client credentials, ``FileJwtRetriever``,
``OAuthBearerUnsecuredLoginCallbackHandler`` and ``OAuthBearerSaslClient``).

Where the token comes from (:meth:`OAuthLogin.from_properties`, Kafka's client settings):

* ``sasl.oauthbearer.token.endpoint.url=https://...`` (or ``http://``): the OAuth client-credentials grant
  (RFC 6749 section 4.4): a form POST ``grant_type=client_credentials[&scope=...]`` with HTTP Basic
  authentication by ``sasl.oauthbearer.client.credentials.client.id`` / ``.client.secret`` (Kafka 4.1's names;
  the JAAS options ``clientId`` / ``clientSecret`` / ``scope`` of older Kafka clients work too), the scope from
  ``sasl.oauthbearer.scope``; id and secret URL-encoded first when ``sasl.oauthbearer.header.urlencode=true``.
  The answer's ``access_token`` is the token. Retried on I/O errors and 5xx answers with
  ``sasl.login.retry.backoff.ms`` doubling up to ``sasl.login.retry.backoff.max.ms``; each request bounded by
  ``sasl.login.connect.timeout.ms`` / ``sasl.login.read.timeout.ms`` (10 s each by default). An https endpoint is
  trusted with the JAAS entry's ``ssl.*`` options (as Kafka), else the system CAs.
* ``sasl.oauthbearer.token.endpoint.url=file:/path``: a token issued beforehand, read from the file (again at
  each renewal, so a tool can replace it).
* either URL must be listed in the process's allow-list, the environment variable
  ``PYLOG_SASL_OAUTHBEARER_ALLOWED_URLS`` (Kafka's JVM property ``org.apache.kafka.sasl.oauthbearer.allowed.urls``,
  :mod:`.oauth_http`; ConfigError otherwise), which options (a Spark job's) cannot widen; an endpoint's redirect
  is never followed (the login fails naming the ``Location``).
* neither, for development: an unsigned token made here from the JAAS options ``unsecuredLoginStringClaim_<name>``
  (``sub`` at least), ``unsecuredLoginNumberClaim_<name>``, ``unsecuredLoginListClaim_<name>`` (first character
  is the separator), ``unsecuredLoginLifetimeSeconds`` (3600), ``unsecuredLoginPrincipalClaimName`` (``sub``).
  Only a broker running the unsecured validator takes it.

Renewal: a token is reused until ``sasl.login.refresh.window.factor`` (0.8) plus up to
``sasl.login.refresh.window.jitter`` (0.05) of its lifetime (``exp`` of the JWT, else the endpoint's
``expires_in``) has passed; after that the next login gets a new one (the connection's re-authentication,
KIP-368, comes at 85-95 % of the session the broker granted, which the broker bounds by the token's expiry, so a
long-lived connection renews its token on time). If getting a new one fails while the old one is still valid,
the old one is used (WARNING).

Secrets: the client secret and the tokens are never in a repr, a log line or an error message. A
:class:`TokenSource` is shared by every connection of a process with the same settings (:func:`token_source`)
and is thread-safe (one lock around the renewal); :class:`OAuthLogin` is immutable and picklable.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import random
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_runtime.errors import ConfigError, ErrorCode, KafkaError
from broker_runtime.security.oauth_http import RedirectRefused, check_allowed_url, open_url
from broker_runtime.security.oauthbearer import LOGIN_MODULE, client_first_message

__all__ = [
    "LOGIN_CALLBACK_HANDLERS",
    "OAUTH_CLIENT_KEYS",
    "OAuthBearerClientMechanism",
    "OAuthLogin",
    "TokenSource",
    "token_source",
]

#: Kafka's client settings this module reads (without prefix).
OAUTH_CLIENT_KEYS = (
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.header.urlencode",
    "sasl.login.callback.handler.class",
    "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter",
    "sasl.login.retry.backoff.ms",
    "sasl.login.retry.backoff.max.ms",
    "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms",
)
#: ``sasl.login.callback.handler.class`` values that mean "the token endpoint" (Kafka's, old and new package).
LOGIN_CALLBACK_HANDLERS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
)
_MAX_ANSWER_BYTES = 1 << 20
_log = logging.getLogger(__name__)


def _number(name: str, text: str, lo: float, hi: float) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={text!r}: expected a number in {lo}..{hi}")
    return value


@dataclass(frozen=True)
class OAuthLogin:
    """The client's OAUTHBEARER settings (see the module docstring); hashable, the key of :func:`token_source`."""

    endpoint: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    scope: str | None = None
    urlencode: bool = False
    #: ``(claim, JSON value)`` pairs of the unsigned development token.
    unsecured_claims: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    unsecured_lifetime_s: int = 3600
    principal_claim: str = "sub"
    window_factor: float = 0.8
    window_jitter: float = 0.05
    backoff_ms: int = 100
    backoff_max_ms: int = 10000
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 10.0
    ssl_settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], jaas_options: Mapping[str, str], *, name_prefix: str = ""
    ) -> OAuthLogin:
        def name(key: str) -> str:
            return name_prefix + key

        def get(key: str, jaas: str | None = None) -> str | None:
            value = props.get(key)
            if (value is None or not str(value).strip()) and jaas is not None:
                value = jaas_options.get(jaas)
            return str(value).strip() if value is not None and str(value).strip() else None

        handler = get("sasl.login.callback.handler.class")
        if handler is not None and handler not in LOGIN_CALLBACK_HANDLERS:
            raise ConfigError(
                f"{name('sasl.login.callback.handler.class')}={handler!r}: pylog runs no Java callback handlers; "
                f"OAUTHBEARER gets its token from {name('sasl.oauthbearer.token.endpoint.url')} "
                f"({LOGIN_CALLBACK_HANDLERS[0]}) or, unset, makes an unsigned development token"
            )
        kw: dict[str, Any] = {
            "window_factor": _number(
                name("sasl.login.refresh.window.factor"),
                props.get("sasl.login.refresh.window.factor", "0.8"),
                0.5,
                1.0,
            ),
            "window_jitter": _number(
                name("sasl.login.refresh.window.jitter"),
                props.get("sasl.login.refresh.window.jitter", "0.05"),
                0,
                0.25,
            ),
            "backoff_ms": int(
                _number(
                    name("sasl.login.retry.backoff.ms"),
                    props.get("sasl.login.retry.backoff.ms", "100"),
                    0,
                    1e9,
                )
            ),
            "backoff_max_ms": int(
                _number(
                    name("sasl.login.retry.backoff.max.ms"),
                    props.get("sasl.login.retry.backoff.max.ms", "10000"),
                    0,
                    1e9,
                )
            ),
            "connect_timeout_s": _number(
                name("sasl.login.connect.timeout.ms"),
                props.get("sasl.login.connect.timeout.ms", "10000"),
                1,
                1e9,
            )
            / 1000,
            "read_timeout_s": _number(
                name("sasl.login.read.timeout.ms"), props.get("sasl.login.read.timeout.ms", "10000"), 1, 1e9
            )
            / 1000,
        }
        endpoint = get("sasl.oauthbearer.token.endpoint.url")
        unsecured = {k: v for k, v in jaas_options.items() if k.startswith("unsecuredLogin")}
        if endpoint is None:
            if handler is not None:
                raise ConfigError(
                    f"{name('sasl.oauthbearer.token.endpoint.url')} is required with "
                    f"{name('sasl.login.callback.handler.class')}={handler}"
                )
            return cls(**kw, **_unsecured_login(name("sasl.jaas.config"), unsecured))
        if unsecured:
            raise ConfigError(
                f"{name('sasl.jaas.config')}: the unsecuredLogin* options make an unsigned token; they cannot be "
                f"combined with {name('sasl.oauthbearer.token.endpoint.url')}"
            )
        scheme = urllib.parse.urlparse(endpoint).scheme.lower()
        if scheme not in ("https", "http", "file"):
            raise ConfigError(
                f"{name('sasl.oauthbearer.token.endpoint.url')}={endpoint!r}: the URL's protocol must be https, "
                "http (the identity provider's token endpoint) or file (a token issued beforehand)"
            )
        check_allowed_url(name("sasl.oauthbearer.token.endpoint.url"), endpoint)
        client_id = get("sasl.oauthbearer.client.credentials.client.id", "clientId")
        secret = get("sasl.oauthbearer.client.credentials.client.secret", "clientSecret")
        if scheme != "file" and (client_id is None or secret is None):
            raise ConfigError(
                f"{name('sasl.oauthbearer.token.endpoint.url')} is an http(s) token endpoint: set "
                f"{name('sasl.oauthbearer.client.credentials.client.id')} and "
                f"{name('sasl.oauthbearer.client.credentials.client.secret')} (the OAuth client's credentials)"
            )
        urlencode_text = props.get("sasl.oauthbearer.header.urlencode", "false").strip().lower()
        if urlencode_text not in ("true", "false"):
            raise ConfigError(
                f"{name('sasl.oauthbearer.header.urlencode')}={urlencode_text!r}: expected true or false"
            )
        ssl_settings = tuple(sorted((k, v) for k, v in jaas_options.items() if k.startswith("ssl.")))
        return cls(
            endpoint=endpoint,
            client_id=client_id,
            client_secret=secret,
            scope=get("sasl.oauthbearer.scope", "scope"),
            urlencode=urlencode_text == "true",
            ssl_settings=ssl_settings,
            **kw,
        )


def _unsecured_login(key: str, options: Mapping[str, str]) -> dict[str, Any]:
    claims: dict[str, Any] = {}
    lifetime_s, principal = 3600, "sub"
    for option, value in options.items():
        if option.startswith("unsecuredLoginStringClaim_"):
            claims[option.removeprefix("unsecuredLoginStringClaim_")] = value
        elif option.startswith("unsecuredLoginNumberClaim_"):
            claims[option.removeprefix("unsecuredLoginNumberClaim_")] = _number(
                f"{key} {option}", value, -1e18, 1e18
            )
        elif option.startswith("unsecuredLoginListClaim_"):
            sep, rest = value[:1], value[1:]
            claims[option.removeprefix("unsecuredLoginListClaim_")] = (
                [v for v in rest.split(sep) if v] if sep else []
            )
        elif option == "unsecuredLoginLifetimeSeconds":
            lifetime_s = int(_number(f"{key} {option}", value, 1, 1e9))
        elif option == "unsecuredLoginPrincipalClaimName":
            principal = value.strip() or "sub"
        else:
            raise ConfigError(f"{key}: unknown option {option} of {LOGIN_MODULE}")
    if not str(claims.get(principal, "")).strip():
        raise ConfigError(
            f"{key}: OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url (the identity provider's token "
            f"endpoint), or, for development against a broker taking unsigned tokens, unsecuredLoginStringClaim_"
            f'{principal}="<user>" in the {LOGIN_MODULE} entry'
        )
    return {
        "unsecured_claims": tuple(sorted((k, json.dumps(v)) for k, v in claims.items())),
        "unsecured_lifetime_s": lifetime_s,
        "principal_claim": principal,
    }


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt_expiry_s(token: str) -> float | None:
    """The ``exp`` claim of a JWT, read without checking its signature (only to know when to renew it)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, RecursionError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


class TokenSource:
    """The token of one :class:`OAuthLogin`, renewed as the module docstring says. Thread-safe."""

    def __init__(self, login: OAuthLogin) -> None:
        self.login = login
        self._lock = threading.Lock()
        self._token: str | None = None
        self._renew_at = 0.0
        self._expires_at = 0.0
        #: How many tokens were obtained (tests, metrics).
        self.obtained = 0

    def token(self) -> str:
        with self._lock:
            now = time.time()
            if self._token is not None and now < self._renew_at:
                return self._token
            try:
                token, expires_at = self._obtain(now)
            except KafkaError as exc:
                if self._token is not None and now < self._expires_at:
                    _log.warning("OAUTHBEARER: could not renew the token, using the current one: %s", exc)
                    return self._token
                raise
            lifetime = max(0.0, expires_at - now)
            factor = self.login.window_factor + random.uniform(0, self.login.window_jitter)
            self._token, self._expires_at = token, expires_at
            self._renew_at = now + lifetime * min(factor, 1.0)
            self.obtained += 1
            return token

    def _obtain(self, now: float) -> tuple[str, float]:
        login = self.login
        if login.endpoint is None:
            claims = {k: json.loads(v) for k, v in login.unsecured_claims}
            claims.setdefault("iat", int(now))
            claims.setdefault("exp", int(now) + login.unsecured_lifetime_s)
            header = _b64(json.dumps({"alg": "none"}).encode())
            return f"{header}.{_b64(json.dumps(claims).encode())}.", float(claims["exp"])
        if login.endpoint.lower().startswith("file:"):
            import urllib.request  # with http.client: only a client that logs in through an endpoint needs it

            path = Path(urllib.request.url2pathname(urllib.parse.urlparse(login.endpoint).path))
            try:
                token = path.read_text().strip()
            except OSError as exc:
                raise _failed(f"cannot read the token file {path}: {exc.strerror or exc}") from None
            expires = _jwt_expiry_s(token)
            if expires is None:
                raise _failed(f"the token in {path} is not a JWT with an exp claim")
            return token, expires
        return self._client_credentials(now)

    def _client_credentials(self, now: float) -> tuple[str, float]:
        import http.client
        import urllib.error
        import urllib.request

        login = self.login
        assert login.endpoint is not None and login.client_id is not None and login.client_secret is not None
        cid, secret = login.client_id, login.client_secret
        if login.urlencode:
            cid, secret = urllib.parse.quote(cid, safe=""), urllib.parse.quote(secret, safe="")
        basic = base64.b64encode(f"{cid}:{secret}".encode()).decode()
        form = {"grant_type": "client_credentials"}
        if login.scope:
            form["scope"] = login.scope
        request = urllib.request.Request(
            login.endpoint,
            data=urllib.parse.urlencode(form).encode(),
            headers={
                "Authorization": f"Basic {basic}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
            method="POST",
        )
        context = _ssl_context(login.ssl_settings) if login.endpoint.lower().startswith("https:") else None
        wait_ms = max(login.backoff_ms, 1)
        while True:
            try:
                with open_url(
                    request, timeout=login.connect_timeout_s + login.read_timeout_s, context=context
                ) as answer:
                    body = answer.read(_MAX_ANSWER_BYTES + 1)
                break
            except RedirectRefused as exc:
                raise _failed(f"the token endpoint {exc}") from None
            except urllib.error.HTTPError as exc:
                if exc.code < 500 or wait_ms > login.backoff_max_ms:
                    raise _failed(
                        f"the token endpoint {login.endpoint} answered HTTP {exc.code} {exc.reason} (are the client "
                        "id and secret right?)"
                        if exc.code in (400, 401, 403)
                        else f"the token endpoint {login.endpoint} answered HTTP {exc.code} {exc.reason}"
                    ) from None
            except (OSError, http.client.HTTPException) as exc:
                if wait_ms > login.backoff_max_ms:
                    raise _failed(
                        f"the token endpoint {login.endpoint} could not be reached: {exc}"
                    ) from None
            time.sleep(wait_ms / 1000)
            wait_ms *= 2
        try:
            data = json.loads(body) if len(body) <= _MAX_ANSWER_BYTES else None
        except (ValueError, RecursionError):
            data = None
        token = data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise _failed(
                f"the token endpoint {login.endpoint} did not answer a JSON object with an access_token"
            )
        expires = _jwt_expiry_s(token)
        if expires is None:
            expires_in = data.get("expires_in") if isinstance(data, dict) else None
            if not isinstance(expires_in, int | float) or isinstance(expires_in, bool):
                raise _failed(f"the token from {login.endpoint} has neither an exp claim nor an expires_in")
            expires = now + float(expires_in)
        return token, expires


def _failed(message: str) -> KafkaError:
    return KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, f"OAUTHBEARER login: {message}")


@functools.lru_cache(maxsize=16)
def _ssl_context(settings: tuple[tuple[str, str], ...]) -> ssl.SSLContext:
    from broker_runtime.security.tls import client_context

    return client_context(dict(settings))


@functools.lru_cache(maxsize=16)
def token_source(login: OAuthLogin) -> TokenSource:
    """The process' :class:`TokenSource` of ``login`` (shared by its connections)."""
    return TokenSource(login)


class OAuthBearerClientMechanism:
    """The client's OAUTHBEARER exchange, with :class:`~.sasl_client.SaslClientMechanism`'s interface: the
    client first message with the token; an empty server answer completes it; a non-empty one is the broker's
    error JSON, answered ``^A`` (Kafka's ``OAuthBearerSaslClient``) so the broker fails the login with it."""

    name = "OAUTHBEARER"

    def __init__(self, source: TokenSource) -> None:
        self.complete = False
        self._source = source

    def first(self) -> bytes:
        return client_first_message(self._source.token())

    def step(self, challenge: bytes) -> bytes | None:
        if not challenge:
            self.complete = True
            return None
        return b"\x01"
