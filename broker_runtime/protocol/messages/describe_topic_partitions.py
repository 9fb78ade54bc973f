"""DescribeTopicPartitions (API key 75, KIP-966): topics and their partitions, paged by a cursor.

Version 0; flexible. ``Topics`` empty means every topic. At most ``ResponsePartitionLimit`` partitions are
answered; ``NextTopicPartition`` (a nullable struct) says where the next request should start.
Definitions mirror Kafka's DescribeTopicPartitionsRequest.json / DescribeTopicPartitionsResponse.json.
Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.DESCRIBE_TOPIC_PARTITIONS
_NO_OPERATIONS = -(2**31)


def _cursor(name: str) -> Field:
    return Field(
        name,
        "Cursor",
        "0+",
        nullable="0+",
        default=None,
        fields=[Field("TopicName", "string", "0+"), Field("PartitionIndex", "int32", "0+")],
    )


REQUEST = Message(
    "DescribeTopicPartitionsRequest",
    api_key=API_KEY,
    versions="0",
    flexible="0+",
    fields=[
        Field("Topics", "[]TopicRequest", "0+", fields=[Field("Name", "string", "0+")]),
        Field("ResponsePartitionLimit", "int32", "0+", default=2000),
        _cursor("Cursor"),
    ],
)

RESPONSE = Message(
    "DescribeTopicPartitionsResponse",
    api_key=API_KEY,
    versions="0",
    flexible="0+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Topics",
            "[]DescribeTopicPartitionsResponseTopic",
            "0+",
            fields=[
                Field("ErrorCode", "int16", "0+"),
                Field("Name", "string", "0+", nullable="0+"),
                Field("TopicId", "uuid", "0+"),
                Field("IsInternal", "bool", "0+"),
                Field(
                    "Partitions",
                    "[]DescribeTopicPartitionsResponsePartition",
                    "0+",
                    fields=[
                        Field("ErrorCode", "int16", "0+"),
                        Field("PartitionIndex", "int32", "0+"),
                        Field("LeaderId", "int32", "0+"),
                        Field("LeaderEpoch", "int32", "0+", default=-1),
                        Field("ReplicaNodes", "[]int32", "0+"),
                        Field("IsrNodes", "[]int32", "0+"),
                        Field("EligibleLeaderReplicas", "[]int32", "0+", nullable="0+", default=None),
                        Field("LastKnownElr", "[]int32", "0+", nullable="0+", default=None),
                        Field("OfflineReplicas", "[]int32", "0+"),
                    ],
                ),
                Field("TopicAuthorizedOperations", "int32", "0+", default=_NO_OPERATIONS),
            ],
        ),
        _cursor("NextTopicPartition"),
    ],
)
