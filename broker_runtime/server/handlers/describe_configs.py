"""DescribeConfigs (key 32, v0-4): a topic's effective log configs, or a broker's properties.

Topic resources (type 2) list every topic config the storage's LogConfig knows with its effective value and
the source it comes from (:mod:`broker_runtime.server.dynamic_config`: DYNAMIC_TOPIC_CONFIG for the topic's
overrides, then the broker property that sets its default -- DYNAMIC_BROKER_CONFIG,
DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG -- else DEFAULT_CONFIG), with synonyms when asked. Broker
resources (type 4): this broker's node id lists the properties it was started with (STATIC_BROKER_CONFIG)
overlaid by its dynamic ones; ``""`` (empty name) lists the cluster-wide dynamic defaults only, as Kafka's
``--entity-default``. ``ConfigurationKeys`` filters the names. Other resource types get INVALID_REQUEST;
unknown topics UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, describe_configs
from broker_runtime.security.acl import AclOperation, ResourceType
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
from broker_runtime.server.topics import topic_name_error

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

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


def _entry(
    name: str, value: str | None, source: int, synonyms: list[tuple[str, str, int]] | None = None
) -> dict[str, Any]:
    return {
        "Name": name,
        "Value": value,
        "ReadOnly": False,
        "IsDefault": source == SOURCE_DEFAULT,
        "ConfigSource": source,
        "IsSensitive": False,
        "Synonyms": [{"Name": n, "Value": v, "Source": src} for n, v, src in synonyms or []],
        "ConfigType": 0,
        "Documentation": None,
    }


def _topic_configs(ctx: BrokerContext, name: str, with_synonyms: bool) -> list[dict[str, Any]]:
    cfg = ctx.topics.config(name)
    overrides = ctx.topics.overrides(name)
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
        out.append(_entry(key, value, source, synonyms if with_synonyms else None))
    for key in sorted(set(overrides) - set(_TOPIC_ATTRS)):
        out.append(_entry(key, overrides[key], SOURCE_TOPIC))
    return out


def _broker_configs(ctx: BrokerContext, name: str) -> list[dict[str, Any]]:
    dynamic = ctx.cluster.view.broker_configs
    if name == DEFAULT_BROKER_RESOURCE:
        return [_entry(k, v, SOURCE_DYNAMIC_DEFAULT_BROKER) for k, v in sorted(dynamic.get("", {}).items())]
    merged: dict[str, tuple[str, int]] = {k: (v, SOURCE_STATIC_BROKER) for k, v in ctx.config.props.items()}
    merged.update({k: (v, SOURCE_DYNAMIC_DEFAULT_BROKER) for k, v in dynamic.get("", {}).items()})
    merged.update({k: (v, SOURCE_DYNAMIC_BROKER) for k, v in dynamic.get(name, {}).items()})
    return [_entry(k, v, src) for k, (v, src) in sorted(merged.items())]


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
                configs = _broker_configs(ctx, rname)
        else:
            out.update(ErrorCode=ErrorCode.INVALID_REQUEST, ErrorMessage=f"Unsupported resource type {rtype}")
        if keys is not None:
            wanted = set(keys)
            configs = [c for c in configs if c["Name"] in wanted]
        out["Configs"] = configs
        results.append(out)
    return {"ThrottleTimeMs": 0, "Results": results}
