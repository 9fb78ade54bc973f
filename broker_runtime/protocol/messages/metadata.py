"""Metadata (API key 3): brokers, controller and the partitions of topics with their leaders and replicas.

Versions 0-13; flexible from 9. In v0 an empty ``Topics`` array means all topics; from v1 ``Topics`` null means
all topics and empty means none. ``AllowAutoTopicCreation`` from v4 (default true); topic ids from v10; a top-level
``ErrorCode`` from v13 (KIP-1102, REBOOTSTRAP_REQUIRED when the broker wants the client to bootstrap again).
Definitions mirror Kafka's MetadataRequest.json / MetadataResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.METADATA
#: Kafka's "authorized operations not requested" sentinel (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

REQUEST = Message(
    "MetadataRequest",
    api_key=API_KEY,
    versions="0-13",
    flexible="9+",
    fields=[
        Field(
            "Topics",
            "[]MetadataRequestTopic",
            "0+",
            nullable="1+",
            fields=[
                Field("TopicId", "uuid", "10+"),
                Field("Name", "string", "0+", nullable="10+"),
            ],
        ),
        Field("AllowAutoTopicCreation", "bool", "4+", default=True),
        Field("IncludeClusterAuthorizedOperations", "bool", "8-10"),
        Field("IncludeTopicAuthorizedOperations", "bool", "8+"),
    ],
)

RESPONSE = Message(
    "MetadataResponse",
    api_key=API_KEY,
    versions="0-13",
    flexible="9+",
    fields=[
        Field("ThrottleTimeMs", "int32", "3+"),
        Field(
            "Brokers",
            "[]MetadataResponseBroker",
            "0+",
            fields=[
                Field("NodeId", "int32", "0+"),
                Field("Host", "string", "0+"),
                Field("Port", "int32", "0+"),
                Field("Rack", "string", "1+", nullable="1+", default=None),
            ],
        ),
        Field("ClusterId", "string", "2+", nullable="2+", default=None),
        Field("ControllerId", "int32", "1+", default=-1),
        Field(
            "Topics",
            "[]MetadataResponseTopic",
            "0+",
            fields=[
                Field("ErrorCode", "int16", "0+"),
                Field("Name", "string", "0+", nullable="12+"),
                Field("TopicId", "uuid", "10+"),
                Field("IsInternal", "bool", "1+", default=False),
                Field(
                    "Partitions",
                    "[]MetadataResponsePartition",
                    "0+",
                    fields=[
                        Field("ErrorCode", "int16", "0+"),
                        Field("PartitionIndex", "int32", "0+"),
                        Field("LeaderId", "int32", "0+"),
                        Field("LeaderEpoch", "int32", "7+", default=-1),
                        Field("ReplicaNodes", "[]int32", "0+"),
                        Field("IsrNodes", "[]int32", "0+"),
                        Field("OfflineReplicas", "[]int32", "5+"),
                    ],
                ),
                Field("TopicAuthorizedOperations", "int32", "8+", default=AUTHORIZED_OPERATIONS_OMITTED),
            ],
        ),
        Field("ClusterAuthorizedOperations", "int32", "8-10", default=AUTHORIZED_OPERATIONS_OMITTED),
        Field("ErrorCode", "int16", "13+"),
    ],
)
