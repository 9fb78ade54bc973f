"""DeleteRecords (API key 21): move the log start offset of partitions (sent to each partition's leader).

Versions 0-2; flexible from 2. ``Offset`` -1 means the high watermark. The answer per partition is the new
``LowWatermark`` (the log start offset). Definitions mirror Kafka's DeleteRecordsRequest.json /
DeleteRecordsResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "HIGH_WATERMARK", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.DELETE_RECORDS
#: ``Offset`` meaning "up to the high watermark".
HIGH_WATERMARK = -1

REQUEST = Message(
    "DeleteRecordsRequest",
    api_key=API_KEY,
    versions="0-2",
    flexible="2+",
    fields=[
        Field(
            "Topics",
            "[]DeleteRecordsTopic",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]DeleteRecordsPartition",
                    "0+",
                    fields=[Field("PartitionIndex", "int32", "0+"), Field("Offset", "int64", "0+")],
                ),
            ],
        ),
        Field("TimeoutMs", "int32", "0+", default=30000),
    ],
)

RESPONSE = Message(
    "DeleteRecordsResponse",
    api_key=API_KEY,
    versions="0-2",
    flexible="2+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Topics",
            "[]DeleteRecordsTopicResult",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]DeleteRecordsPartitionResult",
                    "0+",
                    fields=[
                        Field("PartitionIndex", "int32", "0+"),
                        Field("LowWatermark", "int64", "0+", default=-1),
                        Field("ErrorCode", "int16", "0+"),
                    ],
                ),
            ],
        ),
    ],
)
