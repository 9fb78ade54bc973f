"""AddPartitionsToTxn (API key 24): a transactional producer names the partitions it is about to write.

Versions 0-5; flexible from 3. v0-3 carry one transaction (``V3AndBelow*`` fields) and answer
``ResultsByTopicV3AndBelow``; v4+ batch several transactions (``Transactions``, ``VerifyOnly``: KIP-890's
broker-to-coordinator verification) and answer ``ResultsByTransaction``. Definitions mirror Kafka's
AddPartitionsToTxnRequest.json / AddPartitionsToTxnResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN


def _topics(name: str, versions: str) -> Field:
    return Field(
        name,
        "[]AddPartitionsToTxnTopic",
        versions,
        fields=[Field("Name", "string", "0+"), Field("Partitions", "[]int32", "0+")],
    )


def _topic_results(name: str, versions: str) -> Field:
    return Field(
        name,
        "[]AddPartitionsToTxnTopicResult",
        versions,
        fields=[
            Field("Name", "string", "0+"),
            Field(
                "ResultsByPartition",
                "[]AddPartitionsToTxnPartitionResult",
                "0+",
                fields=[Field("PartitionIndex", "int32", "0+"), Field("PartitionErrorCode", "int16", "0+")],
            ),
        ],
    )


REQUEST = Message(
    "AddPartitionsToTxnRequest",
    api_key=API_KEY,
    versions="0-5",
    flexible="3+",
    fields=[
        Field(
            "Transactions",
            "[]AddPartitionsToTxnTransaction",
            "4+",
            fields=[
                Field("TransactionalId", "string", "4+"),
                Field("ProducerId", "int64", "4+"),
                Field("ProducerEpoch", "int16", "4+"),
                Field("VerifyOnly", "bool", "4+", default=False),
                _topics("Topics", "4+"),
            ],
        ),
        Field("V3AndBelowTransactionalId", "string", "0-3"),
        Field("V3AndBelowProducerId", "int64", "0-3"),
        Field("V3AndBelowProducerEpoch", "int16", "0-3"),
        _topics("V3AndBelowTopics", "0-3"),
    ],
)

RESPONSE = Message(
    "AddPartitionsToTxnResponse",
    api_key=API_KEY,
    versions="0-5",
    flexible="3+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "4+"),
        Field(
            "ResultsByTransaction",
            "[]AddPartitionsToTxnResult",
            "4+",
            fields=[Field("TransactionalId", "string", "4+"), _topic_results("TopicResults", "4+")],
        ),
        _topic_results("ResultsByTopicV3AndBelow", "0-3"),
    ],
)
