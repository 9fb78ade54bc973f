"""Metadata (key 3, v0-12): this node as the only broker, leader of every partition.

Every partition: leader = this node, leaderEpoch 0 (the epoch stamped into stored batches, as Kafka reports
the real epoch; librdkafka validates offsets against it only through OffsetForLeaderEpoch, which this broker
does not advertise), replicas = ISR = [node], no offline replicas. Topic ids are not tracked (zero UUID).

Topics: null (v1+) or an empty list in v0 means all topics. A requested topic that does not exist is created
here when ``auto.create.topics.enable`` is true and the request allows it (AllowAutoTopicCreation, v4+;
earlier versions always allow), with ``num.partitions`` partitions. Creation is synchronous, so the answer
already describes the new topic (Kafka answers LEADER_NOT_AVAILABLE first because its creation is async).
Illegal names get INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

import uuid
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.replica_manager import LEADER_EPOCH
from broker_runtime.server.topics import topic_name_error

__all__ = ["API_KEY", "MAX_VERSION", "MIN_VERSION", "handle"]

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12

UNKNOWN_TOPIC_ID = 100
_ZERO_UUID = uuid.UUID(int=0)
_NO_OPERATIONS = -(2**31)


def _topic(ctx: BrokerContext, name: str | None, code: int) -> dict[str, Any]:
    node = ctx.config.node_id
    count = ctx.topics.partition_count(name) if name is not None and code == ErrorCode.NONE else None
    partitions = [
        {
            "ErrorCode": ErrorCode.NONE,
            "PartitionIndex": index,
            "LeaderId": node,
            "LeaderEpoch": LEADER_EPOCH,
            "ReplicaNodes": [node],
            "IsrNodes": [node],
            "OfflineReplicas": [],
        }
        for index in range(count or 0)
    ]
    return {
        "ErrorCode": code,
        "Name": name,
        "TopicId": _ZERO_UUID,
        "IsInternal": False,
        "Partitions": partitions,
        "TopicAuthorizedOperations": _NO_OPERATIONS,
    }


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    version = header.api_version
    requested = body["Topics"]
    allow_auto = ctx.config.auto_create_topics_enable and (version < 4 or body["AllowAutoTopicCreation"])
    topics: list[dict[str, Any]] = []
    if requested is None or (version == 0 and not requested):
        topics = [_topic(ctx, name, ErrorCode.NONE) for name in ctx.topics.names()]
    else:
        for entry in requested:
            name = entry["Name"]
            if name is None:
                topics.append(_topic(ctx, None, UNKNOWN_TOPIC_ID))
                continue
            if ctx.topics.partition_count(name) is not None:
                topics.append(_topic(ctx, name, ErrorCode.NONE))
            elif topic_name_error(name) is not None:
                topics.append(_topic(ctx, name, ErrorCode.INVALID_TOPIC_EXCEPTION))
            elif allow_auto:
                topics.append(_topic(ctx, name, ctx.topics.auto_create(name)))
            else:
                topics.append(_topic(ctx, name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    node = ctx.config.node_id
    return {
        "ThrottleTimeMs": 0,
        "Brokers": [{"NodeId": node, "Host": ctx.advertised_host, "Port": ctx.advertised_port, "Rack": None}],
        "ClusterId": ctx.config.cluster_id,
        "ControllerId": node,
        "Topics": topics,
        "ClusterAuthorizedOperations": _NO_OPERATIONS,
    }
