"""SASL/OAUTHBEARER on a broker listener: Kafka's ``sasl.oauthbearer.*`` broker settings, declared once
(:data:`OAUTHBEARER_SETTINGS`, part of the listener settings), and the token validator they make.

Lookup of a setting on listener ``<l>`` (Kafka's): ``listener.name.<l>.oauthbearer.<key>``, else
``listener.name.<l>.<key>``, else ``<key>``.

Which validator (``sasl.server.callback.handler.class`` of the listener and mechanism):

* unset or Kafka's ``OAuthBearerValidatorCallbackHandler``: signed JWTs checked against
  ``sasl.oauthbearer.jwks.endpoint.url``, which is then required -- Kafka's default without a handler is the
  unsecured validator, which accepts any unsigned token naming any user; pylog never falls back to it;
* Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``: unsigned tokens, for development, with one WARNING
  at start; refused on a listener bound to a non-loopback address unless
  ``pylog.sasl.oauthbearer.unsecured.allow.non.loopback=true`` (then a second WARNING says so);
* any other class: refused (pylog runs no Java callback handlers).

The listener's OAUTHBEARER JAAS entry is optional; when given it must be Kafka's ``OAuthBearerLoginModule``; its
``unsecuredValidator*`` options configure the unsecured validator, its ``ssl.*`` options the trust used to fetch
an https JWKS (as Kafka's ``OAuthBearerJaasConfig``). The broker itself never logs in with OAUTHBEARER
(``sasl.mechanism.inter.broker.protocol=OAUTHBEARER`` is refused).

Pure functions except :func:`oauthbearer_validator` with ``start=True``, which reads the JWKS and starts its
refresher thread (the caller closes it).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from typing import Any

from broker_runtime.configdef import ConfigKey, ConfigType, boolean, define, integer, optional
from broker_runtime.errors import ConfigError
from broker_runtime.security.jaas import parse_jaas
from broker_runtime.security.jwks import JwksKeys
from broker_runtime.security.oauthbearer import (
    LOGIN_MODULE,
    SECURED_VALIDATOR_CLASS,
    UNSECURED_VALIDATOR_CLASS,
    JwtValidator,
    TokenValidator,
    unsecured_validator_from_jaas,
)
from broker_runtime.security.tls import client_context

__all__ = ["OAUTHBEARER_SETTINGS", "oauthbearer_validator"]

_PREFIX = "listener.name."
_STRING, _LONG, _INT, _LIST = ConfigType.STRING, ConfigType.LONG, ConfigType.INT, ConfigType.LIST
_PER = "; per listener: `listener.name.<l>.oauthbearer.<key>`"
_SEE = " (see [SASL/OAUTHBEARER](#sasloauthbearer))"


def _key(name: str, type: ConfigType, default: str | None, doc: str, **kw: Any) -> ConfigKey:
    return define(name, type, default, doc + _PER, group="security", **kw)


JWKS_URL = _key(
    "sasl.oauthbearer.jwks.endpoint.url",
    _STRING,
    None,
    "OAUTHBEARER: the identity provider's JWKS, whose keys verify the tokens' signatures: `https://`, `http://` "
    "or `file:`; required for OAUTHBEARER unless the unsecured validator is chosen" + _SEE,
    parse=optional,
)
JWKS_REFRESH = _key(
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    _LONG,
    "3600000",
    "OAUTHBEARER: how often the JWKS is read again (a token naming an unknown `kid` asks for it sooner, at most "
    "once per 10 s)",
    parse=integer(1),
)
JWKS_BACKOFF = _key(
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
    _LONG,
    "100",
    "OAUTHBEARER: first wait before reading a JWKS that could not be read again, doubling each time",
    parse=integer(0),
)
JWKS_BACKOFF_MAX = _key(
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
    _LONG,
    "10000",
    "OAUTHBEARER: longest wait between JWKS read attempts",
    parse=integer(0),
)
AUDIENCE = _key(
    "sasl.oauthbearer.expected.audience",
    _LIST,
    None,
    "OAUTHBEARER: audiences a token's `aud` must name one of (comma-separated); unset: a token with an `aud` claim "
    "is refused (as Kafka's jose4j)",
    parse=optional,
)
ISSUER = _key(
    "sasl.oauthbearer.expected.issuer",
    _STRING,
    None,
    "OAUTHBEARER: the `iss` a token must have; unset: not checked",
    parse=optional,
)
CLOCK_SKEW = _key(
    "sasl.oauthbearer.clock.skew.seconds",
    _INT,
    "30",
    "OAUTHBEARER: seconds of clock difference allowed when checking `exp`, `nbf`",
    parse=integer(0),
)
SUB_CLAIM = _key(
    "sasl.oauthbearer.sub.claim.name",
    _STRING,
    "sub",
    "OAUTHBEARER: the claim whose value is the principal (`User:<value>`)",
)
SCOPE_CLAIM = _key(
    "sasl.oauthbearer.scope.claim.name",
    _STRING,
    "scope",
    "OAUTHBEARER: the claim holding the token's scopes (checked for blanks and duplicates, as Kafka)",
)
CALLBACK = _key(
    "sasl.server.callback.handler.class",
    ConfigType.CLASS,
    None,
    "OAUTHBEARER only (per listener and mechanism: `listener.name.<l>.oauthbearer.sasl.server.callback.handler."
    "class`): Kafka's `OAuthBearerValidatorCallbackHandler` (signed tokens, the default) or "
    "`...internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler` (unsigned tokens, development only)",
    parse=optional,
)
UNSECURED_NON_LOOPBACK = define(
    "pylog.sasl.oauthbearer.unsecured.allow.non.loopback",
    ConfigType.BOOLEAN,
    "false",
    "allow the unsecured OAUTHBEARER validator (anyone may log in as anyone) on a listener bound to a "
    "non-loopback address; per listener: `listener.name.<l>.pylog.sasl.oauthbearer.unsecured.allow.non.loopback`",
    group="security",
    parse=boolean,
)

OAUTHBEARER_SETTINGS: tuple[ConfigKey, ...] = (
    JWKS_URL,
    JWKS_REFRESH,
    JWKS_BACKOFF,
    JWKS_BACKOFF_MAX,
    AUDIENCE,
    ISSUER,
    CLOCK_SKEW,
    SUB_CLAIM,
    SCOPE_CLAIM,
    CALLBACK,
    UNSECURED_NON_LOOPBACK,
)

_log = logging.getLogger(__name__)


def _lookup(props: Mapping[str, str], listener: str, key: ConfigKey) -> tuple[str, str | None]:
    """``(the name found, its text)`` of ``key`` on ``listener`` (see the module docstring)."""
    for name in (
        f"{_PREFIX}{listener.lower()}.oauthbearer.{key.name}",
        f"{_PREFIX}{listener.lower()}.{key.name}",
    ):
        if name in props:
            return name, props[name]
    return key.name, props.get(key.name, key.default)


def _value(props: Mapping[str, str], listener: str, key: ConfigKey) -> Any:
    name, text = _lookup(props, listener, key)
    return None if text is None else key.parse(name, text)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def oauthbearer_validator(
    props: Mapping[str, str], listener: str, host: str, *, start: bool
) -> tuple[TokenValidator, JwksKeys | None]:
    """The validator of OAUTHBEARER on ``listener`` (bound to ``host``) and its JWKS (None for the unsecured
    one); ConfigError naming the key when the settings cannot work. ``start``: read the JWKS and start its
    refresher (else only check the settings)."""
    jaas_key = next(
        (
            k
            for k in (
                f"{_PREFIX}{listener.lower()}.oauthbearer.sasl.jaas.config",
                f"{_PREFIX}{listener.lower()}.sasl.jaas.config",
                "sasl.jaas.config",
            )
            if props.get(k, "").strip()
        ),
        None,
    )
    options: dict[str, str] = {}
    if jaas_key is not None:
        entry = parse_jaas(jaas_key, props[jaas_key])
        # The listener-wide entries may belong to another mechanism; the per-mechanism one must be Kafka's.
        if entry.login_module == LOGIN_MODULE:
            options = entry.options
        elif ".oauthbearer." in jaas_key:
            raise ConfigError(f"{jaas_key}: login module {entry.login_module} is not {LOGIN_MODULE}")
    handler_name, handler = _lookup(props, listener, CALLBACK)
    handler = (handler or "").strip()
    if handler == UNSECURED_VALIDATOR_CLASS:
        allow_name, _ = _lookup(props, listener, UNSECURED_NON_LOOPBACK)
        if not _loopback(host) and not _value(props, listener, UNSECURED_NON_LOOPBACK):
            raise ConfigError(
                f"{handler_name}: the unsecured OAUTHBEARER validator lets anyone log in as anyone; listener "
                f"{listener} is bound to {host or 'every address'}, not loopback: use signed tokens "
                f"({JWKS_URL.name}) or set {allow_name}=true to accept that"
            )
        unsecured = unsecured_validator_from_jaas(jaas_key or "sasl.jaas.config", options)
        if start:
            _log.warning(
                "listener %s: SASL/OAUTHBEARER accepts UNSIGNED tokens (%s): anyone who can connect may log in "
                "as any user; for development only",
                listener,
                handler_name,
            )
            if not _loopback(host):
                _log.warning(
                    "listener %s is bound to %s, not loopback, and still accepts unsigned OAUTHBEARER tokens (%s)",
                    listener,
                    host or "every address",
                    UNSECURED_NON_LOOPBACK.name,
                )
        return unsecured, None
    if handler not in ("", SECURED_VALIDATOR_CLASS):
        raise ConfigError(
            f"{handler_name}={handler!r}: pylog runs no Java callback handlers; use {SECURED_VALIDATOR_CLASS} "
            f"(signed tokens, {JWKS_URL.name}) or {UNSECURED_VALIDATOR_CLASS} (development)"
        )
    url_name, _ = _lookup(props, listener, JWKS_URL)
    url = _value(props, listener, JWKS_URL)
    if url is None:
        raise ConfigError(
            f"listener {listener} enables SASL/OAUTHBEARER: set {url_name} (or "
            f"listener.name.{listener.lower()}.oauthbearer.{JWKS_URL.name}) to the identity provider's JWKS URL; "
            f"for development only, {CALLBACK.name}={UNSECURED_VALIDATOR_CLASS} accepts unsigned tokens"
        )
    ssl_options = {k: v for k, v in options.items() if k.startswith("ssl.")}
    context = client_context(ssl_options) if url.lower().startswith("https:") else None
    audiences_text = _value(props, listener, AUDIENCE) or ""
    keys = JwksKeys(
        url,
        refresh_ms=_value(props, listener, JWKS_REFRESH),
        retry_backoff_ms=_value(props, listener, JWKS_BACKOFF),
        retry_backoff_max_ms=_value(props, listener, JWKS_BACKOFF_MAX),
        ssl_context=context,
        key=url_name,
    )
    validator = JwtValidator(
        keys,
        audiences=[a.strip() for a in audiences_text.split(",") if a.strip()],
        issuer=_value(props, listener, ISSUER),
        clock_skew_s=_value(props, listener, CLOCK_SKEW),
        sub_claim=_value(props, listener, SUB_CLAIM).strip() or "sub",
        scope_claim=_value(props, listener, SCOPE_CLAIM).strip() or "scope",
    )
    if start:
        keys.start()
    return validator, keys
