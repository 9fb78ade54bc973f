"""DescribeLogDirs (API key 35): the log directories of one broker and the size of each partition in them.

Versions 0-5; flexible from 2. ``Topics`` null means every partition. v3 adds a top-level ``ErrorCode``, v4 each
directory's ``TotalBytes``/``UsableBytes``, v5 its
``IsCordoned`` (KIP-1066). Definitions mirror Kafka's DescribeLogDirsRequest.json /
DescribeLogDirsResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.DESCRIBE_LOG_DIRS

REQUEST = Message(
    "DescribeLogDirsRequest",
    api_key=API_KEY,
    versions="0-5",
    flexible="2+",
    fields=[
        Field(
            "Topics",
            "[]DescribableLogDirTopic",
            "0+",
            nullable="0+",
            default=None,
            fields=[Field("Topic", "string", "0+"), Field("Partitions", "[]int32", "0+")],
        ),
    ],
)

RESPONSE = Message(
    "DescribeLogDirsResponse",
    api_key=API_KEY,
    versions="0-5",
    flexible="2+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "3+"),
        Field(
            "Results",
            "[]DescribeLogDirsResult",
            "0+",
            fields=[
                Field("ErrorCode", "int16", "0+"),
                Field("LogDir", "string", "0+"),
                Field(
                    "Topics",
                    "[]DescribeLogDirsTopic",
                    "0+",
                    fields=[
                        Field("Name", "string", "0+"),
                        Field(
                            "Partitions",
                            "[]DescribeLogDirsPartition",
                            "0+",
                            fields=[
                                Field("PartitionIndex", "int32", "0+"),
                                Field("PartitionSize", "int64", "0+"),
                                Field("OffsetLag", "int64", "0+"),
                                Field("IsFutureKey", "bool", "0+"),
                            ],
                        ),
                    ],
                ),
                Field("TotalBytes", "int64", "4+", default=-1),
                Field("UsableBytes", "int64", "4+", default=-1),
                Field("IsCordoned", "bool", "5+"),
            ],
        ),
    ],
)
