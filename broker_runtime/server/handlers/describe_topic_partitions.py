"""DescribeTopicPartitions (key 75, v0, KIP-966): topics and partitions from the cluster metadata, paged.

Topics are answered in name order (all of them when the request names none), starting at ``Cursor``; once
``ResponsePartitionLimit`` partitions are in the answer, ``NextTopicPartition`` names the next one (Kafka's
paging). An unknown named topic answers UNKNOWN_TOPIC_OR_PARTITION with no partitions; an illegal name
INVALID_TOPIC_EXCEPTION. Each topic carries its id (the zero id for an unknown one); pylog has no eligible leader replicas,
so both ELR fields are empty lists, never null: Kafka's broker always sends lists there, and Kafka's admin client
(``kafka-topics --describe``) dereferences them without a null check. Offline replicas are the fenced ones.
A cursor with a negative partition, or naming a topic the request's list does not hold, is invalid (Kafka's
``DescribeTopicPartitionsRequestHandler``): every named topic is answered INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, describe_topic_partitions
from broker_runtime.protocol.topic_id import ZERO_TOPIC_ID
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.topics import topic_name_error

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = describe_topic_partitions.REQUEST
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    ctx.refresh_cluster()
    view = ctx.cluster.view
    names = sorted({t["Name"] for t in body["Topics"]}) if body["Topics"] else sorted(view.topics)
    cursor = body["Cursor"]
    if cursor is not None and (
        cursor["PartitionIndex"] < 0 or (body["Topics"] and cursor["TopicName"] not in names)
    ):
        return {
            "ThrottleTimeMs": 0,
            "Topics": [
                {
                    "ErrorCode": ErrorCode.INVALID_REQUEST,
                    "Name": name,
                    "TopicId": ZERO_TOPIC_ID,
                    "IsInternal": False,
                    "Partitions": [],
                }
                for name in names
                if body["Topics"]
            ],
            "NextTopicPartition": None,
        }
    first_topic, first_partition = (cursor["TopicName"], cursor["PartitionIndex"]) if cursor else ("", 0)
    budget = max(1, body["ResponsePartitionLimit"])
    fenced = {b.node_id for b in view.brokers.values() if b.fenced}
    topics: list[dict[str, Any]] = []
    next_cursor: dict[str, Any] | None = None
    for name in names:
        if name < first_topic:
            continue
        out: dict[str, Any] = {
            "ErrorCode": ErrorCode.NONE,
            "Name": name,
            "TopicId": ZERO_TOPIC_ID,  # set below once the principal may DESCRIBE the topic
            "IsInternal": name.startswith("__"),
            "Partitions": [],
        }
        info = view.topics.get(name)
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            if body["Topics"]:  # named: refused; all topics: the hidden ones are left out (as Metadata)
                out["ErrorCode"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                topics.append(out)
            continue
        out["TopicId"] = view.topic_id(name)
        if info is None:
            problem = topic_name_error(name)
            out["ErrorCode"] = (
                ErrorCode.INVALID_TOPIC_EXCEPTION if problem else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            topics.append(out)
            continue
        start = first_partition if name == first_topic else 0
        for index in range(start, len(info.partitions)):
            if budget == 0:
                next_cursor = {"TopicName": name, "PartitionIndex": index}
                break
            p = info.partitions[index]
            out["Partitions"].append(
                {
                    "ErrorCode": ErrorCode.NONE,
                    "PartitionIndex": index,
                    "LeaderId": p.leader,
                    "LeaderEpoch": p.leader_epoch,
                    "ReplicaNodes": list(p.replicas),
                    "IsrNodes": list(p.isr),
                    "EligibleLeaderReplicas": [],
                    "LastKnownElr": [],
                    "OfflineReplicas": [r for r in p.replicas if r in fenced],
                }
            )
            budget -= 1
        topics.append(out)
        if next_cursor is not None:
            break
    return {"ThrottleTimeMs": 0, "Topics": topics, "NextTopicPartition": next_cursor}
