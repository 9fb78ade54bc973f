"""Produce (API key 0): record batches for topic partitions, answered with the assigned base offsets.

Versions 0-12; flexible from 9; v12 is v11 (its producer relies on the partition leader to add the
partition to its transaction: transaction version 2, KIP-890). ``TransactionalId`` from v3 (v3+ carries exactly one magic-2 batch set per
partition), ``LogStartOffset`` in the response from v5, ``RecordErrors``/``ErrorMessage`` from v8, the
``CurrentLeader``/``NodeEndpoints`` tagged fields from v10. ``ThrottleTimeMs`` comes AFTER ``Responses``.
``Records`` decode as zero-copy memoryviews and are never parsed here. An ``Acks`` of 0 gets no response.
Definitions mirror Kafka's ProduceRequest.json / ProduceResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["ACKS_ALL", "ACKS_LEADER", "ACKS_NONE", "API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.PRODUCE
#: ``Acks`` values: wait for every in-sync replica, for the leader's append only, or for nothing (no response).
ACKS_ALL = -1
ACKS_LEADER = 1
ACKS_NONE = 0

REQUEST = Message(
    "ProduceRequest",
    api_key=API_KEY,
    versions="0-12",
    flexible="9+",
    fields=[
        Field("TransactionalId", "string", "3+", nullable="3+", default=None),
        Field("Acks", "int16", "0+"),
        Field("TimeoutMs", "int32", "0+"),
        Field(
            "TopicData",
            "[]TopicProduceData",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "PartitionData",
                    "[]PartitionProduceData",
                    "0+",
                    fields=[
                        Field("Index", "int32", "0+"),
                        Field("Records", "records", "0+", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

RESPONSE = Message(
    "ProduceResponse",
    api_key=API_KEY,
    versions="0-12",
    flexible="9+",
    fields=[
        Field(
            "Responses",
            "[]TopicProduceResponse",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field(
                    "PartitionResponses",
                    "[]PartitionProduceResponse",
                    "0+",
                    fields=[
                        Field("Index", "int32", "0+"),
                        Field("ErrorCode", "int16", "0+"),
                        Field("BaseOffset", "int64", "0+"),
                        Field("LogAppendTimeMs", "int64", "2+", default=-1),
                        Field("LogStartOffset", "int64", "5+", default=-1),
                        Field(
                            "RecordErrors",
                            "[]BatchIndexAndErrorMessage",
                            "8+",
                            fields=[
                                Field("BatchIndex", "int32", "8+"),
                                Field("BatchIndexErrorMessage", "string", "8+", nullable="8+", default=None),
                            ],
                        ),
                        Field("ErrorMessage", "string", "8+", nullable="8+", default=None),
                        Field(
                            "CurrentLeader",
                            "LeaderIdAndEpoch",
                            "10+",
                            tag=0,
                            tagged="10+",
                            fields=[
                                Field("LeaderId", "int32", "10+", default=-1),
                                Field("LeaderEpoch", "int32", "10+", default=-1),
                            ],
                        ),
                    ],
                ),
            ],
        ),
        Field("ThrottleTimeMs", "int32", "1+", default=0),
        Field(
            "NodeEndpoints",
            "[]NodeEndpoint",
            "10+",
            tag=0,
            tagged="10+",
            fields=[
                Field("NodeId", "int32", "10+"),
                Field("Host", "string", "10+"),
                Field("Port", "int32", "10+"),
                Field("Rack", "string", "10+", nullable="10+", default=None),
            ],
        ),
    ],
)
