"""SyncGroup (API key 14): members of a generation collect their assignment (the leader sends them all).

Versions 0-5; flexible from 4. v3 adds ``GroupInstanceId``; v5 ``ProtocolType`` / ``ProtocolName``.
Definitions mirror Kafka's SyncGroupRequest.json / SyncGroupResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.SYNC_GROUP

REQUEST = Message(
    "SyncGroupRequest",
    api_key=API_KEY,
    versions="0-5",
    flexible="4+",
    fields=[
        Field("GroupId", "string", "0+"),
        Field("GenerationId", "int32", "0+"),
        Field("MemberId", "string", "0+"),
        Field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
        Field("ProtocolType", "string", "5+", nullable="5+", default=None),
        Field("ProtocolName", "string", "5+", nullable="5+", default=None),
        Field(
            "Assignments",
            "[]SyncGroupRequestAssignment",
            "0+",
            fields=[Field("MemberId", "string", "0+"), Field("Assignment", "bytes", "0+")],
        ),
    ],
)

RESPONSE = Message(
    "SyncGroupResponse",
    api_key=API_KEY,
    versions="0-5",
    flexible="4+",
    fields=[
        Field("ThrottleTimeMs", "int32", "1+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ProtocolType", "string", "5+", nullable="5+", default=None),
        Field("ProtocolName", "string", "5+", nullable="5+", default=None),
        Field("Assignment", "bytes", "0+"),
    ],
)
