"""The broker's JWKS (JSON Web Key Set, RFC 7517): the public keys that sign OAUTHBEARER tokens, read from
``sasl.oauthbearer.jwks.endpoint.url`` and kept fresh (Kafka's ``RefreshingHttpsJwks`` and
``JwksFileVerificationKeyResolver``).

Format: ``{"keys": [{"kty": "RSA"|"EC"|"OKP", "kid": ..., "alg"?: ..., "use"?: "sig", ...}, ...]}``; keys of
another type (``oct``: a shared secret has no place in a public key set) or ``"use": "enc"`` are left out with a
WARNING naming them. At most :data:`MAX_JWKS_BYTES` are read.

URL: ``https://`` or ``http://`` (fetched with the JAAS entry's ``ssl.*`` trust settings for https, else the
system CAs), or ``file:`` (read from the local file); it must be listed in the process's allow-list
(:mod:`.oauth_http`, Kafka's ``org.apache.kafka.sasl.oauthbearer.allowed.urls``: ConfigError otherwise), and a
redirect is never followed (the read fails). :meth:`JwksKeys.start` reads it once, at broker start; a
file that cannot be read or parsed fails the start (:class:`~broker_runtime.errors.ConfigError`, as Kafka); an
endpoint that does not answer is a WARNING and retried in the background with exponential backoff
(``sasl.oauthbearer.jwks.endpoint.retry.backoff.ms`` doubling up to ``...retry.backoff.max.ms``) -- until keys
arrive every login fails with ``invalid_token``. Then it is read again every
``sasl.oauthbearer.jwks.endpoint.refresh.ms``; a refresh that fails, whatever the failure, keeps the keys it had (WARNING, counted in
:attr:`JwksKeys.refresh_failures`) and the refresher goes on.

Bounded cost for clients: a token whose ``kid`` is not in the set asks the refresher for an early refresh (a
key the provider has just rotated in), but at most once per :data:`MIN_ON_DEMAND_REFRESH_S`, and only for a
``kid`` of at most :data:`MAX_KID_CHARS` characters (Kafka's limit); the login itself never waits for it (it
fails, as in Kafka; the client's retry finds the new key).

Threading: one daemon thread per JWKS (started by :meth:`start`, ended by :meth:`close`) fetches; the key set is
an immutable snapshot swapped by one assignment, read by the event loop without a lock.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_runtime.errors import ConfigError
from broker_runtime.security.oauth_http import check_allowed_url, open_url
from broker_runtime.security.oauthbearer import InvalidToken

if TYPE_CHECKING:
    import jwt

__all__ = ["MAX_JWKS_BYTES", "MAX_KID_CHARS", "MIN_ON_DEMAND_REFRESH_S", "JwksKeys", "parse_jwks"]

MAX_JWKS_BYTES = 1 << 20
MAX_KID_CHARS = 1000
MIN_ON_DEMAND_REFRESH_S = 10.0
_FETCH_TIMEOUT_S = 10.0
#: The key type each algorithm family verifies with.
_KTY = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}

_log = logging.getLogger(__name__)


def parse_jwks(text: bytes, source: str) -> dict[str, dict[str, Any]]:
    """``kid`` (``""`` when absent) -> JWK of the usable signature keys; ValueError naming what is wrong."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{source} is not JSON: {exc}") from None
    keys = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(keys, list):
        raise ValueError(f'{source} is not a JWKS: expected {{"keys": [...]}}')
    out: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for key in keys:
        if not isinstance(key, dict):
            continue
        kid = key.get("kid", "")
        if (
            key.get("kty") not in ("RSA", "EC", "OKP")
            or key.get("use", "sig") != "sig"
            or not isinstance(kid, str)
        ):
            skipped.append(str(kid))
            continue
        out[kid] = key
    if skipped:
        _log.warning(
            "%s: %d key(s) left out (not an RSA, EC or OKP signature key): kid %s",
            source,
            len(skipped),
            skipped,
        )
    return out


class JwksKeys:
    """See the module docstring. ``resolve`` is the validator's :class:`~.oauthbearer.KeyResolver`."""

    def __init__(
        self,
        url: str,
        *,
        refresh_ms: int = 3_600_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 10_000,
        ssl_context: ssl.SSLContext | None = None,
        key: str = "sasl.oauthbearer.jwks.endpoint.url",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # urllib.request (and http.client): only a broker with a JWKS endpoint needs it
        from urllib.request import url2pathname

        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("https", "http", "file"):
            raise ConfigError(
                f"{key}={url!r}: the URL's protocol must be https, http or file (the JWKS endpoint of the "
                "identity provider, or a JWKS file)"
            )
        check_allowed_url(key, url)
        self.url = url
        self._key = key
        self._file = Path(url2pathname(parsed.path)) if parsed.scheme == "file" else None
        self._refresh_s = refresh_ms / 1000
        self._backoff_s = max(retry_backoff_ms, 1) / 1000
        self._backoff_max_s = max(retry_backoff_max_ms, retry_backoff_ms, 1) / 1000
        self._ssl_context = ssl_context
        self._clock = clock
        #: (kid -> JWK, (kid, alg) -> PyJWK built from it), replaced whole by the refresher; None until a first
        #: read succeeded. The second map is filled by ``resolve`` (the event loop) and dropped with its snapshot.
        self._snapshot: tuple[Mapping[str, Mapping[str, Any]], dict[tuple[str, str], jwt.PyJWK]] | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_on_demand: float | None = None
        self.refreshes = 0
        self.refresh_failures = 0
        self.on_demand_refreshes = 0

    # -- reading --------------------------------------------------------------------------------------------

    def _read(self) -> bytes:
        if self._file is not None:
            with self._file.open("rb") as f:
                return f.read(MAX_JWKS_BYTES + 1)
        import urllib.request

        request = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        with open_url(request, timeout=_FETCH_TIMEOUT_S, context=self._ssl_context) as answer:
            return bytes(answer.read(MAX_JWKS_BYTES + 1))

    def _refresh(self) -> None:
        """Read and parse the set; on success swap it in. Raises whatever the read raised (OSError, ValueError,
        http.client.HTTPException, RedirectRefused, ...)."""
        data = self._read()
        if len(data) > MAX_JWKS_BYTES:
            raise ValueError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
        keys = parse_jwks(data, self.url)
        if not keys:
            raise ValueError("the JWKS holds no usable signature key")
        self._snapshot = (keys, {})
        self.refreshes += 1

    def start(self) -> JwksKeys:
        """Read the set now (a file must be readable: ConfigError), then keep it fresh in the background."""
        try:
            self._refresh()
        except (
            Exception
        ) as exc:  # any failure of the read (a bad status line too) is a WARNING, as documented
            if self._file is not None:
                raise ConfigError(f"{self._key}={self.url!r}: cannot read the JWKS file: {exc}") from None
            self.refresh_failures += 1
            _log.warning(
                "JWKS %s could not be read at start (%s); every OAUTHBEARER login fails until it can, retrying",
                self.url,
                exc,
            )
        self._thread = threading.Thread(target=self._run, name=f"jwks-refresh {self.url}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=_FETCH_TIMEOUT_S + 1)

    def _run(self) -> None:
        backoff = self._backoff_s
        while not self._stop.is_set():
            wait = self._refresh_s if self._snapshot is not None else backoff
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._refresh()
                backoff = self._backoff_s
            except Exception as exc:  # the refresher must outlive any failure of one read
                self.refresh_failures += 1
                backoff = min(backoff * 2, self._backoff_max_s)
                _log.warning(
                    "JWKS %s could not be refreshed (%s); %s",
                    self.url,
                    exc,
                    "keeping the keys read before" if self._snapshot is not None else "no keys yet, retrying",
                )

    # -- resolving ------------------------------------------------------------------------------------------

    def _ask_refresh(self, kid: str | None) -> None:
        if kid is None or len(kid) > MAX_KID_CHARS:
            return
        now = self._clock()
        if self._last_on_demand is not None and now - self._last_on_demand < MIN_ON_DEMAND_REFRESH_S:
            return
        self._last_on_demand = now
        self.on_demand_refreshes += 1
        self._wake.set()

    def resolve(self, kid: str | None, algorithm: str) -> jwt.PyJWK:
        snapshot = self._snapshot
        if snapshot is None:
            self._ask_refresh(kid or "")
            raise InvalidToken(f"no JWKS could be read from {self.url} yet")
        keys, built = snapshot
        kty = _KTY.get(algorithm[:2])
        if kid is not None:
            jwk = keys.get(kid)
            if jwk is None:
                self._ask_refresh(kid)
                raise InvalidToken(
                    f"Could not validate the access token: no key with kid {kid[:100]!r} in the JWKS of {self.url}"
                )
        else:
            candidates = [k for k in keys.values() if k.get("kty") == kty]
            if len(candidates) != 1:
                raise InvalidToken(
                    f"Could not validate the access token: it names no kid and the JWKS holds {len(candidates)} "
                    f"{kty} keys"
                )
            jwk = candidates[0]
        if jwk.get("kty") != kty:
            raise InvalidToken(
                f"Could not validate the access token: key {kid!r} is an {jwk.get('kty')} key, {algorithm} needs {kty}"
            )
        if "alg" in jwk and jwk["alg"] != algorithm:
            raise InvalidToken(
                f"Could not validate the access token: key {kid!r} is for {jwk['alg']}, the token says {algorithm}"
            )
        cache_key = (kid or "", algorithm)
        cached = built.get(cache_key)
        if cached is None:
            import jwt  # PyJWT: loaded by the first key used, not at every broker's start

            try:
                cached = jwt.PyJWK(dict(jwk), algorithm=algorithm)
            except (jwt.PyJWTError, ValueError, TypeError) as exc:
                raise InvalidToken(
                    f"Could not validate the access token: key {kid!r} is unusable: {exc}"
                ) from None
            built[cache_key] = cached
        return cached
