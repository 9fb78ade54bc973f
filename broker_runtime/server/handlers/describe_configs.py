"""DescribeConfigs (key 32, v0-4): a topic's effective log configs, or a broker's configs.

Topic resources (type 2) list every topic config the storage's LogConfig declares (those without a value, e.g. an
unset compression level, only when the topic overrides them) with its effective value and the source it comes
from (:mod:`broker_runtime.server.dynamic_config`: DYNAMIC_TOPIC_CONFIG for the topic's overrides, then the
broker property that sets its default -- DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
STATIC_BROKER_CONFIG -- else DEFAULT_CONFIG), with synonyms when asked (ending, as Kafka's, with the broker
properties' declared defaults). Broker resources (type 4): this broker's node id lists every declared broker
config (:data:`~broker_runtime.server.config.BROKER_CONFIGS`) and any other property it was started with, each
from its highest layer -- its dynamic configs, the cluster-wide dynamic defaults, the properties it was started
with (STATIC_BROKER_CONFIG), else the declared default (DEFAULT_CONFIG; no value when the key has none), as
Kafka's ``ConfigHelper`` lists ``KafkaConfig``; ``""`` (empty name) lists the cluster-wide dynamic defaults only,
as Kafka's ``--entity-default``. ``ReadOnly`` is true for a broker config that is not dynamic; ``ConfigType`` is
the declared type. ``ConfigurationKeys`` filters the names. Other resource types get INVALID_REQUEST; unknown
topics UNKNOWN_TOPIC_OR_PARTITION.

Secrets (every version, both resource types): a sensitive config (:mod:`broker_runtime.security.secrets`:
Kafka's PASSWORD-type configs such as ``sasl.jaas.config``, ``ssl.key.password`` and ``ssl.keystore.key`` with
any ``listener.name.<l>.[<mechanism>.]`` prefix, a name this broker does not know, a value holding a JAAS entry
or a private key) is answered as Kafka's ``ConfigHelper`` answers it: ``Value`` null, ``IsSensitive`` true,
every synonym's ``Value`` null, ``ConfigType`` PASSWORD for the password-type ones. The value never leaves the
broker, whoever asks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from broker_runtime.configdef import ConfigKey, ConfigType
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, describe_configs
from broker_runtime.protocol.messages.describe_configs import ConfigSource
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.security.secrets import base_config_name, is_password_config
from broker_runtime.server.config import BROKER_CONFIG_KEYS, BROKER_CONFIGS, sensitive_broker_config
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.dynamic_config import (
    DEFAULT_BROKER_RESOURCE,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_STATIC_BROKER,
    broker_config_synonyms,
    broker_sources,
    text,
    topic_value_source,
)
from broker_runtime.server.topics import sensitive_topic_config, topic_name_error
from broker_runtime.storage.config import TOPIC_CONFIGS, LogConfig

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle", "topic_config_entries"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = describe_configs.REQUEST
MIN_VERSION = 0
MAX_VERSION = 4

TOPIC = describe_configs.RESOURCE_TOPIC
BROKER = describe_configs.RESOURCE_BROKER

_TOPIC_KEYS: dict[str, ConfigKey] = {key.name: key for key in TOPIC_CONFIGS}
Synonym = tuple[str, str | None, ConfigSource]


def _config_type(name: str, key: ConfigKey | None) -> int:
    """The declared type (Kafka's ``ConfigType``); an undeclared name is UNKNOWN, or PASSWORD when it is one of
    Kafka's password configs (a per-listener one, e.g.)."""
    if key is not None:
        return int(key.type)
    return int(ConfigType.PASSWORD if is_password_config(name) else ConfigType.UNKNOWN)


def _entry(
    name: str,
    value: str | None,
    source: int,
    synonyms: Sequence[Synonym] | None = None,
    *,
    sensitive: bool,
    read_only: bool = False,
    key: ConfigKey | None = None,
) -> dict[str, Any]:
    """One config of the answer; a sensitive one has no value anywhere (Kafka's ``createBrokerConfigEntry``)."""
    return {
        "Name": name,
        "Value": None if sensitive else value,
        "ReadOnly": read_only,
        "IsDefault": source == SOURCE_DEFAULT,
        "ConfigSource": source,
        "IsSensitive": sensitive,
        "Synonyms": [
            {"Name": n, "Value": None if sensitive else v, "Source": src} for n, v, src in synonyms or []
        ],
        "ConfigType": _config_type(name, key),
        "Documentation": None,
    }


def _topic_sensitive(name: str, values: list[str | None]) -> bool:
    return any(sensitive_topic_config(name, v) for v in values)


def _topic_configs(ctx: BrokerContext, name: str, with_synonyms: bool) -> list[dict[str, Any]]:
    return topic_config_entries(ctx, ctx.topics.config(name), ctx.topics.overrides(name), with_synonyms)


def topic_config_entries(
    ctx: BrokerContext, cfg: LogConfig, overrides: Mapping[str, str], with_synonyms: bool
) -> list[dict[str, Any]]:
    """Every config of a topic whose effective config is ``cfg`` and whose overrides are ``overrides``, as
    DescribeConfigs answers them (sorted by name; also the configs of a CreateTopics v5+ answer, as Kafka's
    controller answers both from ``computeEffectiveTopicConfigs``)."""
    sources = broker_sources(ctx.config.props, ctx.cluster.view.broker_configs, ctx.config.node_id)
    out = []
    for name in sorted(set(_TOPIC_KEYS) | set(overrides)):
        source, synonyms = topic_value_source(name, overrides, sources)
        if name in overrides:
            value: str | None = overrides[name]
        elif cfg.topic_value(name) is not None:
            value = text(cfg.topic_value(name))
        else:
            continue  # no value and no default (a compression level left to its codec)
        sensitive = _topic_sensitive(name, [value, *(v for _, v, _ in synonyms)])
        entry = _entry(
            name,
            value,
            source,
            synonyms if with_synonyms else None,
            sensitive=sensitive,
            key=_TOPIC_KEYS.get(name),
        )
        out.append(entry)
    return out


def _broker_configs(ctx: BrokerContext, name: str, with_synonyms: bool) -> list[dict[str, Any]]:
    """The broker's configs (Kafka's ``ConfigHelper.createBrokerConfigEntry``): each name's synonyms
    (:func:`~broker_runtime.server.dynamic_config.broker_config_synonyms`: a per-listener key's base key, the
    ``log.retention.*`` family) layer by layer -- dynamic per-broker, dynamic default, static, declared default --
    from the first entry of the name itself; the first is the value and its source. The ``""`` resource lists
    the names set there, each with its cluster-wide dynamic entries only, as Kafka's ``--entity-default``."""
    dynamic = ctx.cluster.view.broker_configs
    defaults = {key.name: key.default for key in BROKER_CONFIGS if key.default is not None}
    layers: list[tuple[ConfigSource, Mapping[str, str | None]]] = [
        (SOURCE_DYNAMIC_BROKER, dynamic.get(str(ctx.config.node_id), {})),
        (SOURCE_DYNAMIC_DEFAULT_BROKER, dynamic.get("", {})),
        (SOURCE_STATIC_BROKER, ctx.config.props),
        (SOURCE_DEFAULT, defaults),
    ]
    if name == DEFAULT_BROKER_RESOURCE:
        names = sorted(dynamic.get("", {}))
    else:
        names = sorted({k for _, values in layers for k in values} | set(BROKER_CONFIG_KEYS))
    out = []
    for key in names:
        declared = BROKER_CONFIG_KEYS.get(key)
        typed = declared or BROKER_CONFIG_KEYS.get(base_config_name(key))
        synonyms: list[Synonym] = [
            (synonym, values[synonym], source)
            for source, values in layers
            for synonym in broker_config_synonyms(key)
            if synonym in values
        ]
        while synonyms and synonyms[0][0] != key:  # a base key's entries do not list the per-listener ones
            synonyms.pop(0)
        if name == DEFAULT_BROKER_RESOURCE:
            synonyms = [s for s in synonyms if s[2] == SOURCE_DYNAMIC_DEFAULT_BROKER]
        sensitive = (typed is not None and typed.sensitive) or any(
            sensitive_broker_config(n, v) for n, v, _ in [(key, None, None), *synonyms]
        )
        value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (None, SOURCE_DEFAULT)
        entry = _entry(
            key,
            value,
            source,
            synonyms if with_synonyms else None,
            sensitive=sensitive,
            read_only=declared is None or not declared.dynamic,
            key=typed,
        )
        out.append(entry)
    return out


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    ctx.refresh_cluster()  # a change another broker just wrote is answered here too
    for res in body["Resources"]:
        rtype, rname, keys = res["ResourceType"], res["ResourceName"], res["ConfigurationKeys"]
        out: dict[str, Any] = {
            "ResourceType": rtype,
            "ResourceName": rname,
            "ErrorCode": 0,
            "ErrorMessage": None,
        }
        configs: list[dict[str, Any]] = []
        if rtype == TOPIC and not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, rname):
            out.update(
                ErrorCode=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                ErrorMessage=f"DESCRIBE_CONFIGS on topic {rname} is not allowed",
            )
        elif rtype == BROKER and not ctx.authorized_cluster(AclOperation.DESCRIBE_CONFIGS):
            out.update(
                ErrorCode=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                ErrorMessage="DESCRIBE_CONFIGS on the cluster is not allowed",
            )
        elif rtype == TOPIC:
            if topic_name_error(rname) is not None:
                out.update(ErrorCode=ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorMessage=topic_name_error(rname))
            elif ctx.topics.partition_count(rname) is None:
                out.update(
                    ErrorCode=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    ErrorMessage=f"Topic {rname} does not exist",
                )
            else:
                configs = _topic_configs(ctx, rname, bool(body["IncludeSynonyms"]))
        elif rtype == BROKER:
            if rname not in ("", str(ctx.config.node_id)):
                out.update(
                    ErrorCode=ErrorCode.INVALID_REQUEST,
                    ErrorMessage=f"Unexpected broker id {rname!r}, expected {ctx.config.node_id}",
                )
            else:
                configs = _broker_configs(ctx, rname, bool(body["IncludeSynonyms"]))
        else:
            out.update(ErrorCode=ErrorCode.INVALID_REQUEST, ErrorMessage=f"Unsupported resource type {rtype}")
        if keys is not None:
            wanted = set(keys)
            configs = [c for c in configs if c["Name"] in wanted]
        out["Configs"] = configs
        results.append(out)
    return {"ThrottleTimeMs": 0, "Results": results}
