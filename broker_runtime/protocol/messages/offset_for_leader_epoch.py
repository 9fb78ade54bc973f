"""OffsetForLeaderEpoch (API key 23): where each requested leader epoch ends on the partition's leader.

Versions 0-4; flexible from 4. ``CurrentLeaderEpoch`` (fencing, KIP-320) from v2, ``ReplicaId`` from v3 (-1 a
consumer, a broker id a follower; default -2, "debugging"), the response's ``LeaderEpoch`` from v1 and
``ThrottleTimeMs`` from v2. Per partition the answer is the largest epoch the leader knows at or below the
requested one and the offset where that epoch's records end (the start of the next epoch, or the log end
offset for the latest), -1/-1 when undefined. Definitions mirror Kafka's OffsetForLeaderEpochRequest.json /
OffsetForLeaderEpochResponse.json (Kafka 4.0 drops request versions 0-1; pylog still reads them). Immutable;
thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "DEBUGGING_REPLICA_ID", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
#: ``ReplicaId`` of a request that names none (v0-2, or a debugging tool).
DEBUGGING_REPLICA_ID = -2

REQUEST = Message(
    "OffsetForLeaderEpochRequest",
    api_key=API_KEY,
    versions="0-4",
    flexible="4+",
    fields=[
        Field("ReplicaId", "int32", "3+", default=DEBUGGING_REPLICA_ID),
        Field(
            "Topics",
            "[]OffsetForLeaderTopic",
            "0+",
            fields=[
                Field("Topic", "string", "0+"),
                Field(
                    "Partitions",
                    "[]OffsetForLeaderPartition",
                    "0+",
                    fields=[
                        Field("Partition", "int32", "0+"),
                        Field("CurrentLeaderEpoch", "int32", "2+", default=-1),
                        Field("LeaderEpoch", "int32", "0+"),
                    ],
                ),
            ],
        ),
    ],
)

RESPONSE = Message(
    "OffsetForLeaderEpochResponse",
    api_key=API_KEY,
    versions="0-4",
    flexible="4+",
    fields=[
        Field("ThrottleTimeMs", "int32", "2+"),
        Field(
            "Topics",
            "[]OffsetForLeaderTopicResult",
            "0+",
            fields=[
                Field("Topic", "string", "0+"),
                Field(
                    "Partitions",
                    "[]OffsetForLeaderPartitionResult",
                    "0+",
                    fields=[
                        Field("ErrorCode", "int16", "0+"),
                        Field("Partition", "int32", "0+"),
                        Field("LeaderEpoch", "int32", "1+", default=-1),
                        Field("EndOffset", "int64", "0+"),
                    ],
                ),
            ],
        ),
    ],
)
