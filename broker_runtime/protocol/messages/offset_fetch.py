"""OffsetFetch (API key 9): a group's committed offsets.

Versions 0-9; flexible from 6. From v2 a null ``Topics`` asks for every committed partition and the answer has a
top-level error code; v5 adds the leader epoch; v7 ``RequireStable``; v8 asks for several groups at once
(``Groups``, answered per group); v9 adds a group's ``MemberId`` and ``MemberEpoch`` (KIP-848: checked for groups of
the consumer group protocol only). v10+ (topic ids) is not served. Definitions mirror
Kafka's OffsetFetchRequest.json / OffsetFetchResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.OFFSET_FETCH

_PARTITION_FIELDS = [
    Field("PartitionIndex", "int32", "0+"),
    Field("CommittedOffset", "int64", "0+"),
    Field("CommittedLeaderEpoch", "int32", "5+", default=-1),
    Field("Metadata", "string", "0+", nullable="0+"),
    Field("ErrorCode", "int16", "0+"),
]

REQUEST = Message(
    "OffsetFetchRequest",
    api_key=API_KEY,
    versions="0-9",
    flexible="6+",
    fields=[
        Field("GroupId", "string", "0-7"),
        Field(
            "Topics",
            "[]OffsetFetchRequestTopic",
            "0-7",
            nullable="2-7",
            fields=[Field("Name", "string", "0-7"), Field("PartitionIndexes", "[]int32", "0-7")],
        ),
        Field(
            "Groups",
            "[]OffsetFetchRequestGroup",
            "8+",
            fields=[
                Field("GroupId", "string", "8+"),
                Field("MemberId", "string", "9+", nullable="9+", default=None),
                Field("MemberEpoch", "int32", "9+", default=-1),
                Field(
                    "Topics",
                    "[]OffsetFetchRequestTopics",
                    "8+",
                    nullable="8+",
                    fields=[Field("Name", "string", "8+"), Field("PartitionIndexes", "[]int32", "8+")],
                ),
            ],
        ),
        Field("RequireStable", "bool", "7+"),
    ],
)

RESPONSE = Message(
    "OffsetFetchResponse",
    api_key=API_KEY,
    versions="0-9",
    flexible="6+",
    fields=[
        Field("ThrottleTimeMs", "int32", "3+"),
        Field(
            "Topics",
            "[]OffsetFetchResponseTopic",
            "0-7",
            fields=[
                Field("Name", "string", "0-7"),
                Field("Partitions", "[]OffsetFetchResponsePartition", "0-7", fields=_PARTITION_FIELDS),
            ],
        ),
        Field("ErrorCode", "int16", "2-7"),
        Field(
            "Groups",
            "[]OffsetFetchResponseGroup",
            "8+",
            fields=[
                Field("GroupId", "string", "8+"),
                Field(
                    "Topics",
                    "[]OffsetFetchResponseTopics",
                    "8+",
                    fields=[
                        Field("Name", "string", "8+"),
                        Field(
                            "Partitions", "[]OffsetFetchResponsePartitions", "8+", fields=_PARTITION_FIELDS
                        ),
                    ],
                ),
                Field("ErrorCode", "int16", "8+"),
            ],
        ),
    ],
)
