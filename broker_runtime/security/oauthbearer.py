"""SASL/OAUTHBEARER on the broker (RFC 7628, Kafka's KIP-255 and KIP-768): the client's message, the two token
validators and the error answer, without the I/O.

Client first message (Kafka's ``OAuthBearerClientInitialResponse``), US-ASCII with ``^A`` (0x01) separators::

    n,[a=<authzid>],^Aauth=Bearer <token>[^A<key>=<value>]...^A^A

``authzid`` is a SASL name (``=2C``/``=3D`` escapes), extension keys are letters, values printable ASCII.
Extensions are accepted and unused, as Kafka's validator callback handler accepts every extension. A token is
at most :data:`MAX_TOKEN_CHARS` characters of ``[-_.a-zA-Z0-9]`` (a compact JWS).

Validators (``validate(token) -> BearerToken`` or :class:`InvalidToken`):

* :class:`JwtValidator` -- Kafka's ``BrokerJwtValidator`` (``OAuthBearerValidatorCallbackHandler``): a signed
  JWS whose ``alg`` is in :data:`ALLOWED_ALGORITHMS` (asymmetric only: never ``none``, never an HMAC whose
  "secret" would be a public key), verified with the key of its ``kid`` from the JWKS
  (:class:`~broker_runtime.security.jwks.JwksKeys`; without ``kid``, the JWKS' only key of the algorithm's type),
  the key's type fitting the algorithm and its own ``alg``, if any, equal to the header's; ``exp`` and ``iat``
  required, ``exp``/``nbf``/``iat`` checked with ``sasl.oauthbearer.clock.skew.seconds``; ``aud`` must hold one
  of ``sasl.oauthbearer.expected.audience`` (a token with an ``aud`` claim is refused when none is expected, as
  jose4j does for Kafka); ``iss`` must equal ``sasl.oauthbearer.expected.issuer`` when set. The verification is
  PyJWT's (with ``cryptography``).
* :class:`UnsecuredValidator` -- Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``, for development only:
  an unsigned JWS (``alg`` ``none``, empty signature) whose claims are checked but whose origin is not; its
  JAAS options are Kafka's (``unsecuredValidatorPrincipalClaimName``, ``unsecuredValidatorScopeClaimName``,
  ``unsecuredValidatorRequiredScope``, ``unsecuredValidatorAllowableClockSkewMs``).

Both give the principal (``User:<claim>``, the configured principal claim, trimmed), the scopes and the expiry
(wall-clock ms) that bounds the SASL session (Kafka's ``CREDENTIAL.LIFETIME.MS``). A refused token is answered
as Kafka answers it: the server's challenge is the JSON ``{"status":"invalid_token"}`` (``insufficient_scope``
with a ``scope`` when a required scope is missing), the client answers ``^A``, and the authentication then fails
with that JSON as its message; why the token was refused is logged on the broker only.

Cost for an unauthenticated client: the message is matched by one regular expression on at most
``sasl.server.max.receive.size`` bytes; a token longer than :data:`MAX_TOKEN_CHARS` is refused before it is
decoded; a JWS costs a base64 decode, a JSON parse of its header and one signature check before its claims are
parsed; an unknown ``kid`` never waits for the JWKS endpoint (see :mod:`.jwks` for how often it may ask for a
refresh). Validators are immutable after construction and thread-safe; nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker_runtime.errors import ConfigError

if TYPE_CHECKING:
    import jwt

__all__ = [
    "ALLOWED_ALGORITHMS",
    "LOGIN_MODULE",
    "MAX_TOKEN_CHARS",
    "SECURED_VALIDATOR_CLASS",
    "UNSECURED_VALIDATOR_CLASS",
    "BearerToken",
    "InvalidMessage",
    "InvalidToken",
    "JwtValidator",
    "KeyResolver",
    "TokenValidator",
    "UnsecuredValidator",
    "client_first_message",
    "parse_client_first",
    "unsecured_validator_from_jaas",
]

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
#: Kafka's broker-side callback handlers, as ``sasl.server.callback.handler.class`` names them.
SECURED_VALIDATOR_CLASS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
UNSECURED_VALIDATOR_CLASS = "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"
#: Signature algorithms a signed token may use: asymmetric ones only.
ALLOWED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
#: The longest token looked at (Kafka bounds it only by ``sasl.server.max.receive.size``): tokens of identity
#: providers are a few KiB; this keeps an unauthenticated client's decoding work small.
MAX_TOKEN_CHARS = 65536

_SEP = "\x01"
_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>(?:[\x02-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+))?,\x01"
    r"(?P<pairs>(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01"
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")


class InvalidMessage(Exception):
    """The client's message is not an OAUTHBEARER client first message (the login fails with this text)."""


class InvalidToken(Exception):
    """A token refused: ``reason`` is logged on the broker; the client sees only :meth:`error_json`."""

    def __init__(self, reason: str, *, status: str = "invalid_token", scope: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.scope = scope

    def error_json(self) -> str:
        """Kafka's ``OAuthBearerSaslServer.jsonErrorResponse`` text (its exact spacing)."""
        text = f'{{"status":"{self.status}"'
        if self.scope is not None:
            text += f', "scope":"{self.scope}"'
        return text + "}"


@dataclass(frozen=True)
class BearerToken:
    """A validated token: its principal claim's value, its scopes, its expiry and issue time (wall-clock ms)."""

    principal: str
    scopes: frozenset[str]
    expires_ms: int
    issued_ms: int | None


class TokenValidator(Protocol):
    def validate(self, token: str) -> BearerToken: ...


class KeyResolver(Protocol):
    """The verification key of a signed token (:class:`~broker_runtime.security.jwks.JwksKeys`)."""

    def resolve(self, kid: str | None, algorithm: str) -> jwt.PyJWK: ...


def parse_client_first(message: bytes) -> tuple[str, str]:
    """``(authzid, token)`` of a client first message; :class:`InvalidMessage` with Kafka's texts otherwise."""
    try:
        text = bytes(message).decode("ascii")
    except UnicodeDecodeError:
        raise InvalidMessage("Invalid OAUTHBEARER client first message") from None
    match = _CLIENT_FIRST.fullmatch(text)
    if match is None:
        raise InvalidMessage("Invalid OAUTHBEARER client first message")
    pairs = dict(p.split("=", 1) for p in match["pairs"].split(_SEP) if p)
    auth = pairs.get("auth")
    if auth is None:
        raise InvalidMessage("Invalid OAUTHBEARER client first message: 'auth' not specified")
    auth_match = _AUTH.fullmatch(auth)
    if auth_match is None:
        raise InvalidMessage("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if auth_match["scheme"].lower() != "bearer":
        raise InvalidMessage(f"Invalid scheme in OAUTHBEARER client first message: {auth_match['scheme']}")
    authzid = (match["authzid"] or "").replace("=2C", ",").replace("=3D", "=")
    return authzid, auth_match["token"]


def client_first_message(token: str, authzid: str = "") -> bytes:
    """The client first message carrying ``token`` (Kafka's ``OAuthBearerClientInitialResponse.toBytes``)."""
    head = f"a={authzid.replace('=', '=3D').replace(',', '=2C')}" if authzid else ""
    return f"n,{head},{_SEP}auth=Bearer {token}{_SEP}{_SEP}".encode("ascii")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _check_size(token: str) -> None:
    if len(token) > MAX_TOKEN_CHARS:
        raise InvalidToken(f"the token has {len(token)} characters, above the {MAX_TOKEN_CHARS} looked at")


def _claim_value(name: str, value: Any) -> str:
    """Kafka's ``OAuthBearerUtils.validateClaimValue``: a non-blank string, trimmed."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidToken(
            f"The value of the OAuth claim {name} must be non-null, non-empty, and non-whitespace"
        )
    return value.strip()


def _scopes(name: str, raw: Any, *, split: bool) -> frozenset[str]:
    """Kafka's scope rules: a string (split on spaces by the unsecured validator, one scope for the secured one)
    or a list of strings, none blank, no duplicates; missing: none."""
    if raw is None:
        return frozenset()
    if isinstance(raw, str):
        values: list[Any] = raw.split() if split else [raw]
    elif isinstance(raw, list):
        values = raw
    else:
        values = []
    out: set[str] = set()
    for value in values:
        scope = _claim_value(name, value)
        if scope in out:
            raise InvalidToken(f"{name} value must not contain duplicates - {scope} already present")
        out.add(scope)
    return frozenset(out)


class JwtValidator:
    """A signed JWT checked against the JWKS keys and the expected claims (see the module docstring)."""

    def __init__(
        self,
        keys: KeyResolver,
        *,
        audiences: Iterable[str] = (),
        issuer: str | None = None,
        clock_skew_s: int = 30,
        sub_claim: str = "sub",
        scope_claim: str = "scope",
        now_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self._keys = keys
        self._audiences = tuple(dict.fromkeys(a for a in audiences if a))
        self._issuer = issuer or None
        self._skew_s = clock_skew_s
        self._sub_claim = sub_claim
        self._scope_claim = scope_claim
        self._now_ms = now_ms

    def validate(self, token: str) -> BearerToken:
        import jwt  # PyJWT (and cryptography): loaded by the first signed token, not by every broker's start

        _check_size(token)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"Could not validate the access token: malformed JWS: {exc}") from None
        algorithm = header.get("alg")
        if algorithm not in ALLOWED_ALGORITHMS:
            raise InvalidToken(
                f"Could not validate the access token: the JWS algorithm {str(algorithm)[:20]!r} is not allowed "
                f"(allowed: {', '.join(sorted(ALLOWED_ALGORITHMS))})"
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("Could not validate the access token: the 'kid' header is not a string")
        key = self._keys.resolve(kid, algorithm)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self._audiences or None,
                issuer=self._issuer,
                # The times are checked below, against this validator's clock.
                options={
                    "require": ["exp", "iat"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except (jwt.PyJWTError, ValueError, TypeError, RecursionError) as exc:
            raise InvalidToken(f"Could not validate the access token: {exc}") from None
        now_ms, skew_ms = self._now_ms(), self._skew_s * 1000
        expires_ms = _seconds_ms("exp", claims["exp"])
        issued_ms = _seconds_ms("iat", claims["iat"])
        if expires_ms < 0 or issued_ms < 0:
            raise InvalidToken("Could not validate the access token: exp and iat must be non-negative")
        if now_ms - skew_ms >= expires_ms:
            raise InvalidToken(
                f"Could not validate the access token: the JWT is no longer valid: now ({now_ms} ms) is on or after "
                f"its expiration time (exp {expires_ms} ms), allowing {self._skew_s} s of clock skew"
            )
        if "nbf" in claims and now_ms + skew_ms < _seconds_ms("nbf", claims["nbf"]):
            raise InvalidToken(
                f"Could not validate the access token: the JWT is not yet valid: now ({now_ms} ms) is before its "
                f"not-before time (nbf), allowing {self._skew_s} s of clock skew"
            )
        subject = _claim_value(self._sub_claim, claims.get(self._sub_claim))
        scopes = _scopes(self._scope_claim, claims.get(self._scope_claim), split=False)
        return BearerToken(subject, scopes, expires_ms, issued_ms)


def _b64_json(part: str, what: str) -> Any:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        return json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):
        raise InvalidToken(f"the unsecured JWS {what} is not base64url-encoded JSON") from None


def _seconds_ms(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or abs(value) > 1e13:
        raise InvalidToken(f"the {name} claim must be a number of seconds since the epoch")
    return int(value * 1000)


class UnsecuredValidator:
    """Kafka's unsecured validator (see the module docstring): development only, never proves who sent it."""

    def __init__(
        self,
        *,
        principal_claim: str = "sub",
        scope_claim: str = "scope",
        required_scope: Iterable[str] = (),
        clock_skew_ms: int = 0,
        now_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self._principal_claim = principal_claim
        self._scope_claim = scope_claim
        self._required = tuple(required_scope)
        self._skew_ms = clock_skew_ms
        self._now_ms = now_ms

    def validate(self, token: str) -> BearerToken:
        _check_size(token)
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("an unsecured JWS has three parts: header.payload.(empty signature)")
        if parts[2]:
            raise InvalidToken("an unsecured JWS must have an empty signature")
        header = _b64_json(parts[0], "header")
        if not isinstance(header, dict) or header.get("alg") != "none":
            raise InvalidToken('the unsecured validator takes only unsigned tokens (header "alg":"none")')
        claims = _b64_json(parts[1], "payload")
        if not isinstance(claims, dict):
            raise InvalidToken("the unsecured JWS payload is not a JSON object")
        now = self._now_ms()
        principal = _claim_value(self._principal_claim, claims.get(self._principal_claim))
        if "exp" not in claims:
            raise InvalidToken("Required claim missing: exp")
        expires_ms = _seconds_ms("exp", claims["exp"])
        issued_ms = _seconds_ms("iat", claims["iat"]) if "iat" in claims else None
        if issued_ms is not None and issued_ms > now + self._skew_ms:
            raise InvalidToken(f"The indicated time (iat {issued_ms} ms) is in the future (now {now} ms)")
        if now - self._skew_ms >= expires_ms:
            raise InvalidToken(f"The indicated time (exp {expires_ms} ms) is in the past (now {now} ms)")
        if issued_ms is not None and expires_ms <= issued_ms:
            raise InvalidToken("The token's expiration time is not after its issued-at time")
        scopes = _scopes(self._scope_claim, claims.get(self._scope_claim), split=True)
        for scope in self._required:
            if scope not in scopes:
                raise InvalidToken(
                    f"The provided scope ({' '.join(sorted(scopes))}) was missing a required scope ({scope})",
                    status="insufficient_scope",
                    scope=" ".join(self._required),
                )
        return BearerToken(principal, scopes, expires_ms, issued_ms)


_UNSECURED_OPTIONS = {
    "unsecuredValidatorPrincipalClaimName",
    "unsecuredValidatorScopeClaimName",
    "unsecuredValidatorRequiredScope",
    "unsecuredValidatorAllowableClockSkewMs",
}


def unsecured_validator_from_jaas(key: str, options: Mapping[str, str]) -> UnsecuredValidator:
    """The unsecured validator configured by the JAAS options of ``key`` (Kafka's option names)."""
    unknown = sorted(o for o in options if o.startswith("unsecuredValidator") and o not in _UNSECURED_OPTIONS)
    if unknown:
        raise ConfigError(
            f"{key}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(_UNSECURED_OPTIONS))}"
        )
    skew_text = options.get("unsecuredValidatorAllowableClockSkewMs", "0").strip() or "0"
    try:
        skew = int(skew_text)
    except ValueError:
        skew = -1
    if skew < 0:
        raise ConfigError(
            f"{key}: unsecuredValidatorAllowableClockSkewMs={skew_text!r} is not a non-negative integer"
        )
    return UnsecuredValidator(
        principal_claim=options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub",
        scope_claim=options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope",
        required_scope=options.get("unsecuredValidatorRequiredScope", "").split(),
        clock_skew_ms=skew,
    )
