"""DescribeTransactions (API key 65): the coordinator's view of some transactional ids (admin tooling).

Version 0 only, flexible. ``TransactionState`` is Kafka's state name (``Empty``, ``Ongoing``,
``PrepareCommit``, ``PrepareAbort``, ``CompleteCommit``, ``CompleteAbort``, ``Dead``, ``PrepareEpochFence``).
Definitions mirror Kafka's DescribeTransactionsRequest.json / DescribeTransactionsResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS

REQUEST = Message(
    "DescribeTransactionsRequest",
    api_key=API_KEY,
    versions="0",
    flexible="0+",
    fields=[Field("TransactionalIds", "[]string", "0+")],
)

RESPONSE = Message(
    "DescribeTransactionsResponse",
    api_key=API_KEY,
    versions="0",
    flexible="0+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "TransactionStates",
            "[]TransactionState",
            "0+",
            fields=[
                Field("ErrorCode", "int16", "0+"),
                Field("TransactionalId", "string", "0+"),
                Field("TransactionState", "string", "0+"),
                Field("TransactionTimeoutMs", "int32", "0+"),
                Field("TransactionStartTimeMs", "int64", "0+"),
                Field("ProducerId", "int64", "0+"),
                Field("ProducerEpoch", "int16", "0+"),
                Field(
                    "Topics",
                    "[]TopicData",
                    "0+",
                    fields=[
                        Field("Topic", "string", "0+"),
                        Field("Partitions", "[]int32", "0+"),
                    ],
                ),
            ],
        ),
    ],
)
