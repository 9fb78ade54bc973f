"""Listener and security configuration: ``listeners`` and its protocol map, the inter-broker listener, and the
keys read per listener -- ``ssl.*``, ``sasl.*``, ``connections.max.reauth.ms`` -- or by the security modules
(the authorizer's), each declared once (:data:`LISTENER_SETTINGS`, part of the broker's
:data:`~broker_runtime.server.config.BROKER_CONFIGS`).

Formats: ``listeners`` is ``NAME://host:port,...`` (names unique, an IPv6 host in brackets, port 0..65535, 0 =
any free port); ``listener.security.protocol.map`` is ``NAME:PROTOCOL,...``; a per-listener setting is
``listener.name.<listener, lower case>.<key>``, a per-mechanism one ``listener.name.<l>.<mechanism>.<key>``.
:func:`check_security` loads every TLS key store and JAAS entry a listener needs, so that a bad one fails the
start with one line naming the key (never its value: it may be a secret). Also the two other endpoint-shaped
values: ``max.connections.per.ip.overrides`` (``host:limit,...``) and ``pylog.metrics.listener``
(``HOST:PORT`` or ``PORT``).

Pure functions over immutable data; thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker_runtime.configdef import ConfigKey, ConfigType, define, integer, number
from broker_runtime.errors import ConfigError
from broker_runtime.security.client_security import SECURITY_PROTOCOLS
from broker_runtime.security.jaas import parse_jaas
from broker_runtime.security.sasl_server import SASL_MECHANISMS
from broker_runtime.security.tls import server_context
from broker_runtime.server.oauthbearer_listener import OAUTHBEARER_SETTINGS, oauthbearer_validator

__all__ = [
    "DEFAULT_PROTOCOLS",
    "LISTENER_PREFIX",
    "LISTENERS_AT_START",
    "LISTENER_SETTINGS",
    "NEW_LISTENER_ONLY",
    "REAUTH",
    "SASL_DEFAULT",
    "Listener",
    "check_security",
    "inter_broker_listener",
    "metrics_listener",
    "parse_listener",
    "parse_listeners",
    "per_ip_overrides",
    "protocol_map",
    "reauth_setting",
]

#: Per-listener settings: ``listener.name.<listener, lower case>.<key>`` overrides ``<key>`` on that listener.
LISTENER_PREFIX = "listener.name."

_STRING, _LIST, _LONG = ConfigType.STRING, ConfigType.LIST, ConfigType.LONG
_DOUBLE, _SHORT = ConfigType.DOUBLE, ConfigType.SHORT
_BOOLEAN, _PASSWORD = ConfigType.BOOLEAN, ConfigType.PASSWORD
_SEE_SECURITY = "(see [Security](#security))"
#: Why a listener's other TLS and SASL keys cannot change at runtime (AlterConfigs says it).
NEW_LISTENER_ONLY = (
    "Kafka changes it at runtime only for a listener added at runtime (an existing listener's is refused), and "
    "pylog binds its listeners at start"
)
LISTENERS_AT_START = "pylog binds its listeners at start: adding, removing or remapping one needs a restart"


def _setting(name: str, type: ConfigType, default: str | None, group: str, doc: str, **kw: Any) -> ConfigKey:
    return define(name, type, default, doc, group=group, **kw)


_LISTENER = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>-?\d+)$")


@dataclass(frozen=True)
class Listener:
    """One ``NAME://host:port`` endpoint and its security protocol. ``port`` 0 means: bind any free port."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def protocol_map(key: str, text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip():
            raise ConfigError(f"{key}={text!r}: expected NAME:PROTOCOL,... e.g. CLIENT:SASL_SSL,BROKER:SSL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{key}={text!r}: {protocol!r} is not a security protocol ({', '.join(SECURITY_PROTOCOLS)})"
            )
        out[name.strip().upper()] = protocol
    return out


DEFAULT_PROTOCOLS = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"


def parse_listeners(key: str, text: str, protocols: Mapping[str, str] | None = None) -> tuple[Listener, ...]:
    """Parse a Kafka ``listeners`` / ``advertised.listeners`` value: ``NAME://host:port`` entries, names unique,
    each name's security protocol from ``protocols`` (``listener.security.protocol.map``)."""
    if protocols is None:
        protocols = protocol_map("listener.security.protocol.map", DEFAULT_PROTOCOLS)
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise ConfigError(f"{key}={text!r}: expected NAME://host:port, e.g. PLAINTEXT://127.0.0.1:9092")
    out: list[Listener] = []
    for entry in entries:
        match = _LISTENER.match(entry)
        if match is None:
            raise ConfigError(f"{key}={text!r}: expected NAME://host:port, e.g. PLAINTEXT://127.0.0.1:9092")
        name = match["name"].upper()
        if name not in protocols:
            raise ConfigError(
                f"{key}={text!r}: listener {name} has no security protocol; map it in "
                f"listener.security.protocol.map (e.g. {name}:SASL_SSL)"
            )
        if any(listener.name == name for listener in out):
            raise ConfigError(f"{key}={text!r}: listener name {name} appears twice")
        port = int(match["port"])
        if not 0 <= port <= 65535:
            raise ConfigError(f"{key}={text!r}: port {port} is outside 0..65535")
        out.append(Listener(name, match["host"].strip("[]"), port, protocols[name]))
    return tuple(out)


def parse_listener(key: str, text: str) -> Listener:
    """The first listener of a ``listeners`` value (default protocol map)."""
    return parse_listeners(key, text)[0]


def per_ip_overrides(key: str, text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:limit`` pairs, comma-separated (Kafka's syntax, e.g.
    ``127.0.0.1:200,broker-host:50``; an IPv6 address is everything before the last ``:``)."""
    text = text.strip()
    out: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, limit = entry.rpartition(":")
        host = host.strip().strip("[]")
        try:
            value = int(limit)
        except ValueError:
            value = -1
        if not sep or not host or value < 0:
            raise ConfigError(f"{key}={text!r}: expected host:limit pairs, e.g. 127.0.0.1:200, got {entry!r}")
        out[host] = value
    return out


def metrics_listener(key: str, text: str) -> tuple[str, int] | None:
    """``pylog.metrics.listener``: ``HOST:PORT``, or ``PORT`` alone for loopback; empty = off; port 0 = any free."""
    text = text.strip()
    if not text:
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host = "127.0.0.1"
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key}={text!r}: expected HOST:PORT or PORT (0..65535), e.g. 127.0.0.1:9404")
    return host, port


SASL_DEFAULT = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
REAUTH = _setting(
    "connections.max.reauth.ms",
    _LONG,
    "0",
    "security",
    "a SASL session's lifetime (KIP-368): told in SaslAuthenticate v1+; a connection that has not "
    "re-authenticated by then is closed at its next request; 0: never; also per listener and mechanism "
    f"(`listener.name.<l>.<mechanism>.connections.max.reauth.ms`) {_SEE_SECURITY}",
    minimum=0,
    shown_default="0 (never)",
)


def _ssl(
    name: str, type: ConfigType, doc: str, default: str | None = None, shown: str | None = None
) -> ConfigKey:
    """A TLS key of a listener; the key and trust stores (Kafka's ``SslConfigs.RECONFIGURABLE_CONFIGS``) are
    dynamic per broker, per listener: AlterConfigs reloads them for new connections."""
    reloadable = name.startswith(("ssl.keystore.", "ssl.truststore.")) or name == "ssl.key.password"
    return _setting(
        name,
        type,
        default,
        "security",
        f"{doc}; per listener: `listener.name.<l>.{name}`",
        shown_default=shown,
        dynamic=reloadable,
        per_broker=reloadable,
        restart_reason="" if reloadable else NEW_LISTENER_ONLY,
    )


def _no_effect(name: str, type: ConfigType, default: str | None, why: str, **kw: Any) -> ConfigKey:
    """A SASL login key Kafka updates per broker at runtime that pylog accepts, stores and describes without
    acting on it (a value other than the default draws a warning naming it)."""
    return define(
        name,
        type,
        default,
        f"accepted, no effect: {why}",
        group="security",
        dynamic=True,
        per_broker=True,
        effect=False,
        **kw,
    )


_NO_KERBEROS = "pylog implements no GSSAPI (Kerberos)"
_NO_OAUTH = "the broker never logs in with OAUTHBEARER itself (no inter-broker OAUTHBEARER)"


#: Keys read through ``props`` (per listener, or by the security modules), not parsed into a field of their own.
LISTENER_SETTINGS: tuple[ConfigKey, ...] = (
    _setting(
        "security.inter.broker.protocol",
        _STRING,
        "PLAINTEXT",
        "listeners",
        "the inter-broker listener named by its security protocol (a listener of that name), when "
        "`inter.broker.listener.name` is not set; set only one of the two",
    ),
    _setting(
        "sasl.enabled.mechanisms",
        _LIST,
        SASL_DEFAULT,
        "security",
        "mechanisms of SASL listeners (per listener: `listener.name.<l>.sasl.enabled.mechanisms`); Kafka's "
        "default is GSSAPI, which pylog does not implement",
        restart_reason=NEW_LISTENER_ONLY,
    ),
    _setting(
        "sasl.jaas.config",
        _PASSWORD,
        None,
        "security",
        'JAAS entry; PLAIN\'s `user_<name>="<password>"` options are the PLAIN users; per listener and '
        "mechanism: `listener.name.<l>.<mechanism>.sasl.jaas.config`; sensitive (never answered or logged, see "
        "[Secrets](#secrets-in-configs))",
        restart_reason=NEW_LISTENER_ONLY,
    ),
    REAUTH,
    *OAUTHBEARER_SETTINGS,
    _ssl(
        "ssl.keystore.type",
        _STRING,
        "`JKS`, `PKCS12` or `PEM`; as in Java, JKS and PKCS12 each read a file of either format (JKS through the "
        "Java runtime's `keytool`); unset, a PEM file is read as PEM",
        "JKS",
    ),
    _ssl(
        "ssl.keystore.location",
        _STRING,
        "the listener's key store: a JKS or PKCS12 store (one private key and its chain), or a PEM file with the "
        "key and its chain",
    ),
    _ssl("ssl.keystore.key", _PASSWORD, "the listener's private key, inline PEM; sensitive"),
    _ssl(
        "ssl.keystore.certificate.chain", _PASSWORD, "the listener's certificate chain, inline PEM; sensitive"
    ),
    _ssl(
        "ssl.keystore.password",
        _PASSWORD,
        "the JKS or PKCS12 key store's password (required with one), and the key's when `ssl.key.password` is "
        "not set; sensitive",
    ),
    _ssl("ssl.key.password", _PASSWORD, "the password of the listener's private key; sensitive"),
    _ssl("ssl.truststore.type", _STRING, "`JKS`, `PKCS12` or `PEM`, as `ssl.keystore.type`", "JKS"),
    _ssl(
        "ssl.truststore.location",
        _STRING,
        "CA certificates (a JKS, PKCS12 or PEM store) that client certificates (and, inter-broker, other "
        "brokers) are checked against",
        shown="system CAs",
    ),
    _ssl(
        "ssl.truststore.certificates",
        _PASSWORD,
        "CA certificates, inline PEM; sensitive (Kafka's PASSWORD type)",
        shown="system CAs",
    ),
    _ssl(
        "ssl.truststore.password",
        _PASSWORD,
        "the trust store's password: optional (without it, as in Kafka, the store's integrity is not checked and "
        "a PKCS12 store with encrypted certificates cannot be read); a PEM trust store has none and is refused with one, as Kafka refuses it; sensitive",
    ),
    _ssl(
        "ssl.client.auth",
        _STRING,
        "`none`, `requested`, `required`: ask SSL clients for a certificate (its DN becomes the principal)",
        "none",
    ),
    _ssl(
        "ssl.endpoint.identification.algorithm",
        _STRING,
        "inter-broker connections: `https` checks that the other broker's certificate names its host; empty: no "
        "check",
        "https",
    ),
    _no_effect("sasl.kerberos.service.name", _STRING, None, _NO_KERBEROS),
    _no_effect("sasl.kerberos.kinit.cmd", _STRING, "/usr/bin/kinit", _NO_KERBEROS),
    _no_effect(
        "sasl.kerberos.ticket.renew.window.factor", _DOUBLE, "0.8", _NO_KERBEROS, parse=number(0.0, 1.0e308)
    ),
    _no_effect(
        "sasl.kerberos.ticket.renew.jitter", _DOUBLE, "0.05", _NO_KERBEROS, parse=number(0.0, 1.0e308)
    ),
    _no_effect("sasl.kerberos.min.time.before.relogin", _LONG, "60000", _NO_KERBEROS, parse=integer()),
    _no_effect("sasl.kerberos.principal.to.local.rules", _LIST, "DEFAULT", _NO_KERBEROS),
    _no_effect("sasl.login.refresh.window.factor", _DOUBLE, "0.8", _NO_OAUTH, parse=number(0.5, 1.0)),
    _no_effect("sasl.login.refresh.window.jitter", _DOUBLE, "0.05", _NO_OAUTH, parse=number(0.0, 0.25)),
    _no_effect("sasl.login.refresh.min.period.seconds", _SHORT, "60", _NO_OAUTH, parse=integer(0, 900)),
    _no_effect("sasl.login.refresh.buffer.seconds", _SHORT, "300", _NO_OAUTH, parse=integer(0, 3600)),
    _setting(
        "authorizer.class.name",
        _STRING,
        "",
        "security",
        "the ACL authorizer; empty: none, every request allowed; see [Authorization (ACLs)](#authorization-acls)",
    ),
    _setting(
        "super.users",
        _STRING,
        "",
        "security",
        "principals every ACL check allows, `User:a;User:b`",
    ),
    _setting(
        "allow.everyone.if.no.acl.found",
        _BOOLEAN,
        "false",
        "security",
        "with an authorizer: a resource no ACL matches is open to everyone",
    ),
)


def inter_broker_listener(props: Mapping[str, str], listeners: tuple[Listener, ...]) -> str:
    names = [x.name for x in listeners]
    given = props.get("inter.broker.listener.name", "").strip().upper()
    if given:
        if given not in names:
            raise ConfigError(
                f"inter.broker.listener.name={given}: not one of the listeners ({', '.join(names)})"
            )
        if "security.inter.broker.protocol" in props:
            raise ConfigError(
                "inter.broker.listener.name and security.inter.broker.protocol are both set; set only one (as Kafka)"
            )
        return given
    protocol = props.get("security.inter.broker.protocol", "").strip().upper()
    if protocol:
        for x in listeners:
            if x.name == protocol:
                return x.name
        raise ConfigError(
            f"security.inter.broker.protocol={protocol}: no listener is named {protocol}; "
            "set inter.broker.listener.name"
        )
    # Kafka's default (security.inter.broker.protocol=PLAINTEXT) is the listener named PLAINTEXT; without one
    # Kafka refuses to start, and so does pylog: guessing would hand the inter-broker role to a client listener.
    if "PLAINTEXT" in names:
        return "PLAINTEXT"
    raise ConfigError(
        f"inter.broker.listener.name is not set and no listener is named PLAINTEXT (listeners: {', '.join(names)}): "
        "set inter.broker.listener.name to the listener the brokers use among themselves"
    )


def check_security(
    props: Mapping[str, str], listeners: tuple[Listener, ...], inter_broker: str, inter_mechanism: str
) -> None:
    """Fail now on every listener whose TLS or SASL settings cannot work (files, PEM, mechanisms, users)."""
    for x in listeners:
        if x.security_protocol in ("SSL", "SASL_SSL"):
            server_context(props, x.name)
        if x.security_protocol.startswith("SASL_"):
            key = f"{LISTENER_PREFIX}{x.name.lower()}.sasl.enabled.mechanisms"
            text = props.get(key, props.get("sasl.enabled.mechanisms", SASL_DEFAULT))
            name = key if key in props else "sasl.enabled.mechanisms"
            mechanisms = [m.strip().upper() for m in text.split(",") if m.strip()]
            if not mechanisms:
                raise ConfigError(f"{name}={text!r}: listener {x.name} needs at least one SASL mechanism")
            for m in mechanisms:
                if m not in SASL_MECHANISMS:
                    raise ConfigError(
                        f"{name}={text!r}: {m} is not supported; pylog implements {', '.join(SASL_MECHANISMS)} "
                        "(no GSSAPI or delegation tokens)"
                    )
            for m in mechanisms:
                for jkey in (
                    f"{LISTENER_PREFIX}{x.name.lower()}.{m.lower()}.sasl.jaas.config",
                    f"{LISTENER_PREFIX}{x.name.lower()}.sasl.jaas.config",
                    "sasl.jaas.config",
                ):
                    if props.get(jkey, "").strip():
                        parse_jaas(jkey, props[jkey])
                        break
            for m in mechanisms:
                REAUTH.parse(*reauth_setting(props, x.name, m))
            if "OAUTHBEARER" in mechanisms:
                oauthbearer_validator(props, x.name, x.host, start=False)
            if x.name == inter_broker and inter_mechanism == "OAUTHBEARER":
                raise ConfigError(
                    "sasl.mechanism.inter.broker.protocol=OAUTHBEARER: the brokers log in to each other with PLAIN "
                    "or SCRAM; pylog's broker has no OAUTHBEARER login of its own"
                )
            if x.name == inter_broker and inter_mechanism not in mechanisms:
                raise ConfigError(
                    f"sasl.mechanism.inter.broker.protocol={inter_mechanism}: not enabled on the inter-broker "
                    f"listener {x.name} ({', '.join(mechanisms)})"
                )


def reauth_setting(props: Mapping[str, str], listener: str, mechanism: str) -> tuple[str, str]:
    """``(key, value)`` of the ``connections.max.reauth.ms`` that applies to ``mechanism`` on ``listener``."""
    for key in (
        f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.connections.max.reauth.ms",
        f"{LISTENER_PREFIX}{listener.lower()}.connections.max.reauth.ms",
        "connections.max.reauth.ms",
    ):
        if key in props:
            return key, props[key]
    return REAUTH.name, str(REAUTH.default)
