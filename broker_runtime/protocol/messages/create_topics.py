"""CreateTopics (API key 19): create topics with a partition count and replication factor (or assignments).

Versions 0-7; flexible from 5. Sent to the controller. ``NumPartitions``/``ReplicationFactor`` of -1 mean the
broker defaults (v4+). ``validateOnly`` from v1 (the JSON spells ``timeoutMs``/``validateOnly`` in lower camel
case; so do we). The response echoes the resolved partitions, replication factor and configs from v5 and the
topic id from v7. Definitions mirror Kafka's CreateTopicsRequest.json / CreateTopicsResponse.json.
Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "NO_NUM_PARTITIONS", "NO_REPLICATION_FACTOR", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.CREATE_TOPICS
#: ``NumPartitions`` / ``ReplicationFactor`` meaning "the broker's default" (or: given by ``Assignments``).
NO_NUM_PARTITIONS = -1
NO_REPLICATION_FACTOR = -1

REQUEST = Message(
    "CreateTopicsRequest",
    api_key=API_KEY,
    versions="0-7",
    flexible="5+",
    fields=[
        Field(
            "Topics",
            "[]CreatableTopic",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field("NumPartitions", "int32", "0+"),
                Field("ReplicationFactor", "int16", "0+"),
                Field(
                    "Assignments",
                    "[]CreatableReplicaAssignment",
                    "0+",
                    fields=[
                        Field("PartitionIndex", "int32", "0+"),
                        Field("BrokerIds", "[]int32", "0+"),
                    ],
                ),
                Field(
                    "Configs",
                    "[]CreatableTopicConfig",
                    "0+",
                    fields=[
                        Field("Name", "string", "0+"),
                        Field("Value", "string", "0+", nullable="0+"),
                    ],
                ),
            ],
        ),
        Field("timeoutMs", "int32", "0+", default=60000),
        Field("validateOnly", "bool", "1+", default=False),
    ],
)

RESPONSE = Message(
    "CreateTopicsResponse",
    api_key=API_KEY,
    versions="0-7",
    flexible="5+",
    fields=[
        Field("ThrottleTimeMs", "int32", "2+"),
        Field(
            "Topics",
            "[]CreatableTopicResult",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field("TopicId", "uuid", "7+"),
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "1+", nullable="0+"),
                Field("TopicConfigErrorCode", "int16", "5+", tag=0, tagged="5+"),
                Field("NumPartitions", "int32", "5+", default=-1),
                Field("ReplicationFactor", "int16", "5+", default=-1),
                Field(
                    "Configs",
                    "[]CreatableTopicConfigs",
                    "5+",
                    nullable="5+",
                    fields=[
                        Field("Name", "string", "5+"),
                        Field("Value", "string", "5+", nullable="5+"),
                        Field("ReadOnly", "bool", "5+"),
                        Field("ConfigSource", "int8", "5+", default=-1),
                        Field("IsSensitive", "bool", "5+"),
                    ],
                ),
            ],
        ),
    ],
)
