"""A client's security settings: Kafka's ``security.protocol``, ``sasl.*`` and ``ssl.*``, one frozen dataclass.

    ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="alice" password="pw";',
        "ssl.truststore.location": "/etc/pylog/ca.pem"})

* ``security.protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL;
* ``sasl.mechanism``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (Kafka's default GSSAPI: refused);
* ``sasl.jaas.config``: the PlainLoginModule / ScramLoginModule entry with ``username`` and ``password``
  (:mod:`.jaas`), or the OAuthBearerLoginModule entry; the module must match the mechanism, as Kafka's login
  checks;
* OAUTHBEARER's ``sasl.oauthbearer.*`` / ``sasl.login.*`` settings: see :mod:`.oauthbearer_login`;
* ``ssl.*``: see :mod:`.tls` (JKS, PKCS12 and PEM stores).

Every problem is one :class:`~broker_runtime.errors.ConfigError` naming the setting (the ``name_prefix``, e.g.
``kafka.``, is put in front of names in messages). The object is small, immutable and picklable (Spark ships it
to executors); its TLS context is built on first use in each process and cached. The password is not shown
by ``repr``.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from broker_runtime.errors import ConfigError
from broker_runtime.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas
from broker_runtime.security.oauthbearer import LOGIN_MODULE as OAUTHBEARER_LOGIN_MODULE
from broker_runtime.security.oauthbearer_login import (
    OAUTH_CLIENT_KEYS,
    OAuthBearerClientMechanism,
    OAuthLogin,
    token_source,
)
from broker_runtime.security.sasl_client import ClientMechanism, sasl_mechanism
from broker_runtime.security.tls import SSL_KEYS, client_context

__all__ = ["CLIENT_SECURITY_KEYS", "SASL_CLIENT_MECHANISMS", "SECURITY_PROTOCOLS", "ClientSecurity"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: The settings this module interprets (without any prefix).
CLIENT_SECURITY_KEYS = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.jaas.config",
    *OAUTH_CLIENT_KEYS,
    *(k for k in SSL_KEYS if k != "ssl.client.auth"),  # a broker setting
)


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    #: The ``ssl.*`` settings given, sorted ``(key, value)`` pairs (hashable: the TLS context cache key).
    ssl_settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    #: OAUTHBEARER's token settings (None for the other mechanisms).
    oauth: OAuthLogin | None = None

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        return _context(self.ssl_settings) if self.uses_ssl else None

    def sasl_client(self) -> ClientMechanism | None:
        if not self.uses_sasl:
            return None
        if self.oauth is not None:
            return OAuthBearerClientMechanism(token_source(self.oauth))
        assert self.sasl_mechanism and self.sasl_username is not None and self.sasl_password is not None
        return sasl_mechanism(self.sasl_mechanism, self.sasl_username, self.sasl_password)

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, name_prefix: str = "") -> ClientSecurity:
        """Parse the settings of ``props`` (keys without prefix); ``name_prefix`` only decorates messages."""

        def name(key: str) -> str:
            return name_prefix + key

        protocol = str(props.get("security.protocol", "PLAINTEXT")).strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{name('security.protocol')}={props.get('security.protocol')!r}: expected one of "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        ssl_settings = tuple(sorted((k, str(v)) for k, v in props.items() if k.startswith("ssl.")))
        mechanism = username = password = None
        oauth = None
        if protocol.startswith("SASL_"):
            mechanism = str(props.get("sasl.mechanism", "GSSAPI")).strip().upper()
            if mechanism not in SASL_CLIENT_MECHANISMS:
                why = " (Kafka's default, Kerberos)" if "sasl.mechanism" not in props else ""
                raise ConfigError(
                    f"{name('sasl.mechanism')}={mechanism}{why} is not supported; pylog speaks "
                    f"{', '.join(SASL_CLIENT_MECHANISMS)}"
                )
            jaas_text = props.get("sasl.jaas.config")
            expected = {"PLAIN": PLAIN_LOGIN_MODULE, "OAUTHBEARER": OAUTHBEARER_LOGIN_MODULE}.get(
                mechanism, SCRAM_LOGIN_MODULE
            )
            if not jaas_text:
                example = ";" if mechanism == "OAUTHBEARER" else ' username="alice" password="...";'
                raise ConfigError(
                    f"{name('sasl.jaas.config')} is required with {name('security.protocol')}={protocol}, e.g. "
                    f"'{expected} required{example}'"
                )
            entry = parse_jaas(name("sasl.jaas.config"), str(jaas_text))
            if entry.login_module != expected:
                raise ConfigError(
                    f"{name('sasl.jaas.config')}: login module {entry.login_module} does not match "
                    f"{name('sasl.mechanism')}={mechanism}; use {expected}"
                )
            if mechanism == "OAUTHBEARER":
                oauth = OAuthLogin.from_properties(props, entry.options, name_prefix=name_prefix)
            else:
                username, password = entry.options.get("username"), entry.options.get("password")
                if not username or password is None:
                    raise ConfigError(f'{name("sasl.jaas.config")}: needs username="..." and password="..."')
        security = cls(protocol, mechanism, username, password, ssl_settings, oauth)
        if security.uses_ssl:
            try:
                security.ssl_context()  # every file and PEM problem now, on the caller's side
            except ConfigError as exc:
                raise ConfigError(f"{name_prefix}{exc}") from None
        return security


@functools.lru_cache(maxsize=16)
def _context(settings: tuple[tuple[str, str], ...]) -> ssl.SSLContext:
    return client_context(dict(settings))
