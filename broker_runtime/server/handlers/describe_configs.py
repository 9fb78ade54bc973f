"""DescribeConfigs (key 32, v0-4): a topic's effective log configs, or this broker's properties.

Topic resources (type 2) list every topic config the storage's LogConfig knows, with source TOPIC_CONFIG (1)
for the topic's overrides and DEFAULT_CONFIG (5) otherwise. Broker resources (type 4, name = node id or
empty) list the properties the broker was started with (STATIC_BROKER_CONFIG, 4). ``ConfigurationKeys``
filters the names. Other resource types get INVALID_REQUEST; unknown topics UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, describe_configs
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.topics import topic_name_error

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = describe_configs.REQUEST
MIN_VERSION = 0
MAX_VERSION = 4

TOPIC = 2
BROKER = 4
_SOURCE_TOPIC = 1
_SOURCE_STATIC_BROKER = 4
_SOURCE_DEFAULT = 5

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


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _entry(name: str, value: str | None, source: int, version: int) -> dict[str, Any]:
    return {
        "Name": name,
        "Value": value,
        "ReadOnly": False,
        "IsDefault": source == _SOURCE_DEFAULT,
        "ConfigSource": source,
        "IsSensitive": False,
        "Synonyms": [],
        "ConfigType": 0,
        "Documentation": None,
    }


def _topic_configs(ctx: BrokerContext, name: str, version: int) -> list[dict[str, Any]]:
    cfg = ctx.topics.config(name)
    overrides = ctx.topics.overrides(name)
    out = []
    for key, attr in sorted(_TOPIC_ATTRS.items()):
        if key in overrides:
            out.append(_entry(key, overrides[key], _SOURCE_TOPIC, version))
        elif hasattr(cfg, attr):
            out.append(_entry(key, _text(getattr(cfg, attr)), _SOURCE_DEFAULT, version))
    for key in sorted(set(overrides) - set(_TOPIC_ATTRS)):
        out.append(_entry(key, overrides[key], _SOURCE_TOPIC, version))
    return out


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    version = header.api_version
    results: list[dict[str, Any]] = []
    for res in body["Resources"]:
        rtype, rname, keys = res["ResourceType"], res["ResourceName"], res["ConfigurationKeys"]
        out: dict[str, Any] = {
            "ResourceType": rtype,
            "ResourceName": rname,
            "ErrorCode": 0,
            "ErrorMessage": None,
        }
        configs: list[dict[str, Any]] = []
        if rtype == TOPIC:
            if topic_name_error(rname) is not None:
                out.update(ErrorCode=ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorMessage=topic_name_error(rname))
            elif ctx.topics.partition_count(rname) is None:
                out.update(
                    ErrorCode=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    ErrorMessage=f"Topic {rname} does not exist",
                )
            else:
                configs = _topic_configs(ctx, rname, version)
        elif rtype == BROKER:
            if rname not in ("", str(ctx.config.node_id)):
                out.update(
                    ErrorCode=ErrorCode.INVALID_REQUEST,
                    ErrorMessage=f"Unexpected broker id {rname!r}, expected {ctx.config.node_id}",
                )
            else:
                configs = [
                    _entry(k, v, _SOURCE_STATIC_BROKER, version) for k, v in sorted(ctx.config.props.items())
                ]
        else:
            out.update(ErrorCode=ErrorCode.INVALID_REQUEST, ErrorMessage=f"Unsupported resource type {rtype}")
        if keys is not None:
            wanted = set(keys)
            configs = [c for c in configs if c["Name"] in wanted]
        out["Configs"] = configs
        results.append(out)
    return {"ThrottleTimeMs": 0, "Results": results}
