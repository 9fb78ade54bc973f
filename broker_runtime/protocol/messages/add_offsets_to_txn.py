"""AddOffsetsToTxn (API key 25): a transactional producer is about to commit a group's offsets in its
transaction.

Versions 0-4; flexible from 3. Definitions mirror Kafka's AddOffsetsToTxnRequest.json /
AddOffsetsToTxnResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN

REQUEST = Message(
    "AddOffsetsToTxnRequest",
    api_key=API_KEY,
    versions="0-4",
    flexible="3+",
    fields=[
        Field("TransactionalId", "string", "0+"),
        Field("ProducerId", "int64", "0+"),
        Field("ProducerEpoch", "int16", "0+"),
        Field("GroupId", "string", "0+"),
    ],
)

RESPONSE = Message(
    "AddOffsetsToTxnResponse",
    api_key=API_KEY,
    versions="0-4",
    flexible="3+",
    fields=[Field("ThrottleTimeMs", "int32", "0+"), Field("ErrorCode", "int16", "0+")],
)
