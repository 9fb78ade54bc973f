"""LeaveGroup (API key 13): members leave a classic group (a rebalance follows).

Versions 0-5; flexible from 4. v0-2 name one ``MemberId``; from v3 a batch of ``Members`` (member id and/or
group instance id, KIP-345), answered per member; v5 adds ``Reason``. Definitions mirror Kafka's
LeaveGroupRequest.json / LeaveGroupResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.LEAVE_GROUP

REQUEST = Message(
    "LeaveGroupRequest",
    api_key=API_KEY,
    versions="0-5",
    flexible="4+",
    fields=[
        Field("GroupId", "string", "0+"),
        Field("MemberId", "string", "0-2"),
        Field(
            "Members",
            "[]MemberIdentity",
            "3+",
            fields=[
                Field("MemberId", "string", "3+"),
                Field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
                Field("Reason", "string", "5+", nullable="5+", default=None),
            ],
        ),
    ],
)

RESPONSE = Message(
    "LeaveGroupResponse",
    api_key=API_KEY,
    versions="0-5",
    flexible="4+",
    fields=[
        Field("ThrottleTimeMs", "int32", "1+"),
        Field("ErrorCode", "int16", "0+"),
        Field(
            "Members",
            "[]MemberResponse",
            "3+",
            fields=[
                Field("MemberId", "string", "3+"),
                Field("GroupInstanceId", "string", "3+", nullable="3+"),
                Field("ErrorCode", "int16", "3+"),
            ],
        ),
    ],
)
