"""JoinGroup (API key 11): a member joins (or rejoins) a classic consumer group.

Versions 0-9; flexible from 6. From v4 a member without a member id is answered MEMBER_ID_REQUIRED with its new
id and joins again with it (KIP-394); v5 adds ``GroupInstanceId`` (static membership, KIP-345); v8 ``Reason``.
Definitions mirror Kafka's JoinGroupRequest.json / JoinGroupResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.JOIN_GROUP

REQUEST = Message(
    "JoinGroupRequest",
    api_key=API_KEY,
    versions="0-9",
    flexible="6+",
    fields=[
        Field("GroupId", "string", "0+"),
        Field("SessionTimeoutMs", "int32", "0+"),
        Field("RebalanceTimeoutMs", "int32", "1+", default=-1),
        Field("MemberId", "string", "0+"),
        Field("GroupInstanceId", "string", "5+", nullable="5+", default=None),
        Field("ProtocolType", "string", "0+"),
        Field(
            "Protocols",
            "[]JoinGroupRequestProtocol",
            "0+",
            fields=[Field("Name", "string", "0+"), Field("Metadata", "bytes", "0+")],
        ),
        Field("Reason", "string", "8+", nullable="8+", default=None),
    ],
)

RESPONSE = Message(
    "JoinGroupResponse",
    api_key=API_KEY,
    versions="0-9",
    flexible="6+",
    fields=[
        Field("ThrottleTimeMs", "int32", "2+"),
        Field("ErrorCode", "int16", "0+"),
        Field("GenerationId", "int32", "0+", default=-1),
        Field("ProtocolType", "string", "7+", nullable="7+", default=None),
        Field("ProtocolName", "string", "0+", nullable="7+"),
        Field("Leader", "string", "0+"),
        Field("SkipAssignment", "bool", "9+"),
        Field("MemberId", "string", "0+"),
        Field(
            "Members",
            "[]JoinGroupResponseMember",
            "0+",
            fields=[
                Field("MemberId", "string", "0+"),
                Field("GroupInstanceId", "string", "5+", nullable="5+", default=None),
                Field("Metadata", "bytes", "0+"),
            ],
        ),
    ],
)
