"""FindCoordinator (API key 10): the broker coordinating a consumer group (key type 0) or transaction (1).

Versions 0-5; flexible from 3; v5 is v4 (it lets the broker answer TRANSACTION_ABORTABLE, KIP-890). v0-3 look
up one ``Key`` and answer one node; v4 looks up ``CoordinatorKeys`` and answers a ``Coordinators`` array.
Definitions mirror Kafka's FindCoordinatorRequest.json / FindCoordinatorResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "KEY_TYPE_GROUP", "KEY_TYPE_TRANSACTION", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.FIND_COORDINATOR
#: ``KeyType`` values (Kafka's ``FindCoordinatorRequest.CoordinatorType``).
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

REQUEST = Message(
    "FindCoordinatorRequest",
    api_key=API_KEY,
    versions="0-5",
    flexible="3+",
    fields=[
        Field("Key", "string", "0-3"),
        Field("KeyType", "int8", "1+", default=KEY_TYPE_GROUP),
        Field("CoordinatorKeys", "[]string", "4+"),
    ],
)

RESPONSE = Message(
    "FindCoordinatorResponse",
    api_key=API_KEY,
    versions="0-5",
    flexible="3+",
    fields=[
        Field("ThrottleTimeMs", "int32", "1+"),
        Field("ErrorCode", "int16", "0-3"),
        Field("ErrorMessage", "string", "1-3", nullable="1-3"),
        Field("NodeId", "int32", "0-3"),
        Field("Host", "string", "0-3"),
        Field("Port", "int32", "0-3"),
        Field(
            "Coordinators",
            "[]Coordinator",
            "4+",
            fields=[
                Field("Key", "string", "4+"),
                Field("NodeId", "int32", "4+"),
                Field("Host", "string", "4+"),
                Field("Port", "int32", "4+"),
                Field("ErrorCode", "int16", "4+"),
                Field("ErrorMessage", "string", "4+", nullable="4+"),
            ],
        ),
    ],
)
