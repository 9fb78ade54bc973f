"""Which config values are secrets: the one rule DescribeConfigs, the tools and every log line follow.

A config is **sensitive** (answered with a null value and ``IsSensitive=true``, logged as ``[hidden]``) when

* its base name is one of Kafka's ``ConfigDef.Type.PASSWORD`` configs (:data:`PASSWORD_CONFIGS`: the SSL key
  and store passwords, the inline PEM key, chain and trusted certificates, ``sasl.jaas.config``, the OAuth client
  secret and assertion key passphrase, the password encoder secrets, the delegation token secret); the base name
  strips Kafka's per-listener prefix ``listener.name.<listener>.`` and, for the per-mechanism configs
  (:data:`LISTENER_MECHANISM_CONFIGS`), the ``<mechanism>.`` after it, as Kafka's
  ``DynamicBrokerConfig.brokerConfigSynonyms`` does: ``listener.name.sasl_ssl.plain.sasl.jaas.config`` is a
  ``sasl.jaas.config``;
* or its name is not one the caller knows (``known``): Kafka's ``KafkaConfig.maybeSensitive`` treats a config
  whose type it cannot determine as sensitive "to be safe", and so does pylog (fail closed: a typo or a
  setting pylog does not interpret may well hold a secret);
* or its value holds a JAAS login module entry or a PEM private key, whatever the name (a secret in the wrong
  place is still a secret).

Kafka answers DescribeConfigs with ``Value=null``, ``IsSensitive=true`` and null synonym values for such configs
(``ConfigHelper.createBrokerConfigEntry`` / ``createTopicConfigEntry``) and logs them as ``[hidden]``
(``Password.HIDDEN``, ``KafkaConfig.loggableValue``). Pure functions over immutable data; thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping

__all__ = [
    "HIDDEN",
    "LISTENER_MECHANISM_CONFIGS",
    "PASSWORD_CONFIGS",
    "base_config_name",
    "is_password_config",
    "is_sensitive",
    "loggable",
    "looks_secret",
    "redacted",
]

#: What a log line shows instead of a sensitive value (Kafka's ``Password.HIDDEN``).
HIDDEN = "[hidden]"

#: Kafka's ``ConfigDef.Type.PASSWORD`` broker and client configs (SslConfigs, SaslConfigs, KafkaConfig's
#: PasswordEncoderConfigs and DelegationTokenManagerConfigs).
PASSWORD_CONFIGS: frozenset[str] = frozenset(
    {
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.certificates",
        "sasl.jaas.config",
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "password.encoder.secret",
        "password.encoder.old.secret",
        "delegation.token.secret.key",
        "delegation.token.master.key",
    }
)

#: Configs Kafka sets per listener *and* mechanism: ``listener.name.<l>.<mechanism>.<config>``.
LISTENER_MECHANISM_CONFIGS: tuple[str, ...] = (
    "sasl.jaas.config",
    "sasl.login.callback.handler.class",
    "sasl.login.class",
    "sasl.server.callback.handler.class",
    "connections.max.reauth.ms",
)

_LISTENER_CONFIG = re.compile(r"listener\.name\.[^.]*\.(.*)", re.DOTALL)
#: A JAAS entry (``<module class> required|requisite|sufficient|optional``) or a PEM private key block.
_SECRET_VALUE = re.compile(
    r"LoginModule\s+(?:required|requisite|sufficient|optional)\b|-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----",
    re.IGNORECASE,
)


def base_config_name(name: str) -> str:
    """``name`` without Kafka's ``listener.name.<listener>.`` prefix and, for a per-mechanism config, without the
    ``<mechanism>.`` after it; other names unchanged."""
    match = _LISTENER_CONFIG.fullmatch(name)
    if match is None:
        return name
    base = match.group(1)
    for config in LISTENER_MECHANISM_CONFIGS:
        if base.endswith(config):
            return config
    return base


def is_password_config(name: str) -> bool:
    """True when ``name`` (or its base name) is one of Kafka's PASSWORD-type configs."""
    return base_config_name(name) in PASSWORD_CONFIGS


def looks_secret(value: str | None) -> bool:
    """True when ``value`` holds a JAAS login module entry or a PEM private key."""
    return value is not None and _SECRET_VALUE.search(value) is not None


def is_sensitive(name: str, value: str | None = None, *, known: Container[str] | None = None) -> bool:
    """The rule of this module: a PASSWORD-type config, a name not in ``known`` (when given; the base name or
    the full name may be known), or a value that holds a JAAS entry or a private key."""
    base = base_config_name(name)
    if base in PASSWORD_CONFIGS:
        return True
    if known is not None and base not in known and name not in known:
        return True
    return looks_secret(value)


def loggable(name: str, value: str | None, *, known: Container[str] | None = None) -> str | None:
    """``value``, or :data:`HIDDEN` when the config is sensitive (Kafka's ``KafkaConfig.loggableValue``)."""
    return HIDDEN if is_sensitive(name, value, known=known) else value


def redacted(props: Mapping[str, str], *, known: Container[str] | None = None) -> dict[str, str | None]:
    """A copy of ``props`` safe to log: every sensitive value replaced by :data:`HIDDEN`."""
    return {k: loggable(k, v, known=known) for k, v in props.items()}
