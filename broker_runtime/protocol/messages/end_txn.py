"""EndTxn (API key 26): commit or abort a producer's transaction.

Versions 0-5; flexible from 3. v5 (transaction version 2, KIP-890) answers the producer id and epoch to use
next. Definitions mirror Kafka's EndTxnRequest.json / EndTxnResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.END_TXN

REQUEST = Message(
    "EndTxnRequest",
    api_key=API_KEY,
    versions="0-5",
    flexible="3+",
    fields=[
        Field("TransactionalId", "string", "0+"),
        Field("ProducerId", "int64", "0+"),
        Field("ProducerEpoch", "int16", "0+"),
        Field("Committed", "bool", "0+"),
    ],
)

RESPONSE = Message(
    "EndTxnResponse",
    api_key=API_KEY,
    versions="0-5",
    flexible="3+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ProducerId", "int64", "5+", default=-1),
        Field("ProducerEpoch", "int16", "5+", default=-1),
    ],
)
