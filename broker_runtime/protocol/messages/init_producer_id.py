"""InitProducerId (API key 22): allocate (or bump the epoch of) a producer id for idempotence/transactions.

Versions 0-5; flexible from 2; v5 is v4 (it lets the broker answer TRANSACTION_ABORTABLE, KIP-890).
``ProducerId``/``ProducerEpoch`` in the request from v3 (-1 = new producer). Definitions mirror Kafka's
InitProducerIdRequest.json / InitProducerIdResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.INIT_PRODUCER_ID

REQUEST = Message(
    "InitProducerIdRequest",
    api_key=API_KEY,
    versions="0-5",
    flexible="2+",
    fields=[
        Field("TransactionalId", "string", "0+", nullable="0+"),
        Field("TransactionTimeoutMs", "int32", "0+"),
        Field("ProducerId", "int64", "3+", default=-1),
        Field("ProducerEpoch", "int16", "3+", default=-1),
    ],
)

RESPONSE = Message(
    "InitProducerIdResponse",
    api_key=API_KEY,
    versions="0-5",
    flexible="2+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ProducerId", "int64", "0+", default=-1),
        Field("ProducerEpoch", "int16", "0+"),
    ],
)
