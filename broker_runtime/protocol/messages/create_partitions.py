"""CreatePartitions (API key 37): raise the partition count of topics (sent to the controller).

Versions 0-3; flexible from 2. ``Count`` is the new total; ``Assignments`` (nullable) lists the replicas of each
new partition. Definitions mirror Kafka's CreatePartitionsRequest.json / CreatePartitionsResponse.json.
Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.CREATE_PARTITIONS

REQUEST = Message(
    "CreatePartitionsRequest",
    api_key=API_KEY,
    versions="0-3",
    flexible="2+",
    fields=[
        Field(
            "Topics",
            "[]CreatePartitionsTopic",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field("Count", "int32", "0+"),
                Field(
                    "Assignments",
                    "[]CreatePartitionsAssignment",
                    "0+",
                    nullable="0+",
                    default=None,
                    fields=[Field("BrokerIds", "[]int32", "0+")],
                ),
            ],
        ),
        Field("TimeoutMs", "int32", "0+", default=30000),
        Field("ValidateOnly", "bool", "0+"),
    ],
)

RESPONSE = Message(
    "CreatePartitionsResponse",
    api_key=API_KEY,
    versions="0-3",
    flexible="2+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Results",
            "[]CreatePartitionsTopicResult",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            ],
        ),
    ],
)
