"""OffsetCommit (API key 8): a group's consumed positions, stored by its coordinator.

Versions 0-9; flexible from 8. v1 adds the generation and member id (named ``GenerationIdOrMemberEpoch`` as in
Kafka's current spec) and a per-partition commit timestamp (v1 only); v2-4 a retention time (ignored: retention
is the broker's ``offsets.retention.minutes``, as Kafka from v5); v6 the leader epoch; v7 ``GroupInstanceId``.
v9 is v8 on the wire (the first version of the consumer group protocol, KIP-848); v10+ (topic ids) is not served.
Definitions mirror Kafka's OffsetCommitRequest.json / OffsetCommitResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.OFFSET_COMMIT

REQUEST = Message(
    "OffsetCommitRequest",
    api_key=API_KEY,
    versions="0-9",
    flexible="8+",
    fields=[
        Field("GroupId", "string", "0+"),
        Field("GenerationIdOrMemberEpoch", "int32", "1+", default=-1),
        Field("MemberId", "string", "1+"),
        Field("GroupInstanceId", "string", "7+", nullable="7+", default=None),
        Field("RetentionTimeMs", "int64", "2-4", default=-1),
        Field(
            "Topics",
            "[]OffsetCommitRequestTopic",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]OffsetCommitRequestPartition",
                    "0+",
                    fields=[
                        Field("PartitionIndex", "int32", "0+"),
                        Field("CommittedOffset", "int64", "0+"),
                        Field("CommittedLeaderEpoch", "int32", "6+", default=-1),
                        Field("CommitTimestamp", "int64", "1", default=-1),
                        Field("CommittedMetadata", "string", "0+", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

RESPONSE = Message(
    "OffsetCommitResponse",
    api_key=API_KEY,
    versions="0-9",
    flexible="8+",
    fields=[
        Field("ThrottleTimeMs", "int32", "3+"),
        Field(
            "Topics",
            "[]OffsetCommitResponseTopic",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]OffsetCommitResponsePartition",
                    "0+",
                    fields=[Field("PartitionIndex", "int32", "0+"), Field("ErrorCode", "int16", "0+")],
                ),
            ],
        ),
    ],
)
