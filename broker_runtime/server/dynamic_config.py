"""Dynamic configs: the broker keys AlterConfigs may change at runtime, and where each value of a topic or broker
config comes from (DescribeConfigs' ``ConfigSource``).

Sources, highest precedence first (Kafka's ``DescribeConfigsResponse.ConfigSource``)::

    1 DYNAMIC_TOPIC_CONFIG          a topic's override (CreateTopics configs, AlterConfigs on the topic)
    2 DYNAMIC_BROKER_CONFIG         AlterConfigs on broker "<node id>"
    3 DYNAMIC_DEFAULT_BROKER_CONFIG AlterConfigs on broker "" (every broker)
    4 STATIC_BROKER_CONFIG          the broker's properties file and --override
    5 DEFAULT_CONFIG                the key's declared default

Which broker keys are dynamic is their declaration's (:data:`~broker_runtime.server.config.BROKER_CONFIGS`,
``dynamic``): the broker properties that set topic defaults (``log.retention.ms``, ``log.segment.bytes``,
``log.cleanup.policy``, ``min.insync.replicas``, ``message.max.bytes``, ...: the storage's
``BROKER_LOG_SYNONYMS``, the set Kafka's ``DynamicLogConfig`` reconfigures); AlterConfigs on any other broker key
is refused naming it (:func:`refused_dynamic`). The dynamic values live with the cluster metadata (a JSON file in
the first log directory on a single node, ``cluster.json`` in a cluster) and are applied to every open log at
once: :func:`broker_log_config` computes the defaults, ``TopicManager.set_base`` applies them.

Event-loop thread only; the functions are pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from broker_runtime.protocol.messages.describe_configs import ConfigSource
from broker_runtime.server.config import BROKER_CONFIG_KEYS, BROKER_CONFIGS
from broker_runtime.storage.config import TOPIC_CONFIG_SYNONYMS, LogConfig

__all__ = [
    "DEFAULT_BROKER_RESOURCE",
    "DYNAMIC_BROKER_CONFIGS",
    "SOURCE_DEFAULT",
    "SOURCE_DYNAMIC_BROKER",
    "SOURCE_DYNAMIC_DEFAULT_BROKER",
    "SOURCE_STATIC_BROKER",
    "SOURCE_TOPIC",
    "broker_log_config",
    "broker_sources",
    "check_broker_configs",
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


def refused_dynamic(names: Iterable[str]) -> str | None:
    """Why AlterConfigs on a broker cannot set ``names`` (those that are not dynamic), or None when it can."""
    refused = sorted(set(names) - DYNAMIC_BROKER_CONFIGS)
    if not refused:
        return None
    return (
        f"Cannot update these configs dynamically: {', '.join(refused)} (pylog reconfigures the broker's log "
        "defaults at runtime: log.retention.ms, log.segment.bytes, log.cleanup.policy, min.insync.replicas, "
        "message.max.bytes, ...)"
    )


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
    """The log defaults of ``node_id``: its static properties overlaid by the dynamic ones. Raises
    ConfigError for a bad value."""
    merged: dict[str, str] = dict(static)
    for _, values in reversed(broker_sources(static, dynamic, node_id)[:2]):
        merged.update(values)
    return LogConfig.from_properties(merged)


def check_broker_configs(
    static: Mapping[str, str], dynamic: Mapping[str, Mapping[str, str]], resource: str, new: Mapping[str, str]
) -> None:
    """Validate ``new`` (dynamic keys only: :func:`refused_dynamic`) as the dynamic configs of broker
    ``resource``, on every broker it applies to; raises ConfigError naming the key."""
    trial = {str(k): dict(v) for k, v in dynamic.items()}
    trial[resource] = dict(new)
    ids = [int(r) for r in trial if r != DEFAULT_BROKER_RESOURCE] or [0]
    for node in ids:
        broker_log_config(static, trial, node)


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
