"""ListGroups (API key 16): the groups a coordinator hosts.

Versions 0-5; flexible from 3. v4 adds ``StatesFilter`` / ``GroupState``, v5 ``TypesFilter`` / ``GroupType``.
Definitions mirror Kafka's ListGroupsRequest.json / ListGroupsResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.LIST_GROUPS

REQUEST = Message(
    "ListGroupsRequest",
    api_key=API_KEY,
    versions="0-5",
    flexible="3+",
    fields=[Field("StatesFilter", "[]string", "4+"), Field("TypesFilter", "[]string", "5+")],
)

RESPONSE = Message(
    "ListGroupsResponse",
    api_key=API_KEY,
    versions="0-5",
    flexible="3+",
    fields=[
        Field("ThrottleTimeMs", "int32", "1+"),
        Field("ErrorCode", "int16", "0+"),
        Field(
            "Groups",
            "[]ListedGroup",
            "0+",
            fields=[
                Field("GroupId", "string", "0+"),
                Field("ProtocolType", "string", "0+"),
                Field("GroupState", "string", "4+"),
                Field("GroupType", "string", "5+"),
            ],
        ),
    ],
)
