"""DescribeProducers (API key 61): the active idempotent/transactional producers of partitions (KIP-664).

Version 0; flexible. Sent to each partition's leader. Definitions mirror Kafka's DescribeProducersRequest.json /
DescribeProducersResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.DESCRIBE_PRODUCERS

REQUEST = Message(
    "DescribeProducersRequest",
    api_key=API_KEY,
    versions="0",
    flexible="0+",
    fields=[
        Field(
            "Topics",
            "[]TopicRequest",
            "0+",
            fields=[Field("Name", "string", "0+"), Field("PartitionIndexes", "[]int32", "0+")],
        ),
    ],
)

RESPONSE = Message(
    "DescribeProducersResponse",
    api_key=API_KEY,
    versions="0",
    flexible="0+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Topics",
            "[]TopicResponse",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "Partitions",
                    "[]PartitionResponse",
                    "0+",
                    fields=[
                        Field("PartitionIndex", "int32", "0+"),
                        Field("ErrorCode", "int16", "0+"),
                        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
                        Field(
                            "ActiveProducers",
                            "[]ProducerState",
                            "0+",
                            fields=[
                                Field("ProducerId", "int64", "0+"),
                                Field("ProducerEpoch", "int32", "0+"),
                                Field("LastSequence", "int32", "0+", default=-1),
                                Field("LastTimestamp", "int64", "0+", default=-1),
                                Field("CoordinatorEpoch", "int32", "0+"),
                                Field("CurrentTxnStartOffset", "int64", "0+", default=-1),
                            ],
                        ),
                    ],
                ),
            ],
        ),
    ],
)
