"""DescribeGroups (API key 15): state, protocol and members (with metadata and assignment) of groups.

Versions 0-6; flexible from 5. v3 adds ``AuthorizedOperations``, v4 the members' ``GroupInstanceId``, v6 an
``ErrorMessage``. Definitions mirror Kafka's DescribeGroupsRequest.json / DescribeGroupsResponse.json.
Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.DESCRIBE_GROUPS

REQUEST = Message(
    "DescribeGroupsRequest",
    api_key=API_KEY,
    versions="0-6",
    flexible="5+",
    fields=[Field("Groups", "[]string", "0+"), Field("IncludeAuthorizedOperations", "bool", "3+")],
)

RESPONSE = Message(
    "DescribeGroupsResponse",
    api_key=API_KEY,
    versions="0-6",
    flexible="5+",
    fields=[
        Field("ThrottleTimeMs", "int32", "1+"),
        Field(
            "Groups",
            "[]DescribedGroup",
            "0+",
            fields=[
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "6+", nullable="6+", default=None),
                Field("GroupId", "string", "0+"),
                Field("GroupState", "string", "0+"),
                Field("ProtocolType", "string", "0+"),
                Field("ProtocolData", "string", "0+"),
                Field(
                    "Members",
                    "[]DescribedGroupMember",
                    "0+",
                    fields=[
                        Field("MemberId", "string", "0+"),
                        Field("GroupInstanceId", "string", "4+", nullable="4+", default=None),
                        Field("ClientId", "string", "0+"),
                        Field("ClientHost", "string", "0+"),
                        Field("MemberMetadata", "bytes", "0+"),
                        Field("MemberAssignment", "bytes", "0+"),
                    ],
                ),
                Field("AuthorizedOperations", "int32", "3+", default=-(2**31)),
            ],
        ),
    ],
)
