"""ListTransactions (API key 66): the transactional ids a coordinator knows, filtered (admin tooling).

Versions 0-1, flexible. Empty ``StateFilters`` / ``ProducerIdFilters`` match everything; ``DurationFilter``
(v1, KIP-994) keeps transactions running longer than that many ms (-1: no filter). Definitions mirror Kafka's
ListTransactionsRequest.json / ListTransactionsResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.LIST_TRANSACTIONS

REQUEST = Message(
    "ListTransactionsRequest",
    api_key=API_KEY,
    versions="0-1",
    flexible="0+",
    fields=[
        Field("StateFilters", "[]string", "0+"),
        Field("ProducerIdFilters", "[]int64", "0+"),
        Field("DurationFilter", "int64", "1+", default=-1),
    ],
)

RESPONSE = Message(
    "ListTransactionsResponse",
    api_key=API_KEY,
    versions="0-1",
    flexible="0+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("UnknownStateFilters", "[]string", "0+"),
        Field(
            "TransactionStates",
            "[]TransactionState",
            "0+",
            fields=[
                Field("TransactionalId", "string", "0+"),
                Field("ProducerId", "int64", "0+"),
                Field("TransactionState", "string", "0+"),
            ],
        ),
    ],
)
