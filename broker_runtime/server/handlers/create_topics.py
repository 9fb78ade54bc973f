"""CreateTopics (key 19, v0-7): create topics on this single node.

Per topic, first failure wins (Kafka's ``ControllerApis``/``ReplicationControlManager`` checks):
  * the name appears twice in the request                         -> INVALID_REQUEST
  * illegal name                                                  -> INVALID_TOPIC_EXCEPTION
  * already exists                                                -> TOPIC_ALREADY_EXISTS
  * NumPartitions -1 takes ``num.partitions``; otherwise <= 0     -> INVALID_PARTITIONS
  * ReplicationFactor -1 takes ``default.replication.factor``; anything but 1 (one broker)
                                                                  -> INVALID_REPLICATION_FACTOR
  * manual Assignments must give every partition 0..n-1 exactly the replica list [node]
                                                                  -> INVALID_REPLICA_ASSIGNMENT
  * configs are topic overrides, checked by the storage's LogConfig -> INVALID_CONFIG
``validateOnly`` runs every check and creates nothing. v5+ answers carry the partition count, replication
factor and the topic's non-default configs.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.topics import TopicError

__all__ = ["API_KEY", "MAX_VERSION", "MIN_VERSION", "handle"]

API_KEY = 19
MIN_VERSION = 0
MAX_VERSION = 7

_TOPIC_CONFIG_SOURCE = 1
_ZERO_UUID = uuid.UUID(int=0)


def _create_one(ctx: BrokerContext, topic: dict[str, Any], validate_only: bool) -> tuple[int, int]:
    """Create (or validate) one topic; returns (partitions, replication factor) or raises TopicError."""
    name = topic["Name"]
    node = ctx.config.node_id
    assignments = topic["Assignments"]
    num_partitions = topic["NumPartitions"]
    replication = topic["ReplicationFactor"]
    if assignments:
        if num_partitions != -1 or replication != -1:
            raise TopicError(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
            )
        indexes = sorted(a["PartitionIndex"] for a in assignments)
        if indexes != list(range(len(indexes))):
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partitions of topic {name} must be numbered 0..{len(indexes) - 1}, got {indexes}",
            )
        for a in assignments:
            if list(a["BrokerIds"]) != [node]:
                raise TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partition {a['PartitionIndex']} of topic {name}: replicas {list(a['BrokerIds'])} "
                    f"must be exactly [{node}] on this single-node broker",
                )
        num_partitions, replication = len(indexes), 1
    if num_partitions == -1:
        num_partitions = ctx.config.num_partitions
    if replication == -1:
        replication = ctx.config.default_replication_factor
    if replication <= 0:
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication != 1:
        raise TopicError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication} time(s): The target replication factor of "
            f"{replication} cannot be reached because only 1 broker(s) are registered.",
        )
    overrides: dict[str, str] = {}
    for cfg in topic["Configs"]:
        if cfg["Value"] is None:
            raise TopicError(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {cfg['Name']}"
            )
        overrides[cfg["Name"]] = cfg["Value"]
    ctx.topics.check_new(name, num_partitions, overrides)
    if not validate_only:
        ctx.topics.create(name, num_partitions, overrides)
    return num_partitions, replication


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    validate_only = bool(body["validateOnly"])
    counts = Counter(t["Name"] for t in body["Topics"])
    results: list[dict[str, Any]] = []
    for topic in body["Topics"]:
        name = topic["Name"]
        result: dict[str, Any] = {"Name": name, "TopicId": _ZERO_UUID, "Configs": None}
        if counts[name] > 1:
            result.update(
                ErrorCode=ErrorCode.INVALID_REQUEST, ErrorMessage=f"Duplicate topic name {name} in request."
            )
            results.append(result)
            continue
        try:
            partitions, replication = _create_one(ctx, topic, validate_only)
        except TopicError as exc:
            result.update(ErrorCode=exc.code, ErrorMessage=exc.detail, NumPartitions=-1, ReplicationFactor=-1)
        else:
            result.update(
                ErrorCode=ErrorCode.NONE,
                ErrorMessage=None,
                NumPartitions=partitions,
                ReplicationFactor=replication,
                Configs=[
                    {
                        "Name": cfg["Name"],
                        "Value": cfg["Value"],
                        "ReadOnly": False,
                        "ConfigSource": _TOPIC_CONFIG_SOURCE,
                        "IsSensitive": False,
                    }
                    for cfg in topic["Configs"]
                ],
            )
        results.append(result)
    return {"ThrottleTimeMs": 0, "Topics": results}
