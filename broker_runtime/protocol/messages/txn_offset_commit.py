"""TxnOffsetCommit (API key 28): a transactional producer commits a group's offsets inside its transaction.

Versions 0-5; flexible from 3; v4 is v3 (it lets the broker answer TRANSACTION_ABORTABLE, KIP-890); v5 is v4
(its producer relies on the broker to add the offsets partition to its transaction: transaction version 2). v2 adds
the leader epoch; v3 the group generation, member id and group instance id (KIP-447), so the coordinator can
fence a zombie member. Definitions mirror Kafka's TxnOffsetCommitRequest.json / TxnOffsetCommitResponse.json.
Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.TXN_OFFSET_COMMIT

REQUEST = Message(
    "TxnOffsetCommitRequest",
    api_key=API_KEY,
    versions="0-5",
    flexible="3+",
    fields=[
        Field("TransactionalId", "string", "0+"),
        Field("GroupId", "string", "0+"),
        Field("ProducerId", "int64", "0+"),
        Field("ProducerEpoch", "int16", "0+"),
        Field("GenerationId", "int32", "3+", default=-1),
        Field("MemberId", "string", "3+", default=""),
        Field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
        Field(
            "Topics",
            "[]TxnOffsetCommitRequestTopic",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]TxnOffsetCommitRequestPartition",
                    "0+",
                    fields=[
                        Field("PartitionIndex", "int32", "0+"),
                        Field("CommittedOffset", "int64", "0+"),
                        Field("CommittedLeaderEpoch", "int32", "2+", default=-1),
                        Field("CommittedMetadata", "string", "0+", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

RESPONSE = Message(
    "TxnOffsetCommitResponse",
    api_key=API_KEY,
    versions="0-5",
    flexible="3+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Topics",
            "[]TxnOffsetCommitResponseTopic",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]TxnOffsetCommitResponsePartition",
                    "0+",
                    fields=[Field("PartitionIndex", "int32", "0+"), Field("ErrorCode", "int16", "0+")],
                ),
            ],
        ),
    ],
)
