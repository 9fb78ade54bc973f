"""Dynamic configs: the broker keys AlterConfigs may change at runtime, the rules Kafka's ``DynamicBrokerConfig``
sets on them, and where each value of a topic or broker config comes from (DescribeConfigs' ``ConfigSource``).

Sources, highest precedence first (Kafka's ``DescribeConfigsResponse.ConfigSource``)::

    1 DYNAMIC_TOPIC_CONFIG          a topic's override (CreateTopics configs, AlterConfigs on the topic)
    2 DYNAMIC_BROKER_CONFIG         AlterConfigs on broker "<node id>"
    3 DYNAMIC_DEFAULT_BROKER_CONFIG AlterConfigs on broker "" (every broker)
    4 STATIC_BROKER_CONFIG          the broker's properties file and --override
    5 DEFAULT_CONFIG                the key's declared default

A value set at a higher layer hides its synonyms below it (Kafka's ``overrideProps``): a dynamic
``log.retention.hours`` wins over a static ``log.retention.ms`` (:func:`effective_props`).

Which broker keys are dynamic is their declaration's (:data:`~broker_runtime.server.config.BROKER_CONFIGS`:
``dynamic``, ``per_broker``, ``restart_reason``). AlterConfigs on a broker resource is refused, as Kafka refuses it
(:func:`refused_dynamic`; INVALID_REQUEST), for

* a key that is not dynamic (or unknown): "Cannot update these configs dynamically", with pylog's reason when
  Kafka would update it (``restart_reason``: listeners are bound at start, ...);
* a listener's key or trust store key without the ``listener.name.<l>.`` prefix ("only per-listener");
* on the cluster-wide default (broker ``""``), a per-broker key: the listener TLS stores and every other
  ``listener.name.`` key, the SASL login keys ("broker id must be specified");
* a ``listener.name.<l>.`` key of a listener this broker does not have, or one Kafka changes only for a new
  listener (``sasl.jaas.config``, ``sasl.enabled.mechanisms``, ``ssl.client.auth``: "existing listener").

Values are then checked (:func:`check_broker_configs`): each by its declaration, the log defaults they make,
Kafka's thread-count steps (half to double the current value) and, on this broker, every listener TLS context
they change is built (its files read) before anything is written.

The dynamic values live with the cluster metadata (a JSON file in the first log directory on a single node,
``cluster.json`` in a cluster; a cluster-wide entry reaches every node) and are applied by
:mod:`~broker_runtime.server.reconfigure`.

Event-loop thread only; the functions are pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from broker_runtime.errors import ConfigError
from broker_runtime.protocol.messages.describe_configs import ConfigSource
from broker_runtime.security.secrets import base_config_name
from broker_runtime.security.tls import server_context
from broker_runtime.server.config import BROKER_CONFIG_KEYS, BROKER_CONFIGS, LISTENER_PREFIX, THREAD_COUNTS
from broker_runtime.server.listener_config import LISTENERS_AT_START, NEW_LISTENER_ONLY, Listener
from broker_runtime.storage.config import TOPIC_CONFIG_SYNONYMS, LogConfig

__all__ = [
    "DEFAULT_BROKER_RESOURCE",
    "DYNAMIC_BROKER_CONFIGS",
    "LISTENER_SSL_CONFIGS",
    "SOURCE_DEFAULT",
    "SOURCE_DYNAMIC_BROKER",
    "SOURCE_DYNAMIC_DEFAULT_BROKER",
    "SOURCE_STATIC_BROKER",
    "SOURCE_TOPIC",
    "broker_config_synonyms",
    "broker_log_config",
    "broker_sources",
    "check_broker_configs",
    "effective_props",
    "listener_of",
    "listener_ssl_settings",
    "refused_dynamic",
    "topic_value_source",
]

SOURCE_TOPIC = ConfigSource.DYNAMIC_TOPIC_CONFIG
SOURCE_DYNAMIC_BROKER = ConfigSource.DYNAMIC_BROKER_CONFIG
SOURCE_DYNAMIC_DEFAULT_BROKER = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
SOURCE_STATIC_BROKER = ConfigSource.STATIC_BROKER_CONFIG
SOURCE_DEFAULT = ConfigSource.DEFAULT_CONFIG
#: The broker resource name of the cluster-wide dynamic defaults.
DEFAULT_BROKER_RESOURCE = ""

#: The broker keys AlterConfigs may change at runtime (declared ``dynamic``).
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(key.name for key in BROKER_CONFIGS if key.dynamic)
#: A listener's key and trust store keys (Kafka's ``SslConfigs.RECONFIGURABLE_CONFIGS``): dynamic only per
#: listener, per broker; a change reloads the listener's TLS context for its new connections.
LISTENER_SSL_CONFIGS: tuple[str, ...] = tuple(
    key.name for key in BROKER_CONFIGS if key.dynamic and key.per_broker and key.name.startswith("ssl.")
)
#: Thread counts Kafka resizes by at most a factor of two at a time (``DynamicThreadPool``, ``LogCleaner``).
_STEPPED = (*(key.name for key in THREAD_COUNTS), "num.recovery.threads.per.data.dir", "log.cleaner.threads")

_LISTENER = re.compile(re.escape(LISTENER_PREFIX) + r"([^.]*)\.")
#: Kafka's ``brokerConfigSynonyms``: broker keys that set one value, highest precedence first.
_SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def listener_of(name: str) -> str | None:
    """The listener (lower case) of a ``listener.name.<listener>.<key>`` name, else None."""
    match = _LISTENER.match(name)
    return None if match is None else match.group(1).lower()


def broker_config_synonyms(name: str, *, match_listener: bool = True) -> list[str]:
    """The broker keys that set the same value as ``name``, highest precedence first (Kafka's
    ``DynamicBrokerConfig.brokerConfigSynonyms``): ``log.retention.ms``/``.minutes``/``.hours``, ``log.roll.ms``/
    ``.hours`` (and the jitter), ``log.flush.interval.ms`` then ``log.flush.scheduler.interval.ms``, and a
    per-listener key then its base key (when ``match_listener``)."""
    for group in _SYNONYM_GROUPS:
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":
        return [name, "log.flush.scheduler.interval.ms"]
    if match_listener and listener_of(name) is not None:
        return [name, base_config_name(name)]
    return [name]


def effective_props(
    static: Mapping[str, str], dynamic: Mapping[str, Mapping[str, str]], node_id: int
) -> dict[str, str]:
    """The properties ``node_id`` runs with: its static ones, overlaid by the cluster-wide dynamic defaults, then
    by its own dynamic configs; a key set at a higher layer removes its synonyms from below (Kafka's
    ``overrideProps``), so ``log.retention.hours`` set dynamically wins over a static ``log.retention.ms``."""
    props = dict(static)
    for layer in (dynamic.get(DEFAULT_BROKER_RESOURCE, {}), dynamic.get(str(node_id), {})):
        for name, value in layer.items():
            for synonym in broker_config_synonyms(name, match_listener=False):
                props.pop(synonym, None)
            props[name] = value
    return props


def listener_ssl_settings(props: Mapping[str, str], listener: str) -> tuple[tuple[str, str | None], ...]:
    """The listener's key and trust store settings in ``props`` (per-listener key first, then the base key)."""
    scoped = f"{LISTENER_PREFIX}{listener.lower()}."
    return tuple((name, props.get(scoped + name, props.get(name))) for name in LISTENER_SSL_CONFIGS)


def _joined(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def refused_dynamic(names: Iterable[str], resource: str, listeners: Iterable[str]) -> str | None:
    """Why AlterConfigs on broker ``resource`` cannot set ``names`` (Kafka's checks in Kafka's order, the first
    that fails), or None when it can; ``listeners`` are this broker's listener names."""
    have = {name.lower() for name in listeners}
    static: dict[str, str] = {}
    need_prefix: list[str] = []
    per_broker: list[str] = []
    no_listener: dict[str, str] = {}
    new_listener_only: dict[str, str] = {}
    for name in sorted(set(names)):
        base = base_config_name(name)
        key = BROKER_CONFIG_KEYS.get(base)
        listener = listener_of(name)
        if key is None:
            static[name] = "not a broker config pylog knows"
            continue
        if listener is not None:
            per_broker.append(name)
            if listener not in have:
                no_listener[name] = listener
            elif not key.dynamic or not key.per_broker:
                if key.dynamic:
                    static[name] = f"pylog has no per-listener {base}"
                else:
                    new_listener_only[name] = listener.upper()
            continue
        if not key.dynamic:
            static[name] = key.restart_reason
        elif name in LISTENER_SSL_CONFIGS:
            need_prefix.append(name)
        elif key.per_broker:
            per_broker.append(name)
    if static:
        reasons = "; ".join(f"{name}: {why}" for name, why in static.items() if why)
        return f"Cannot update these configs dynamically: {_joined(static)}" + (
            f" ({reasons})" if reasons else ""
        )
    if need_prefix:
        return (
            "These security configs can be dynamically updated only per-listener using the listener prefix: "
            f"{_joined(need_prefix)} (set listener.name.<listener>.<config>)"
        )
    if resource == DEFAULT_BROKER_RESOURCE and per_broker:
        return (
            "Cannot update these configs at default cluster level, broker id must be specified: "
            f"{_joined(per_broker)}"
        )
    if no_listener:
        return (
            f"Cannot update these configs dynamically: {_joined(no_listener)} (this broker has no listener "
            f"{_joined({x.upper() for x in no_listener.values()})}; its listeners are "
            f"{_joined(x.upper() for x in have)}, and {LISTENERS_AT_START})"
        )
    if new_listener_only:
        listener = sorted(new_listener_only.values())[0]
        return (
            f"Configs cannot be updated dynamically for existing listener {listener}, restart broker or create a "
            f"new listener for update: {_joined(new_listener_only)} ({NEW_LISTENER_ONLY})"
        )
    return None


def broker_sources(
    static: Mapping[str, str], dynamic: Mapping[str, Mapping[str, str]], node_id: int
) -> list[tuple[ConfigSource, Mapping[str, str]]]:
    """The broker-level sources of one node, highest precedence first."""
    return [
        (SOURCE_DYNAMIC_BROKER, dynamic.get(str(node_id), {})),
        (SOURCE_DYNAMIC_DEFAULT_BROKER, dynamic.get(DEFAULT_BROKER_RESOURCE, {})),
        (SOURCE_STATIC_BROKER, static),
    ]


def broker_log_config(
    static: Mapping[str, str], dynamic: Mapping[str, Mapping[str, str]], node_id: int
) -> LogConfig:
    """The log defaults of ``node_id`` (:func:`effective_props`). Raises ConfigError for a bad value."""
    return LogConfig.from_properties(effective_props(static, dynamic, node_id))


def _stepped(name: str, before: int, after: int) -> None:
    """Kafka's check of a thread count changed at runtime: at least 1, half to double the current value."""
    if after == before:
        return
    problem = f"Dynamic thread count update validation failed for {name}={after}"
    if after < max(1, before // 2):
        raise ConfigError(f"{problem}, value should be at least half the current value {before}")
    if after > before * 2:
        raise ConfigError(f"{problem}, value should not be greater than double the current value {before}")


def check_broker_configs(
    static: Mapping[str, str],
    dynamic: Mapping[str, Mapping[str, str]],
    resource: str,
    new: Mapping[str, str],
    *,
    node_id: int,
    listeners: Sequence[Listener] = (),
) -> None:
    """Validate ``new`` (names already accepted by :func:`refused_dynamic`) as the dynamic configs of broker
    ``resource``: each value by its declaration, the log defaults of every broker it applies to; on this broker
    (``node_id``, whose static properties are ``static``) Kafka's thread-count steps and every listener TLS
    context the change touches, built from its files. Raises ConfigError naming the key."""
    for name, value in new.items():
        BROKER_CONFIG_KEYS[base_config_name(name)].parse(name, value)
    trial = {str(k): dict(v) for k, v in dynamic.items()}
    trial[resource] = dict(new)
    ids = {int(r) for r in trial if r != DEFAULT_BROKER_RESOURCE} | {node_id}
    for node in sorted(ids):
        broker_log_config(static, trial, node)
    if resource not in (DEFAULT_BROKER_RESOURCE, str(node_id)):
        return
    before, after = effective_props(static, dynamic, node_id), effective_props(static, trial, node_id)
    for name in _STEPPED:
        key = BROKER_CONFIG_KEYS[name]
        _stepped(name, key.value(before), key.value(after))
    for listener in listeners:
        if listener.security_protocol not in ("SSL", "SASL_SSL"):
            continue
        if listener_ssl_settings(before, listener.name) != listener_ssl_settings(after, listener.name):
            server_context(after, listener.name)


def topic_value_source(
    key: str, overrides: Mapping[str, str], sources: list[tuple[ConfigSource, Mapping[str, str]]]
) -> tuple[ConfigSource, list[tuple[str, str, ConfigSource]]]:
    """Where the effective value of topic config ``key`` comes from, and its synonyms (name, value, source),
    highest precedence first: the topic's override, the broker keys that set its default where set, then
    their declared defaults (DEFAULT_CONFIG, as Kafka lists them)."""
    synonyms: list[tuple[str, str, ConfigSource]] = []
    if key in overrides:
        synonyms.append((key, overrides[key], SOURCE_TOPIC))
    names = TOPIC_CONFIG_SYNONYMS.get(key, ())
    for broker_key in names:
        for source, values in sources:
            if broker_key in values:
                synonyms.append((broker_key, values[broker_key], source))
    for broker_key in names:
        default = BROKER_CONFIG_KEYS[broker_key].default
        if default is not None:
            synonyms.append((broker_key, default, SOURCE_DEFAULT))
    return (synonyms[0][2] if synonyms else SOURCE_DEFAULT), synonyms


def text(value: Any) -> str:
    """A config value as Kafka prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
