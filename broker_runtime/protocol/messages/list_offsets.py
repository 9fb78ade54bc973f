"""ListOffsets (API key 2): the offset for a timestamp in each requested partition.

Versions 0-8; flexible from 6. Timestamps: -1 latest (high watermark, or last stable offset under
read_committed), -2 earliest (log start offset), -3 the offset of the largest timestamp (v7+), otherwise the
first offset whose timestamp is at least the given milliseconds. v0 answers with ``OldStyleOffsets`` (up to
``MaxNumOffsets`` offsets); v1+ with one ``Timestamp``/``Offset`` pair. ``IsolationLevel`` from v2,
``CurrentLeaderEpoch``/``LeaderEpoch`` from v4. Definitions mirror Kafka's ListOffsetsRequest.json /
ListOffsetsResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = [
    "API_KEY",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "REQUEST",
    "RESPONSE",
]

API_KEY = ApiKey.LIST_OFFSETS
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # v8+: the local log start offset (no tiered storage: the log start offset)

REQUEST = Message(
    "ListOffsetsRequest",
    api_key=API_KEY,
    versions="0-8",
    flexible="6+",
    fields=[
        Field("ReplicaId", "int32", "0+"),
        Field("IsolationLevel", "int8", "2+"),
        Field(
            "Topics",
            "[]ListOffsetsTopic",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]ListOffsetsPartition",
                    "0+",
                    fields=[
                        Field("PartitionIndex", "int32", "0+"),
                        Field("CurrentLeaderEpoch", "int32", "4+", default=-1),
                        Field("Timestamp", "int64", "0+"),
                        Field("MaxNumOffsets", "int32", "0", default=1),
                    ],
                ),
            ],
        ),
    ],
)

RESPONSE = Message(
    "ListOffsetsResponse",
    api_key=API_KEY,
    versions="0-8",
    flexible="6+",
    fields=[
        Field("ThrottleTimeMs", "int32", "2+"),
        Field(
            "Topics",
            "[]ListOffsetsTopicResponse",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]ListOffsetsPartitionResponse",
                    "0+",
                    fields=[
                        Field("PartitionIndex", "int32", "0+"),
                        Field("ErrorCode", "int16", "0+"),
                        Field("OldStyleOffsets", "[]int64", "0"),
                        Field("Timestamp", "int64", "1+", default=-1),
                        Field("Offset", "int64", "1+", default=-1),
                        Field("LeaderEpoch", "int32", "4+", default=-1),
                    ],
                ),
            ],
        ),
    ],
)
