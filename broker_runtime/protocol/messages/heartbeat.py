"""Heartbeat (API key 12): a member of a classic group says it is alive and learns of rebalances.

Versions 0-4; flexible from 4; v3 adds ``GroupInstanceId``. Definitions mirror Kafka's HeartbeatRequest.json /
HeartbeatResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.HEARTBEAT

REQUEST = Message(
    "HeartbeatRequest",
    api_key=API_KEY,
    versions="0-4",
    flexible="4+",
    fields=[
        Field("GroupId", "string", "0+"),
        Field("GenerationId", "int32", "0+"),
        Field("MemberId", "string", "0+"),
        Field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
    ],
)

RESPONSE = Message(
    "HeartbeatResponse",
    api_key=API_KEY,
    versions="0-4",
    flexible="4+",
    fields=[Field("ThrottleTimeMs", "int32", "1+"), Field("ErrorCode", "int16", "0+")],
)
