"""OffsetDelete (API key 47): remove a group's committed offsets of some partitions (KIP-496).

Version 0 only, not flexible. Definitions mirror Kafka's OffsetDeleteRequest.json / OffsetDeleteResponse.json.
Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.OFFSET_DELETE

REQUEST = Message(
    "OffsetDeleteRequest",
    api_key=API_KEY,
    versions="0",
    flexible="none",
    fields=[
        Field("GroupId", "string", "0+"),
        Field(
            "Topics",
            "[]OffsetDeleteRequestTopic",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]OffsetDeleteRequestPartition",
                    "0+",
                    fields=[Field("PartitionIndex", "int32", "0+")],
                ),
            ],
        ),
    ],
)

RESPONSE = Message(
    "OffsetDeleteResponse",
    api_key=API_KEY,
    versions="0",
    flexible="none",
    fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Topics",
            "[]OffsetDeleteResponseTopic",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]OffsetDeleteResponsePartition",
                    "0+",
                    fields=[Field("PartitionIndex", "int32", "0+"), Field("ErrorCode", "int16", "0+")],
                ),
            ],
        ),
    ],
)
