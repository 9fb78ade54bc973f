"""DescribeConfigs (key 32, v0-4): a topic's effective log configs, or a broker's properties.

Topic resources (type 2) list every topic config the storage's LogConfig knows with its effective value and
the source it comes from (:mod:`broker_runtime.server.dynamic_config`: DYNAMIC_TOPIC_CONFIG for the topic's
overrides, then the broker property that sets its default -- DYNAMIC_BROKER_CONFIG,
DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG -- else DEFAULT_CONFIG), with synonyms when asked. Broker
resources (type 4): this broker's node id lists the properties it was started with (STATIC_BROKER_CONFIG)
overlaid by its dynamic ones; ``""`` (empty name) lists the cluster-wide dynamic defaults only, as Kafka's
``--entity-default``. ``ConfigurationKeys`` filters the names. Other resource types get INVALID_REQUEST;
unknown topics UNKNOWN_TOPIC_OR_PARTITION.

Secrets (every version, both resource types): a sensitive config (:mod:`broker_runtime.security.secrets`:
Kafka's PASSWORD-type configs such as ``sasl.jaas.config``, ``ssl.key.password`` and ``ssl.keystore.key`` with
any ``listener.name.<l>.[<mechanism>.]`` prefix, a name this broker does not know, a value holding a JAAS entry
or a private key) is answered as Kafka's ``ConfigHelper`` answers it: ``Value`` null, ``IsSensitive`` true,
every synonym's ``Value`` null, ``ConfigType`` PASSWORD for the password-type ones. The value never leaves the
broker, whoever asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, describe_configs
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.security.secrets import is_password_config
from broker_runtime.server.config import sensitive_broker_config
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.dynamic_config import (
    DEFAULT_BROKER_RESOURCE,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_STATIC_BROKER,
    SOURCE_TOPIC,
    broker_sources,
    text,
    topic_value_source,
)
from broker_runtime.server.topics import sensitive_topic_config, topic_name_error
from broker_runtime.storage.config import LogConfig

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle", "topic_config_entries"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = describe_configs.REQUEST
MIN_VERSION = 0
MAX_VERSION = 4

TOPIC = 2
BROKER = 4

#: Topic config name -> LogConfig attribute.
_TOPIC_ATTRS = {
    "cleanup.policy": "cleanup_policy",
    "compression.type": "compression_type",
    "delete.retention.ms": "delete_retention_ms",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "index.interval.bytes": "index_interval_bytes",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.type": "message_timestamp_type",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "min.insync.replicas": "min_insync_replicas",
    "preallocate": "preallocate",
    "retention.bytes": "retention_bytes",
    "retention.ms": "retention_ms",
    "segment.bytes": "segment_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.ms": "segment_ms",
}


#: DescribeConfigsResponse ``ConfigType`` values pylog sets (Kafka's ``ConfigType`` enum; 0 is UNKNOWN).
CONFIG_TYPE_UNKNOWN = 0
CONFIG_TYPE_PASSWORD = 9


def _entry(
    name: str,
    value: str | None,
    source: int,
    synonyms: list[tuple[str, str, int]] | None = None,
    *,
    sensitive: bool,
) -> dict[str, Any]:
    """One config of the answer; a sensitive one has no value anywhere (Kafka's ``createBrokerConfigEntry``)."""
    return {
        "Name": name,
        "Value": None if sensitive else value,
        "ReadOnly": False,
        "IsDefault": source == SOURCE_DEFAULT,
        "ConfigSource": source,
        "IsSensitive": sensitive,
        "Synonyms": [
            {"Name": n, "Value": None if sensitive else v, "Source": src} for n, v, src in synonyms or []
        ],
        "ConfigType": CONFIG_TYPE_PASSWORD if is_password_config(name) else CONFIG_TYPE_UNKNOWN,
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
    for key, attr in sorted(_TOPIC_ATTRS.items()):
        source, synonyms = topic_value_source(key, overrides, sources)
        if key in overrides:
            value: str | None = overrides[key]
        elif hasattr(cfg, attr):
            value = text(getattr(cfg, attr))
        else:
            continue
        sensitive = _topic_sensitive(key, [value, *(v for _, v, _ in synonyms)])
        out.append(_entry(key, value, source, synonyms if with_synonyms else None, sensitive=sensitive))
    for key in sorted(set(overrides) - set(_TOPIC_ATTRS)):
        value = overrides[key]
        synonyms = [(key, value, SOURCE_TOPIC)]
        out.append(
            _entry(
                key,
                value,
                SOURCE_TOPIC,
                synonyms if with_synonyms else None,
                sensitive=_topic_sensitive(key, [value]),
            )
        )
    return out


def _broker_configs(ctx: BrokerContext, name: str, with_synonyms: bool) -> list[dict[str, Any]]:
    """The broker's configs: each name's layers (dynamic per-broker, dynamic default, static) highest first;
    the first is the value, all of them the synonyms (only the dynamic default for the ``""`` resource)."""
    dynamic = ctx.cluster.view.broker_configs
    if name == DEFAULT_BROKER_RESOURCE:
        layers = [(SOURCE_DYNAMIC_DEFAULT_BROKER, dynamic.get("", {}))]
    else:
        layers = [
            (SOURCE_DYNAMIC_BROKER, dynamic.get(name, {})),
            (SOURCE_DYNAMIC_DEFAULT_BROKER, dynamic.get("", {})),
            (SOURCE_STATIC_BROKER, ctx.config.props),
        ]
    out = []
    for key in sorted({k for _, values in layers for k in values}):
        synonyms = [(key, values[key], source) for source, values in layers if key in values]
        sensitive = any(sensitive_broker_config(key, v) for _, v, _ in synonyms)
        _, value, source = synonyms[0]
        out.append(_entry(key, value, source, synonyms if with_synonyms else None, sensitive=sensitive))
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
