"""CreateTopics (key 19, v0-7): create topics through the cluster store (any broker may take the request).

Per topic, first failure wins (Kafka's ``ControllerApis``/``ReplicationControlManager`` checks):
  * the name appears twice in the request                         -> INVALID_REQUEST
  * illegal name                                                  -> INVALID_TOPIC_EXCEPTION
  * already exists                                                -> TOPIC_ALREADY_EXISTS
  * NumPartitions -1 takes ``num.partitions``; otherwise <= 0     -> INVALID_PARTITIONS
  * more partitions (or assignments) than ``pylog.max.partitions.per.topic`` (pylog's limit; Kafka would
    need a CreateTopicPolicy, whose refusal is this code)        -> POLICY_VIOLATION
  * ReplicationFactor -1 takes ``default.replication.factor``; <= 0 or more than the registered brokers
                                                                  -> INVALID_REPLICATION_FACTOR
  * manual Assignments: partitions 0..n-1, each a list of distinct registered brokers (single node: exactly
    [node])                                                       -> INVALID_REPLICA_ASSIGNMENT
  * configs are topic overrides, checked by the storage's LogConfig -> INVALID_CONFIG
Replicas are assigned round-robin (:func:`~broker_runtime.replication.assign_replicas`); the first replica
leads. ``validateOnly`` runs every check and creates nothing. v5+ answers carry the partition count, the
replication factor and every config of the topic as DescribeConfigs answers it (sensitive ones without their
value), also for ``validateOnly``, as Kafka's controller does (``computeEffectiveTopicConfigs`` of the
request's configs); a caller without DESCRIBE_CONFIGS on the topic gets none of the three but
``TopicConfigErrorCode`` TOPIC_AUTHORIZATION_FAILED (the topic is still created). The answer is sent once the
assignment is recorded; each replica creates its log when it sees the assignment (this broker at once, the others within
``POLL_INTERVAL_MS``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, create_topics
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext, HandlerResult, answer_after_loads
from broker_runtime.server.handlers.describe_configs import topic_config_entries
from broker_runtime.server.handlers.metadata import may_create
from broker_runtime.server.topics import TopicError

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = create_topics.REQUEST
MIN_VERSION = 0
MAX_VERSION = 7

_ZERO_UUID = uuid.UUID(int=0)


def _create_one(ctx: BrokerContext, topic: dict[str, Any], validate_only: bool) -> tuple[int, int]:
    """Create (or validate) one topic; returns (partitions, replication factor) or raises TopicError."""
    name = topic["Name"]
    assignments = topic["Assignments"]
    num_partitions = topic["NumPartitions"]
    replication = topic["ReplicationFactor"]
    manual: dict[int, list[int]] | None = None
    if assignments:
        if (
            num_partitions != create_topics.NO_NUM_PARTITIONS
            or replication != create_topics.NO_REPLICATION_FACTOR
        ):
            raise TopicError(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
            )
        manual = {a["PartitionIndex"]: list(a["BrokerIds"]) for a in assignments}
        indexes = sorted(manual)
        if indexes != list(range(len(indexes))) or len(indexes) != len(assignments):
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partitions of topic {name} must be numbered 0..{len(assignments) - 1}, "
                f"got {sorted(a['PartitionIndex'] for a in assignments)}",
            )
    if num_partitions == create_topics.NO_NUM_PARTITIONS:
        num_partitions = ctx.config.num_partitions
    cap = ctx.config.max_partitions_per_topic
    asked = len(manual) if manual is not None else num_partitions
    if asked > cap:
        # Kafka has no such limit; a configured policy refusing a creation answers POLICY_VIOLATION there.
        raise TopicError(
            ErrorCode.POLICY_VIOLATION,
            f"Topic {name} asks for {asked} partitions, more than pylog.max.partitions.per.topic={cap}.",
        )
    if replication == create_topics.NO_REPLICATION_FACTOR:
        replication = ctx.config.default_replication_factor
    overrides: dict[str, str] = {}
    for cfg in topic["Configs"]:
        if cfg["Value"] is None:
            raise TopicError(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {cfg['Name']}"
            )
        overrides[cfg["Name"]] = cfg["Value"]
    result: tuple[int, int] = ctx.cluster.create_topic(
        name, num_partitions, replication, overrides, manual, validate_only=validate_only
    )
    if not validate_only:
        ctx.refresh_cluster()
    return result


def _created_configs(ctx: BrokerContext, overrides: dict[str, str]) -> list[dict[str, Any]]:
    """Every config of a topic created with ``overrides`` (v5+), as DescribeConfigs answers the topic."""
    cfg = ctx.topics.base.with_topic_overrides(overrides)
    return [
        {k: entry[k] for k in ("Name", "Value", "ReadOnly", "ConfigSource", "IsSensitive")}
        for entry in topic_config_entries(ctx, cfg, overrides, False)
    ]


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> HandlerResult:
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
        if not may_create(ctx, name):
            result.update(
                ErrorCode=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                ErrorMessage=f"CREATE on the cluster or on topic {name} is not allowed",
                NumPartitions=-1,
                ReplicationFactor=-1,
            )
            results.append(result)
            continue
        try:
            partitions, replication = _create_one(ctx, topic, validate_only)
        except TopicError as exc:
            result.update(ErrorCode=exc.code, ErrorMessage=exc.detail, NumPartitions=-1, ReplicationFactor=-1)
        else:
            result.update(ErrorCode=ErrorCode.NONE, ErrorMessage=None)
            if ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name):
                overrides = {cfg["Name"]: cfg["Value"] for cfg in topic["Configs"]}
                result.update(
                    NumPartitions=partitions,
                    ReplicationFactor=replication,
                    Configs=_created_configs(ctx, overrides),
                )
            else:
                result.update(
                    NumPartitions=-1,
                    ReplicationFactor=-1,
                    Configs=[],
                    TopicConfigErrorCode=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                )
        results.append(result)
    created = [r["Name"] for r in results if r["ErrorCode"] == ErrorCode.NONE and not validate_only]

    def answer(failures: dict[str, BaseException]) -> dict[str, Any]:
        for r in results:
            exc = failures.get(r["Name"])
            if exc is None and r["ErrorCode"] == ErrorCode.NONE and not validate_only:
                r["TopicId"] = ctx.cluster.view.topic_id(r["Name"])  # v7+
            if exc is not None:  # the log files could not be made: the topic does not exist
                code = exc.code if isinstance(exc, TopicError) else ErrorCode.KAFKA_STORAGE_ERROR
                r.update(
                    ErrorCode=code,
                    ErrorMessage=str(getattr(exc, "detail", exc)),
                    NumPartitions=-1,
                    ReplicationFactor=-1,
                    Configs=None,
                )
        return {"ThrottleTimeMs": 0, "Topics": results}

    return answer_after_loads(ctx, created, answer)
